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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from wirediff._support import merge_earliest
from wirediff._types import Record
from wirediff.analysis.comparison.sameness import without_ids
from wirediff.reports.formatters import anchor, redact

__all__ = [
    "MAX_CARD_CAPTURES",
    "MAX_CARD_CLIENTS",
    "SKIPPED",
    "Capture",
    "CaptureCounts",
    "Client",
    "SkippedGroup",
    "Skips",
    "UnmatchedGroup",
    "captures",
    "collect_captures",
    "collect_skipped",
    "finish_captures",
    "finish_skipped",
    "merge_skipped",
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


@dataclass(slots=True)
class Seen:
    """A capture's exchanges counted, and its clients with where each was first seen."""

    exchanges: int = 0
    clients: dict[tuple[Any, ...], tuple[Any, Client]] = field(default_factory=dict)

    def merge(self, other: Seen) -> None:
        self.exchanges += other.exchanges
        for key, (first, client) in other.clients.items():
            mine = self.clients.get(key)
            if mine is None:
                self.clients[key] = (first, client)
            else:
                mine[1].exchanges += client.exchanges
                if first < mine[0]:
                    self.clients[key] = (first, mine[1])


CaptureCounts = dict[tuple[str, str, bool], Seen]
"""Per (label, session, replayed): `collect_captures`'s, merged."""


def _identity(sdk: Mapping[str, Any]) -> tuple[Any, ...]:
    """Key a client by who it says it is, so one client whose user agent varies by call is
    one client: the Vercel AI SDK adds its provider-utils and runtime tokens to streamed
    calls only. A user agent naming nobody known is its own identity."""
    named = sdk.get("client") or sdk.get("lang")
    return tuple(sdk.get(k) for k in SDK_FIELDS if k != "user_agent" or not named)


def collect_captures(
    ex: pd.DataFrame, records_by_id: Mapping[str, Record], positions: Sequence[Any] | None = None
) -> CaptureCounts:
    """The captures of these exchanges and their clients, counted; `positions` place the
    exchanges among all the captures' (by default: as they come)."""
    out: CaptureCounts = {}
    if ex.empty:
        return out
    replayed = (ex["replay_of"].notna() & (ex["replay_of"].astype(str) != "")).tolist()
    places = range(len(ex)) if positions is None else positions
    columns = (
        places,
        ex["id"].astype(str).tolist(),
        ex["label"].astype(str).tolist(),
        ex["session"].fillna("").astype(str).tolist(),
        replayed,
    )
    for place, rid, label, session, again in zip(*columns, strict=True):
        cap = out.get((label, session, again))
        if cap is None:
            cap = out[(label, session, again)] = Seen()
        cap.exchanges += 1
        sdk = _sdk(records_by_id.get(rid))
        key = _identity(sdk)
        seen = cap.clients.get(key)
        if seen is None:
            said = {k: redact(v) if isinstance(v, str) else v for k, v in sdk.items()}
            seen = cap.clients[key] = (
                place,
                Client({k: said[k] for k in SDK_FIELDS if said.get(k) is not None}),
            )
        seen[1].exchanges += 1
    return out


def finish_captures(counts: CaptureCounts) -> dict[str, list[Capture]]:
    """Per backend label, its captures and the clients of each, the most active first."""
    out: dict[str, list[Capture]] = {}
    for (label, session, replayed), seen in counts.items():
        clients = sorted(seen.clients.values(), key=lambda fc: (-fc[1].exchanges, fc[0]))
        cap = Capture(label, session, replayed, seen.exchanges, [c for _, c in clients])
        out.setdefault(label, []).append(cap)
    for caps in out.values():
        caps.sort(key=lambda c: (c.replayed, -c.exchanges, c.session))
    return out


def captures(ex: pd.DataFrame, records_by_id: Mapping[str, Record]) -> dict[str, list[Capture]]:
    """Per backend label, its captures and the clients of each, the most active first."""
    return finish_captures(collect_captures(ex, records_by_id))


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
    places: list[Any] = field(default_factory=list)
    """Where the steps `ids` stand among all the captures' exchanges."""


Skips = dict[tuple[str, str, str], tuple[Any, SkippedGroup]]
"""Per (label, endpoint, reason ids aside): the first step's place and the group."""


def collect_skipped(
    ex: pd.DataFrame,
    records_by_id: Mapping[str, Record],
    max_examples: int,
    positions: Sequence[Any] | None = None,
) -> Skips:
    """Replay steps recorded as skipped, folded by backend, endpoint and reason."""
    skipped = (ex["error_kind"] == SKIPPED).to_numpy()
    part = ex[skipped]
    places = [
        p
        for p, s in zip(
            range(len(ex)) if positions is None else positions, skipped.tolist(), strict=True
        )
        if s
    ]
    groups: Skips = {}
    for place, rid, label, endpoint, stream in zip(
        places,
        part["id"].astype(str).tolist(),
        part["label"].astype(str).tolist(),
        part["endpoint"].astype(str).tolist(),
        part["stream"].eq(True).tolist(),
        strict=True,
    ):
        rec = records_by_id.get(rid)
        error = rec.get("error") if rec is not None else None
        reason = without_ids(
            redact((error["message"] if error is not None else "") or "no reason recorded")
        )
        key = (label, endpoint, reason)
        found = groups.get(key)
        if found is None:
            found = groups[key] = (
                place,
                SkippedGroup(anchor("skip", *key), label, endpoint, reason),
            )
        g = found[1]
        g.count += 1
        g.streamed += stream
        if len(g.ids) < max_examples:
            g.ids.append(rid)
            g.places.append(place)
    return groups


def merge_skipped(into: Skips, other: Skips, max_examples: int) -> Skips:
    def merge(g: SkippedGroup, group: SkippedGroup, theirs_first: bool) -> None:
        if theirs_first:
            g.reason = group.reason
        g.count += group.count
        g.streamed += group.streamed
        both = sorted(zip(g.places + group.places, g.ids + group.ids, strict=True))[:max_examples]
        g.places, g.ids = [p for p, _ in both], [i for _, i in both]

    return merge_earliest(into, other, merge)


def finish_skipped(groups: Skips) -> list[SkippedGroup]:
    ordered = [g for _, g in sorted(groups.values(), key=lambda fg: fg[0])]
    return sorted(ordered, key=lambda g: (g.label, g.endpoint, -g.count))


def skipped_groups(
    ex: pd.DataFrame, records_by_id: Mapping[str, Record], max_examples: int
) -> list[SkippedGroup]:
    """Replay steps recorded as skipped, folded by backend, endpoint and reason."""
    return finish_skipped(collect_skipped(ex, records_by_id, max_examples))


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
