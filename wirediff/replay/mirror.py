"""Mirror live requests to candidate backends: the shadow addon's engine, without mitmproxy.

Each live request (`Live`: the request as the client sent it) goes to every candidate as a
replay of it would: the request built by `prepare`
(re-based onto the candidate, model mapped, keyed from the candidate's own variable, what
the capture fingerprints left out: never the client's key), sent by `wire.send`, recorded by
the same record builder with `replay_of` = the primary's record id and the candidate's label.

State-aware like the replayer (`wirediff.replay.slots`, `plan.resolve`): a request naming an
id an earlier answer of the primary minted (`previous_response_id`, a `call_id`, a
`tool_call_id`, `/v1/responses/{id}`) is sent once that earlier step is done on the
candidate, with the id the candidate minted for it; when the candidate's answer to it leaves
nothing to continue (an error, no function call) the request is recorded as skipped, with
the reason, and not sent. The primary's answers to the last `STEP_MEMORY` requests that can
mint ids are kept (`answered`); they are only read when a request names an id at all: searched
for it, then built into a record.

Never on the client's path: `submit` only counts and schedules; mirrors are tasks on the
caller's event loop (the mirror process's, `wirediff.replay.mirror_process`), `concurrency`
in flight and at most `queue` pending per candidate (more are dropped and counted: a slow
candidate loses mirrors, the others do not); whatever a candidate does is recorded, never
raised.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import httpx

from wirediff._support import plural
from wirediff._types import JSON, Record
from wirediff.errors import PlanError
from wirediff.record.body import decode_body
from wirediff.record.build import build_record
from wirediff.record.exchange import Error, Exchange, Request, Timings
from wirediff.record.spool import RecordMeta, build_item
from wirediff.record.tags import route
from wirediff.replay.config import CONNECT_TIMEOUT, DEFAULT_TIMEOUT
from wirediff.replay.connections import Connections
from wirediff.replay.plan import Node, resolve
from wirediff.replay.request import prepare
from wirediff.replay.safety import request_problem, unsafe_reason
from wirediff.replay.sender import Counts, counted
from wirediff.replay.slots import ESSENTIAL_KEYS, PRODUCERS, Slot, find_refs, produced_slots
from wirediff.replay.targets import Target
from wirediff.replay.wire import exception_words, send, to_httpx, unsent_exchange

__all__ = ["DROPPED", "STEP_MEMORY", "Candidate", "Live", "Mirror", "RecordSink"]

STEP_MEMORY = 512
"""Recent id-minting live requests kept with their answers, for the requests that name the ids.

They are the requests of `PRODUCERS`."""
SEARCHED = 1 << 20
"""Bytes of a primary's answer searched for the ids a later request names."""
ANSWER_WAIT = 5.0
"""Seconds a request naming an id waits for a primary answer on its way.

A client can send its next request as a stream ends, before the proxy hands the answer over."""
DROPPED = "not mirrored: the shadow queue was full"
STOPPED = "stopped (mitmdump stopped) while waiting for the answer: the candidate may have it"

RecordSink = Callable[[Path, Exchange, RecordMeta], None]
"""Records `Exchange` (as `RecordMeta` says) into the file at `Path`."""


@dataclass(frozen=True)
class Live:
    """Hold a live request as the client sent it."""

    id: str
    """The primary's record id: each mirror's `replay_of`."""
    session: str
    seq: int
    request: Request
    started: float


@dataclass
class Candidate:
    target: Target
    api_key: str | None
    connections: Connections
    counts: Counts = field(default_factory=Counts)
    dropped: int = 0
    pending: int = 0
    full: bool = False
    interrupted: int = 0
    """Mirrors sent and cut by the stop before their answer: recorded, not counted as sent."""
    unreachable: bool = False
    """The last mirror found no connection: said once, until one connects again."""

    @property
    def label(self) -> str:
        return self.target.label


class _Step:
    """Track one live request being mirrored.

    Each candidate's outcome comes as it comes, and the primary's answer once it is known
    (`Mirror.answered`)."""

    def __init__(self, live: Live, labels: Sequence[str], order: int) -> None:
        self.live, self.order = live, order
        self.outcomes: dict[str, asyncio.Future[Exchange | Record | None]] = {}
        loop = asyncio.get_running_loop()
        for label in labels:
            self.outcomes[label] = loop.create_future()
        self.records: dict[str, Record] = {}
        self.answer: Exchange | None = None
        self.answer_known = asyncio.Event()
        self._request: Record | None = None
        self._text: str | None = None
        self._slots: dict[Slot, str] | None = None

    def request_record(self, body_cap: int, redact: frozenset[str]) -> Record:
        """Record the live request as the capture records it, with fingerprints for secrets.

        `prepare` builds each candidate's request from it."""
        if self._request is None:
            live = self.live
            ex = Exchange(
                id=live.id, request=live.request, response=None, timings=Timings(live.started)
            )
            self._request = build_record(
                ex, session=live.session, label="", seq=live.seq, body_cap=body_cap, redact=redact
            )
        return self._request

    def text(self) -> str:
        """Return the primary's answer as text, searched for the ids a later request names."""
        if self._text is None:
            ex, text = self.answer, ""
            if ex is not None and ex.tap is not None:
                text = ex.tap.kept().decode("utf-8", "replace")
            elif ex is not None and ex.response is not None:
                raw = ex.response.content or b""
                text = decode_body(raw, ex.response.content_encoding, SEARCHED).decode(
                    "utf-8", "replace"
                )
            self._text = text if ex is not None else None
        return self._text or ""

    def primary_slots(self, body_cap: int) -> dict[Slot, str]:
        """Return the ids the primary's answer minted, its record built the first time asked."""
        if self._slots is None and self.answer is not None:
            answer = build_record(self.answer, session="", label="", seq=0, body_cap=body_cap)
            self._slots = produced_slots(answer)
        return self._slots or {}

    def settle(self, label: str, outcome: Exchange | Record | None) -> None:
        fut = self.outcomes[label]
        if not fut.done():
            fut.set_result(outcome)


def _named_ids(rec: Record) -> set[str]:
    """Find the strings a request holds where only an id another answer minted can stand.

    They are under `ESSENTIAL_KEYS`, and in the `{id}` segments of its route."""
    req = rec.get("request") or {}
    found: set[str] = set()

    def walk(value: JSON) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k in ESSENTIAL_KEYS and isinstance(v, str) and v:
                    found.add(v)
                else:
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(req.get("body"))
    path = str(req.get("path") or "").partition("?")[0]
    segs, template = path.split("/"), route(path)[1].split("/")
    for i in range(1, min(len(segs), len(template)) + 1):
        if template[-i] == "{id}" and segs[-i]:
            found.add(segs[-i])
    return found


class Mirror:
    """Send each `Live` request to every candidate, state-aware, and record the answers."""

    def __init__(
        self,
        candidates: Sequence[Candidate],
        *,
        path_of: Callable[[str, str], Path],
        record: RecordSink,
        queue: int,
        body_cap: int,
        allow_unsafe: bool = False,
        redact: frozenset[str] = frozenset(),
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.candidates = list(candidates)
        self.path_of, self.sink, self.log = path_of, record, log
        self.queue, self.body_cap = queue, body_cap
        self.allow_unsafe, self.redact = allow_unsafe, redact
        self.timeout = httpx.Timeout(DEFAULT_TIMEOUT, connect=CONNECT_TIMEOUT).as_dict()
        self.pending = self.submitted = 0
        self.cancelled: Counter[str] = Counter()
        self.steps: OrderedDict[str, _Step] = OrderedDict()
        self.tasks: set[asyncio.Task[None]] = set()

    # -- the client's path: count and schedule, nothing more --
    def submit(self, live: Live) -> None:
        """Mirror `live` to every candidate; called on the event loop, it returns at once."""
        loop = asyncio.get_running_loop()
        self.submitted += 1
        step = _Step(live, [c.label for c in self.candidates], self.submitted)
        method = live.request.method.upper()
        if (method, route(live.request.path)[1]) in PRODUCERS:
            self.steps[live.id] = step
            while len(self.steps) > STEP_MEMORY:
                self.steps.popitem(last=False)
        for cand in self.candidates:
            if cand.pending >= self.queue:
                cand.dropped += 1
                dropped = {"error": {"kind": "skipped", "message": DROPPED}}
                step.settle(cand.label, cast("Record", dropped))  # what `resolve` reads
                if not cand.full:
                    cand.full = True
                    self.log(
                        f"shadow: {cand.label}: {plural(cand.pending, 'mirror')} pending "
                        "(shadow_queue): "
                        "dropping its mirrors until they drain; the counts are logged at the end"
                    )
                continue
            cand.full = False
            cand.pending += 1
            self.pending += 1
            loop.call_soon(self._start, step, cand)

    def answered(self, live_id: str, answer: Exchange) -> None:
        """Take the primary's answer to a live request that can mint ids, for what names them."""
        step = self.steps.get(live_id)
        if step is not None:
            step.answer = answer
            step.answer_known.set()

    def _start(self, step: _Step, cand: Candidate) -> None:
        task = asyncio.get_running_loop().create_task(self._mirror(step, cand))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- off the client's path --
    async def _mirror(self, step: _Step, cand: Candidate) -> None:
        outcome: Exchange | Record | None = None
        live = step.live
        try:
            rec = step.request_record(self.body_cap, self.redact)
            mapping: dict[str, str] = {}
            reason = self._not_sent(rec)
            if reason is None:
                mapping, reason = await self._ids(step, rec, cand.label)
            request = None
            if reason is None:
                try:
                    out = prepare(rec, cand.target, cand.api_key, mapping)
                    request = to_httpx(out, self.timeout)
                except PlanError as e:  # its path leaves the candidate's base path
                    reason = str(e)
                except Exception as e:  # what the candidate cannot be sent
                    why = exception_words(e)
                    reason = f"the request cannot be sent to the candidate: {why}"
            connect_failed = False
            if request is None:
                error = Error(reason or "not sent", "skipped")
                outcome = self._unsent(rec, cand, mapping, error)
            else:
                async with cand.connections.one() as transport:
                    try:
                        sent = await send(transport, request, out.content, self.body_cap)
                    except asyncio.CancelledError:
                        outcome = self._unsent(rec, cand, mapping, Error(STOPPED, "interrupted"))
                        cand.interrupted += 1
                        self.sink(self.path_of(live.session, cand.label), outcome,
                                  self._meta(step, cand.label))  # fmt: skip
                        raise
                outcome, connect_failed = sent.exchange, sent.connect_failed
            self._record(step, cand, outcome, connect_failed)
        except asyncio.CancelledError:
            if outcome is None:
                self.cancelled[cand.label] += 1
            raise
        except Exception as e:  # a bug here must not reach the proxy, nor lose the others
            self.log(
                f"shadow: {cand.label}: could not mirror {live.request.method} {live.id}: {e!r}"
            )
        finally:
            cand.pending -= 1
            self.pending -= 1
            step.settle(cand.label, outcome)

    def _unsent(
        self, rec: Record, cand: Candidate, mapping: dict[str, str], error: Error
    ) -> Exchange:
        return unsent_exchange(rec, cand.target, cand.api_key, mapping, error, self.timeout)

    def _not_sent(self, rec: Record) -> str | None:
        """Say why a live request is not mirrored; None when it is."""
        reason = request_problem(rec)
        if reason is None and not self.allow_unsafe and unsafe_reason(rec) is not None:
            req = rec["request"]
            reason = (
                f"{req.get('method')} {(rec.get('tags') or {}).get('endpoint')} may change "
                "state on the candidate: mirrored only with shadow_allow_unsafe"
            )
        if reason is None and rec["request"].get("truncated"):
            reason = "the request body is longer than capture_body_cap: not mirrored cut"
        return reason

    async def _ids(self, step: _Step, rec: Record, label: str) -> tuple[dict[str, str], str | None]:
        """Map the primary's ids the request names to the candidate's, or say why it cannot be sent.

        The candidate's ids are known once the steps that minted them are done on it."""
        named = _named_ids(rec)
        if not named:
            return {}, None
        produced: dict[str, tuple[str, Slot]] = {}
        for prior in reversed(list(self.steps.values())):
            missing = named - produced.keys()
            if not missing:
                break
            if prior.order >= step.order:
                continue
            if not prior.answer_known.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(prior.answer_known.wait(), ANSWER_WAIT)
            if not any(v in prior.text() for v in missing):
                continue
            for slot, value in prior.primary_slots(self.body_cap).items():
                produced.setdefault(value, (prior.live.id, slot))
        node = Node(rec, 0, find_refs(rec, produced))
        outcomes = {p: await self._outcome(p, label) for p in node.deps}
        return resolve(node, outcomes.get)

    async def _outcome(self, step_id: str, label: str) -> Record | None:
        """Return the candidate's record of an earlier step, once it is done."""
        prior = self.steps.get(step_id)
        if prior is None:
            return None
        got = await asyncio.shield(prior.outcomes[label])
        if not isinstance(got, Exchange):
            return got
        if label not in prior.records:
            meta = self._meta(prior, label)
            prior.records[label] = build_item(got, meta, self.body_cap, self.redact)
        return prior.records[label]

    def _meta(self, step: _Step, label: str) -> RecordMeta:
        cand = next(c for c in self.candidates if c.label == label)
        return {
            "session": step.live.session,
            "label": label,
            "seq": step.live.seq,
            "listener": f"shadow:{cand.target.shown}",
            "replay_of": step.live.id,
        }

    def _record(self, step: _Step, cand: Candidate, ex: Exchange, connect_failed: bool) -> None:
        cand.counts.add(counted(ex), connect_failed=connect_failed)
        if connect_failed and not cand.unreachable:
            why = ex.error.message if ex.error is not None else "no connection"
            self.log(
                f"shadow: {cand.label}: cannot reach {cand.target.shown} ({why}): its mirrors "
                "are recorded unanswered until it answers"
            )
        if ex.error is None or ex.error.kind != "skipped":  # one not sent tells nothing of it
            cand.unreachable = connect_failed
        self.sink(self.path_of(step.live.session, cand.label), ex, self._meta(step, cand.label))

    # -- shutting down --
    async def close(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the mirrors pending, then cancel the rest.

        One in flight is recorded as `interrupted`; the candidates' connections are closed."""
        if self.tasks:
            _, late = await asyncio.wait(set(self.tasks), timeout=timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        for cand in self.candidates:
            with contextlib.suppress(Exception):
                await cand.connections.aclose()

    def summary(self) -> list[str]:
        """Say in one line per candidate what was mirrored, dropped, cut by the stop and not sent."""
        lines = []
        for cand in self.candidates:
            c = cand.counts
            line = f"shadow: {cand.label}: {c.done} mirrored ({c.line()})"
            if cand.dropped:
                line += f", {cand.dropped} dropped (shadow_queue full)"
            if cand.interrupted:
                line += f", {cand.interrupted} cut by the stop (recorded as interrupted)"
            if self.cancelled[cand.label]:
                line += f", {self.cancelled[cand.label]} not sent (stopped first)"
            lines.append(line)
        return lines
