"""Build the feature matrix and client readiness.

Each probed feature's status comes with its evidence in one line, and each known client is READY
or NOT READY with the features that stop it.

A feature is `unsupported` when the server does not have it (a diagnosis says the route, the
method, the WebSocket upgrade or a stored response is not there), `breaking` when a client
breaks on the answer (a breaking finding, a failed answer, a failed check), `deviation` when
the answers break a reference but clients cope, else `pass`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from wirediff._support import clip, plural
from wirediff._types import Record
from wirediff.probe.expect import Problem, check, part, tool_calls
from wirediff.probe.features import Client, Feature
from wirediff.probe.grade import Graded

__all__ = [
    "STATUSES",
    "UNSUPPORTED_CODES",
    "ClientRow",
    "FeatureRow",
    "feature_row",
    "readiness",
]

STATUSES = ("pass", "deviation", "breaking", "unsupported")
"""Best to worst; a probe fails on `breaking` and `unsupported` (and `deviation` with --strict)."""
UNSUPPORTED_CODES = frozenset(
    {
        "endpoint_not_implemented",
        "method_not_allowed",
        "websocket_not_supported",
        "previous_response_not_found",
        "soft_error_200",
    }
)
"""Diagnoses that say the server has no such feature (not that it is broken)."""
EVIDENCE = 200
NODE_CLIENT = "openai-node"
"""The readiness row of openai-node, and how its SDK names itself in a `client` finding."""


@dataclass
class FeatureRow:
    id: str
    title: str
    status: str
    evidence: str
    """One line: the worst problem, or what passed."""
    client: str
    """Whose traffic it sent."""
    exchanges: list[str] = field(default_factory=list)
    """Ids of the probe's records for it."""
    problems: list[str] = field(default_factory=list)
    """Every problem found, worst first (the report lists them)."""
    whose: list[tuple[str, str]] = field(default_factory=list)
    """Each problem's severity and the one client it is about, or "" when it is about every client.

    The client is named as `openai-node`: a break only openai-node's helpers see stops
    openai-node alone."""

    def fails(self, strict: bool, client: str = "") -> bool:
        """Say whether the feature fails, for `client` when one is named."""
        failing = (
            ("breaking", "unsupported", "deviation") if strict else ("breaking", "unsupported")
        )
        if not client or not self.whose:
            return self.status in failing
        return any(s in failing and who in ("", client) for s, who in self.whose)


@dataclass
class ClientRow:
    id: str
    name: str
    blocking: list[str]
    """The features that stop it (their ids)."""
    needs: list[str]
    untested: list[str]
    """What it needs that this probe did not send (`--only`)."""
    captured: str = ""

    @property
    def state(self) -> str:
        """Name the row's readiness: `READY`, `NOT READY` or `NOT PROBED`.

        `READY`: every need probed and none failing. `NOT READY`: a need failing. `NOT PROBED`:
        nothing failing, but a need left out by `--only`, so the probe cannot say it is ready."""
        if self.blocking:
            return "NOT READY"
        return "NOT PROBED" if self.untested else "READY"

    @property
    def ready(self) -> bool:
        return self.state == "READY"


def _rank(status: str) -> int:
    return STATUSES.index(status)


def _failed(problem: Problem, codes: Sequence[str]) -> tuple[str, str]:
    """Grade a failed answer: unsupported when a diagnosis says the server has no such feature."""
    for code in codes:
        if code in UNSUPPORTED_CODES:
            return "unsupported", f"{problem.evidence} ({code})"
    named = codes[0] if codes else ""
    return "breaking", problem.evidence + (f" ({named})" if named else "")


def _passed(feature: Feature, records: Sequence[Record | None]) -> str:
    first = records[0] if records else None
    if first is None:
        return ""
    resp = part(first, "response")
    status = resp.get("status")
    parts = [str(status)]
    if "error" in feature.expect:
        parts.append("in OpenAI's error shape")
    calls = tool_calls(first) if "tool_calls" in feature.expect else 0
    if calls:
        parts.append(f"{calls} tool call{'s' if calls != 1 else ''}")
    if "structured" in feature.expect:
        parts.append("JSON valid under the request's schema")
    events = resp.get("events")
    if events:
        parts.append(plural(len(events), "event"))
    if len(records) > 1:
        parts.append(f"{len(records)} exchanges")
    return ", ".join(parts)


def _finding_client(finding: Mapping[str, str]) -> str:
    """Name the one client a finding is about, or "" for every client.

    A `client` finding of openai-node's SDK is openai-node's alone; every other finding is
    about every client."""
    if finding.get("kind") == "client" and finding.get("source", "").startswith(NODE_CLIENT):
        return NODE_CLIENT
    return ""


def feature_row(feature: Feature, records: Sequence[Record | None], graded: Graded) -> FeatureRow:
    """Grade one feature from its records and the analysis of the whole probe.

    The records come in `feature.exchanges` order, None where one was not recorded."""
    ids = [str(r["id"]) for r in records if r is not None]
    found: list[tuple[str, str, str]] = []
    earlier_failed = False
    for p in check(feature.expect, records):
        codes = graded.codes_for([p.record_id] if p.record_id else ids)
        if p.severity == "failed":
            found.append((*_failed(p, codes), ""))
            earlier_failed = True
        elif p.severity == "skipped":
            if not earlier_failed:  # what it continues answered: the continuation is the problem
                found.append(("deviation", p.evidence, ""))
        else:
            found.append((p.severity, p.evidence, ""))
    for row in graded.findings_for(ids, feature.sources):
        found.append((row["severity"], row["message"] or row["evidence"], _finding_client(row)))
    if feature.sources and not any(
        r is not None and part(r, "response").get("events") for r in records
    ):
        found.append(("unsupported", "no stream came back to check", ""))
    found.sort(key=lambda sf: -_rank(sf[0]))
    status = found[0][0] if found else "pass"
    evidence = found[0][1] if found else _passed(feature, records)
    return FeatureRow(
        feature.id,
        feature.title,
        status,
        clip(" ".join(evidence.split()), EVIDENCE),
        feature.client,
        ids,
        [f"{s}: {clip(' '.join(e.split()), EVIDENCE)}" for s, e, _ in found],
        [(s, who) for s, _, who in found],
    )


def readiness(
    clients: Sequence[Client], rows: Mapping[str, FeatureRow], *, strict: bool = False
) -> list[ClientRow]:
    """Judge each client READY, NOT READY or NOT PROBED.

    It is not ready when a feature it needs fails, and not known to be when one was not
    probed."""
    out = []
    for c in clients:
        probed = [n for n in c.needs if n in rows]
        blocking = [n for n in probed if rows[n].fails(strict, c.id)]
        out.append(
            ClientRow(
                c.id,
                c.name,
                blocking,
                list(c.needs),
                [n for n in c.needs if n not in rows],
                c.captured,
            )
        )
    return out
