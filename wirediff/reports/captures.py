"""List what was captured and by whom, the replay steps never sent, and the unmatched calls.

The report shows the clients behind each capture, the replay steps that were never sent, and the
calls of independent captures that only one side made. A capture is one session of one backend:
its originals, with `replay_of` empty, were sent by the clients their `tags.sdk` names, that is
the SDK's language, version, runtime and sync or async, or an application's own user agent such
as `codex_exec/0.171.0`; a replay resends those clients' headers. A replay step whose predecessor
failed is recorded as `skipped` with the reason and never sent: it is listed with that reason,
folded by reason, never compared. An exchange of an independent capture that pairs with nothing
on the other side is listed as unmatched, folded by candidate, side and endpoint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wirediff.analysis.comparison.pairing import text_codes
from wirediff.analysis.comparison.sameness import without_ids
from wirediff.record.tags import SDK_FIELDS
from wirediff.reports.formatters import anchor, redact

__all__ = [
    "MAX_CARD_CAPTURES",
    "MAX_CARD_CLIENTS",
    "SKIPPED",
    "Capture",
    "Client",
    "SkippedGroup",
    "UnmatchedGroup",
    "captures_of",
    "skipped_of",
    "unmatched_groups",
]

SKIPPED = "skipped"
MAX_CARD_CAPTURES = 6
"""Sessions listed on one backend's card; summary.json lists them all."""
MAX_CARD_CLIENTS = 4
"""Clients listed per session on a card; summary.json lists them all."""


@dataclass(slots=True)
class Client:
    """Count one distinct client of a capture and the exchanges it sent."""

    sdk: dict[str, Any]
    exchanges: int = 0

    @property
    def name(self) -> str:
        """Name the client, as in `codex_exec 0.171.0` or `OpenAI SDK python 2.54.0`.

        Without either, it is named by its user agent."""
        s = self.sdk
        if s.get("client"):
            return f"{s['client']} {s.get('client_version') or ''}".strip()
        if s.get("lang"):
            return f"OpenAI SDK {s['lang']} {s.get('version') or ''}".strip()
        return s.get("user_agent") or "no user agent"

    @property
    def user_agent(self) -> str | None:
        """Return the client's user agent; None when it sent none.

        Its record's `tags.sdk` may then be null."""
        return self.sdk.get("user_agent")

    @property
    def details(self) -> list[str]:
        """List the rest: the SDK under an application, the runtime, sync or async."""
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
    """Count one session of one backend, captured as originals or replayed."""

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


def _identity(sdk: Mapping[str, Any]) -> tuple[Any, ...]:
    """Key a client by who it says it is, so a user agent that varies by call is one client.

    The Vercel AI SDK, for one, adds its provider-utils and runtime tokens to streamed calls
    only. A user agent naming nobody known is its own identity."""
    named = sdk.get("client") or sdk.get("lang")
    return tuple(sdk.get(k) for k in SDK_FIELDS if k != "user_agent" or not named)


def captures_of(ex: pd.DataFrame) -> dict[str, list[Capture]]:
    """List per backend label its captures, each a session captured or replayed, with its clients.

    The most active clients come first. `ex` is the index, labels filled, in the captures' order."""
    if ex.empty:
        return {}
    of = ex["replay_of"]
    label_at, labels = text_codes(ex["label"])
    session_at, sessions = text_codes(ex["session"])
    client_at, said_by = text_codes(ex["client"])
    frame = pd.DataFrame(
        {
            "label": label_at,
            "session": session_at,
            "replayed": (of.notna() & (of != "")).to_numpy(),
            "client": client_at,
        }
    )
    keys = ["label", "session", "replayed"]
    sizes = frame.groupby(keys, sort=False).size()
    captures = [
        ((labels[lab], sessions[ses], bool(rep)), int(n))
        for (lab, ses, rep), n in zip(sizes.index.tolist(), sizes.tolist(), strict=True)
    ]
    clients = frame.groupby([*keys, "client"], sort=False)
    seen: dict[tuple[str, str, bool], list[tuple[int, Client]]] = {k: [] for k, _ in captures}
    for (lab, ses, rep, cli), n, first in zip(
        clients.size().index.tolist(),
        clients.size().tolist(),
        clients.head(1).index.tolist(),
        strict=True,
    ):
        key = (labels[lab], sessions[ses], bool(rep))
        sdk = {
            k: redact(v) if isinstance(v, str) else v
            for k, v in zip(SDK_FIELDS, json.loads(said_by[cli]), strict=True)
        }
        client = Client({k: v for k, v in sdk.items() if v is not None}, n)
        same = next((c for _, c in seen[key] if _identity(c.sdk) == _identity(sdk)), None)
        if same is None:
            seen[key].append((first, client))
        else:  # in the captures' order: the first seen gives the user agent shown
            same.exchanges += n
    out: dict[str, list[Capture]] = {}
    for (label, session, replayed), n in captures:
        ranked = sorted(seen[(label, session, replayed)], key=lambda fc: (-fc[1].exchanges, fc[0]))
        cap = Capture(label, session, replayed, n, [c for _, c in ranked])
        out.setdefault(label, []).append(cap)
    for caps in out.values():
        caps.sort(key=lambda c: (c.replayed, -c.exchanges, c.session))
    return out


@dataclass(slots=True)
class SkippedGroup:
    """Fold the replay steps not sent for one reason, ids aside, on one backend and endpoint."""

    anchor: str
    label: str
    endpoint: str
    reason: str
    count: int = 0
    streamed: int = 0
    ids: list[str] = field(default_factory=list)


def skipped_of(ex: pd.DataFrame, max_examples: int) -> list[SkippedGroup]:
    """Fold the replay steps recorded as skipped by backend, endpoint and reason, ids aside.

    Each group keeps its first `max_examples` steps. `ex` is the index, labels and endpoints
    filled."""
    at = np.flatnonzero(ex["error_kind"].eq(SKIPPED).fillna(False).to_numpy(dtype=bool))
    if not len(at):
        return []
    part = ex.iloc[at]
    reasons = part["skip_reason"].astype(object).where(part["skip_reason"].notna(), "")
    said = reasons.map(lambda r: without_ids(redact(r or "no reason recorded")))
    frame = pd.DataFrame(
        {
            "label": part["label"].astype(str).to_numpy(),
            "endpoint": part["endpoint"].astype(str).to_numpy(),
            "reason": said.to_numpy(),
            "stream": part["stream"].eq(True).fillna(False).to_numpy(dtype=bool),
            "id": part["id"].to_numpy(),
        }
    )
    groups = []
    for (label, endpoint, reason), g in frame.groupby(["label", "endpoint", "reason"], sort=False):
        names = (str(label), str(endpoint), str(reason))
        group = SkippedGroup(anchor("skip", *names), *names)
        group.count, group.streamed = len(g), int(g["stream"].sum())
        group.ids = g["id"].tolist()[:max_examples]
        groups.append(group)
    return sorted(groups, key=lambda g: (g.label, g.endpoint, -g.count))


@dataclass(slots=True)
class UnmatchedGroup:
    """Fold the calls of one endpoint that only one side of an independent comparison made.

    The side reads `only in the baseline` or `only in the candidate`, from the candidate's view."""

    anchor: str
    label: str
    side: str
    method: str
    endpoint: str
    count: int = 0
    ids: list[str] = field(default_factory=list)


def unmatched_groups(unmatched: pd.DataFrame, max_examples: int) -> list[UnmatchedGroup]:
    """Fold `pairing.UNMATCHED_COLUMNS` rows by candidate, side, method and endpoint."""
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
