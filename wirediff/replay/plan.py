"""Plan a replay: what to send, in which order, with which ids; pure, no I/O.

A captured session is a conversation with *state*: a Responses call names the one before it
(`previous_response_id`), a tool result answers a call the model made (`call_id`,
`tool_call_id`), a lookup names a stored object in its path (`/v1/responses/{id}`). The
target mints its own ids, so a faithful replay must send the producer first, read the id the
*target* returned, and put that id where the original one was. Dependencies are found by
value, through the ids' slots (`wirediff.replay.slots`).

A session captured on two listeners (client → gateway → backend) holds each call twice; only
the outer hop is an original to replay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wirediff._support import is_2xx
from wirediff._types import Record
from wirediff.record.keys import HOP_LOOKBACK, HOP_SLACK_S, HOP_WINDOW_S, hop_key
from wirediff.record.store import RETRIED_KINDS
from wirediff.record.tags import route
from wirediff.replay.filters import Term, names_listener, selected
from wirediff.replay.request import DEFAULT_PREFIXES, target_problem
from wirediff.replay.safety import (
    check_original,
    is_replayable_original,
    request_problem,
    unsafe_reason,
)
from wirediff.replay.slots import Ref, Slot, describe_slot, find_refs, produced_slots
from wirediff.replay.targets import Target

__all__ = [
    "Node",
    "Plan",
    "failure",
    "inner_hops",
    "make_plan",
    "resolve",
    "resumed",
]


def _duration_s(rec: Record) -> float | None:
    dur = rec.get("duration_ms")
    if isinstance(dur, int | float) and not isinstance(dur, bool) and math.isfinite(dur):
        return float(dur) / 1000.0
    return None


def inner_hops(originals: Sequence[Record]) -> set[str]:
    """Find the ids of the inner hops of two-hop captures.

    An inner hop is a record on another listener than its session's first record that lies, in
    time, inside an earlier record asking the same thing (`wirediff.record.keys.hop_key`) on
    another listener — the same call seen again behind a gateway. `originals` in start order;
    the time slack and look-back are the chains'."""
    first: dict[Any, Any] = {}
    listeners: dict[Any, set[Any]] = {}
    for rec in originals:
        sess = rec.get("session")
        first.setdefault(sess, rec.get("listener"))
        listeners.setdefault(sess, set()).add(rec.get("listener"))
    if all(len(v) < 2 for v in listeners.values()):
        return set()
    ends: dict[tuple[Any, Hashable], dict[str, list[float]]] = {}
    inner: set[str] = set()
    for rec in originals:
        sess, here = rec.get("session"), rec.get("listener")
        if not isinstance(here, str) or len(listeners[sess]) < 2:
            continue
        start, dur = float(rec.get("started") or 0.0), _duration_s(rec)
        by_listener = ends.setdefault((sess, hop_key(rec["request"])), {})
        if here != first[sess]:
            end = start + (dur or 0.0)
            if any(
                end <= outer_end
                for other, prior in by_listener.items()
                if other != here
                for outer_end in prior[-HOP_LOOKBACK:]
            ):
                inner.add(str(rec["id"]))
        outer_end = start + (dur if dur is not None else HOP_WINDOW_S) + HOP_SLACK_S
        by_listener.setdefault(here, []).append(outer_end)
    return inner


# --- the plan ------------------------------------------------------------------------------


@dataclass
class Node:
    """Hold one original to replay, or to record as skipped."""

    rec: Record
    order: int
    refs: list[Ref] = field(default_factory=list)
    api_prefixes: frozenset[str] = DEFAULT_PREFIXES
    """The API prefixes of its session's known routes, such as `/v1`.

    They say where an unknown path's own prefix ends."""
    wanted: bool = True
    """Selected by the filters (False: pulled in only because a selected one depends on it)."""
    skip: str | None = None
    """Set when the original is never sent (unsafe, truncated or malformed request)."""

    @property
    def id(self) -> str:
        return str(self.rec["id"])

    @property
    def deps(self) -> set[str]:
        return {r.producer for r in self.refs}


@dataclass
class Plan:
    nodes: list[Node]
    """Originals in start order."""
    hops_left_out: dict[str, int] = field(default_factory=dict)
    """Inner hops of two-hop captures not replayed, counted by listener."""

    def __post_init__(self) -> None:
        self.by_id = {n.id: n for n in self.nodes}
        self.dependents: dict[str, list[str]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for d in sorted(n.deps):
                self.dependents[d].append(n.id)

    def __len__(self) -> int:
        return len(self.nodes)


def make_plan(
    records: Iterable[Record],
    *,
    filters: Sequence[tuple[Term, ...]] = (),
    allow_unsafe: bool = False,
) -> Plan:
    """Plan the originals in start order with their references; filtered, plus what they depend on.

    Inner hops of two-hop captures are left out unless a filter names a `listener` or a
    `label`; what a selected exchange depends on is kept whatever the filters say.
    """
    seen: set[str] = set()
    originals: list[tuple[float, int, Record]] = []
    for i, rec in enumerate(records):
        if not is_replayable_original(rec) or rec.get("id") in seen:
            continue
        check_original(rec)
        seen.add(str(rec["id"]))
        originals.append((float(rec.get("started") or 0.0), i, rec))
    originals.sort(key=lambda t: (t[0], t[1]))
    in_order = [rec for _, _, rec in originals]

    prefixes: dict[Any, set[str]] = {}
    for rec in in_order:
        family, _, prefix = route(str(rec["request"].get("path") or ""))
        if family != "other":
            prefixes.setdefault(rec.get("session"), set()).add(prefix)
    frozen = {s: frozenset(p) for s, p in prefixes.items()}

    produced: dict[str, tuple[str, Slot]] = {}
    nodes: list[Node] = []
    for order, rec in enumerate(in_order):
        node = Node(rec, order, find_refs(rec, produced))
        node.api_prefixes = frozen.get(rec.get("session"), DEFAULT_PREFIXES)
        for slot, value in produced_slots(rec).items():
            produced.setdefault(value, (node.id, slot))
        nodes.append(node)

    hops = set() if names_listener(filters) else inner_hops(in_order)
    by_id = {n.id: n for n in nodes}
    keep: set[str] = set()
    stack = [n.id for n in nodes if n.id not in hops and selected(n.rec, filters)]
    wanted = set(stack)
    while stack:
        nid = stack.pop()
        if nid in keep:
            continue
        keep.add(nid)
        stack.extend(by_id[nid].deps)
    out = []
    for n in nodes:
        if n.id not in keep:
            continue
        n.wanted = n.id in wanted
        n.skip = request_problem(n.rec)
        if n.skip is None and not allow_unsafe:
            n.skip = unsafe_reason(n.rec)
        if n.skip is None and n.rec["request"].get("truncated"):
            n.skip = "the captured request body was truncated (raise capture_body_cap)"
        out.append(n)
    left_out: dict[str, int] = {}
    for hid in sorted(hops - keep):
        listener = str(by_id[hid].rec.get("listener"))
        left_out[listener] = left_out.get(listener, 0) + 1
    return Plan(out, left_out)


def resumed(plan: Plan, prior: Mapping[str, Record], target: Target) -> dict[str, Record]:
    """Find the originals a resumed run does not send again to `target`.

    Each comes with its newest earlier record.

    An earlier attempt that got no answer (`RETRIED_KINDS`: unreachable, a TLS handshake that
    failed, a timeout, a disconnect) is tried again; so is a skipped one, unless it would be
    skipped again for the same reason (still unsafe, its path still outside the target, or
    what it builds on is done and unchanged). In start order, so that a step is retried when
    what it depends on is.
    """
    done: dict[str, Record] = {}
    for n in plan.nodes:
        rec = prior.get(n.id)
        if rec is None:
            continue
        err = rec.get("error")
        kind = err.get("kind") if isinstance(err, dict) else None
        if kind not in RETRIED_KINDS:
            done[n.id] = rec
            continue
        if kind != "skipped" or not isinstance(err, dict):
            continue
        again = n.skip or target_problem(n.rec, target, n.api_prefixes)
        if again is None and n.deps and n.deps <= done.keys():
            again = resolve(n, done.get)[1]
        if again is not None and again == err.get("message"):
            done[n.id] = rec
    return done


# --- what the target's answer means for the steps after it ---------------------------------


def failure(outcome: Record) -> str | None:
    """Say why a replayed exchange yields nothing to build on; None when it succeeded."""
    err = outcome.get("error")
    if isinstance(err, dict) and err.get("kind") == "skipped":
        return f"it was skipped ({err.get('message')})"
    resp = outcome.get("response")
    if not isinstance(resp, dict):
        kind = err.get("kind") if isinstance(err, dict) else "no answer"
        return f"the target did not answer it ({kind})"
    status = resp.get("status")
    if not is_2xx(status):
        return f"the target answered it with HTTP {status}"
    tags = outcome.get("tags") or {}
    if tags.get("soft_error"):
        sig = tags.get("signature")
        return f"the target answered it with HTTP {status} and an error body" + (
            f" ({sig})" if sig else ""
        )
    return None


def resolve(
    node: Node, outcome_of: Callable[[str], Record | None]
) -> tuple[dict[str, str], str | None]:
    """Map a node's original ids to the target's, or give the reason it must be skipped."""
    mapping: dict[str, str] = {}
    slots_cache: dict[str, dict[Slot, str]] = {}
    for ref in node.refs:
        outcome = outcome_of(ref.producer)
        if outcome is None:
            why: str | None = "it was not replayed"
            target_id = None
        else:
            why = failure(outcome)
            if ref.producer not in slots_cache:
                slots_cache[ref.producer] = produced_slots(outcome) if why is None else {}
            target_id = slots_cache[ref.producer].get(ref.slot)
        if target_id is not None:
            mapping[ref.value] = target_id
            continue
        if ref.essential:
            reason = why or f"the target's answer to it has no {describe_slot(ref.slot)}"
            return mapping, f"{ref.where} {ref.value} comes from {ref.producer}, but {reason}"
    return mapping, None
