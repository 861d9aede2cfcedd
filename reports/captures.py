"""What was captured and by whom: the clients behind each capture, the replay steps that
were never sent, and the calls of independent captures that only one side made.

A capture is one session of one backend: its originals (`replay_of` empty) were sent by the
clients their `tags.sdk` names (the SDK's language, version, runtime and sync/async, or an
application's own user agent, `codex_exec/0.171.0`); a replay resends those clients' headers.
A replay step whose predecessor failed is recorded as `skipped` with the reason and never sent:
it is listed with that reason, folded by reason, never compared. An exchange of an
independent capture that pairs with nothing on the other side is listed as unmatched, folded
by candidate, side and endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from wirediff._types import Record
from wirediff.reports.formatters import anchor, id_free, redact

__all__ = [
    "MAX_CARD_CAPTURES",
    "MAX_CARD_CLIENTS",
    "SKIPPED",
    "Capture",
    "Client",
    "SkippedGroup",
    "UnmatchedGroup",
    "captures",
    "skipped_groups",
    "unmatched_groups",
]

SKIPPED = "skipped"
MAX_CARD_CAPTURES = 6
"""Sessions listed on one backend's card; summary.json lists them all."""
MAX_CARD_CLIENTS = 4
"""Clients listed per session on a card; summary.json lists them all."""
SDK_FIELDS = (
    "user_agent",
    "lang",
    "version",
    "runtime",
    "runtime_version",
    "async",
    "client",
    "client_version",
)
"""What `tags.sdk` says about the client (`wirediff.record.tags.sdk_identity`)."""


@dataclass(slots=True)
class Client:
    """One distinct client of a capture and how many exchanges it sent."""

    sdk: dict[str, Any]
    exchanges: int = 0

    @property
    def name(self) -> str:
        """`codex_exec 0.171.0`, `OpenAI SDK python 2.54.0`, else the user agent."""
        s = self.sdk
        if s.get("client"):
            return f"{s['client']} {s.get('client_version') or ''}".strip()
        if s.get("lang"):
            return f"OpenAI SDK {s['lang']} {s.get('version') or ''}".strip()
        return s.get("user_agent") or "no user agent"

    @property
    def user_agent(self) -> str | None:
        """None: the client sent none (its record's `tags.sdk` may be null)."""
        return self.sdk.get("user_agent")

    @property
    def details(self) -> list[str]:
        """The rest: the SDK under an application, the runtime, sync or async."""
        s, out = self.sdk, []
        if s.get("client") and s.get("lang"):
            out.append(f"OpenAI SDK {s['lang']} {s.get('version') or ''}".strip())
        if s.get("runtime"):
            out.append(f"{s['runtime']} {s.get('runtime_version') or ''}".strip())
        if s.get("async") is not None:
            out.append("async" if s["async"] else "sync")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {**{k: self.sdk.get(k) for k in SDK_FIELDS}, "exchanges": self.exchanges}


@dataclass(slots=True)
class Capture:
    """One session of one backend: captured (originals) or replayed."""

    label: str
    session: str
    replayed: bool
    exchanges: int = 0
    clients: list[Client] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "replayed": self.replayed,
            "exchanges": self.exchanges,
            "clients": [c.as_dict() for c in self.clients],
        }


def _sdk(record: Record | None) -> Mapping[str, Any]:
    sdk = record["tags"].get("sdk") if record is not None else None
    return sdk if sdk is not None else {}


def captures(ex: pd.DataFrame, records_by_id: Mapping[str, Record]) -> dict[str, list[Capture]]:
    """Per backend label, its captures and the clients of each, the most active first."""
    out: dict[str, list[Capture]] = {}
    if ex.empty:
        return out
    frame = pd.DataFrame(
        {
            "id": ex["id"].astype(str),
            "label": ex["label"].astype(str),
            "session": ex["session"].fillna("").astype(str),
            "replayed": ex["replay_of"].notna() & (ex["replay_of"].astype(str) != ""),
        }
    )
    for (label, session, replayed), part in frame.groupby(
        ["label", "session", "replayed"], sort=False
    ):
        cap = Capture(str(label), str(session), bool(replayed), len(part))
        seen: dict[tuple[Any, ...], Client] = {}
        for rid in part["id"].tolist():
            sdk = _sdk(records_by_id.get(rid))
            key = tuple(sdk.get(k) for k in SDK_FIELDS)
            client = seen.get(key)
            if client is None:
                said = {
                    k: redact(v) if isinstance(v, str) else v
                    for k, v in zip(SDK_FIELDS, key, strict=True)
                }
                client = seen[key] = Client({k: v for k, v in said.items() if v is not None})
            client.exchanges += 1
        cap.clients = sorted(seen.values(), key=lambda c: -c.exchanges)
        out.setdefault(cap.label, []).append(cap)
    for caps in out.values():
        caps.sort(key=lambda c: (c.replayed, -c.exchanges, c.session))
    return out


@dataclass(slots=True)
class SkippedGroup:
    """Replay steps not sent for the same reason (ids aside) on one backend and endpoint."""

    anchor: str
    label: str
    endpoint: str
    reason: str
    count: int = 0
    streamed: int = 0
    ids: list[str] = field(default_factory=list)


def skipped_groups(
    ex: pd.DataFrame, records_by_id: Mapping[str, Record], max_examples: int
) -> list[SkippedGroup]:
    """Replay steps recorded as skipped, folded by backend, endpoint and reason."""
    part = ex[ex["error_kind"] == SKIPPED]
    groups: dict[tuple[str, str, str], SkippedGroup] = {}
    for rid, label, endpoint, stream in zip(
        part["id"].astype(str).tolist(),
        part["label"].astype(str).tolist(),
        part["endpoint"].astype(str).tolist(),
        part["stream"].eq(True).tolist(),
        strict=True,
    ):
        rec = records_by_id.get(rid)
        error = rec.get("error") if rec is not None else None
        reason = redact((error["message"] if error is not None else "") or "no reason recorded")
        key = (label, endpoint, id_free(reason))
        g = groups.get(key)
        if g is None:
            g = groups[key] = SkippedGroup(anchor("skip", *key), label, endpoint, reason)
        g.count += 1
        g.streamed += stream
        if len(g.ids) < max_examples:
            g.ids.append(rid)
    return sorted(groups.values(), key=lambda g: (g.label, g.endpoint, -g.count))


@dataclass(slots=True)
class UnmatchedGroup:
    """Calls of one endpoint that one side of an independent comparison made and the other
    did not (`only in the baseline` / `only in the candidate`, from the candidate's view)."""

    anchor: str
    label: str
    side: str
    method: str
    endpoint: str
    count: int = 0
    ids: list[str] = field(default_factory=list)


def unmatched_groups(unmatched: pd.DataFrame, max_examples: int) -> list[UnmatchedGroup]:
    """`pairing.UNMATCHED_COLUMNS` rows folded by candidate, side, method and endpoint."""
    groups: dict[tuple[str, str, str, str], UnmatchedGroup] = {}
    for label, side, rid, method, endpoint in zip(
        *(
            unmatched[c].fillna("").astype(str).tolist()
            for c in ("label", "side", "id", "method", "endpoint")
        ),
        strict=True,
    ):
        key = (label, side, method, endpoint)
        g = groups.get(key)
        if g is None:
            g = groups[key] = UnmatchedGroup(anchor("unmatched", *key), *key)
        g.count += 1
        if len(g.ids) < max_examples:
            g.ids.append(rid)
    return sorted(groups.values(), key=lambda g: (g.label, g.side, g.endpoint, g.method))
