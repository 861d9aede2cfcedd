"""Send the probe's requests with the replayer's engine, `TargetRun`.

The engine keeps dependency order, remaps ids and records each through the capture's record
builder; the WebSocket session goes with `wirediff.probe.send_websocket`.

The engine sends each request with the key of the probe (`--api-key-env`), except the
requests of a bad-key feature, which carry `BAD_KEY` where the client had its key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence

import httpx

from wirediff._types import Record
from wirediff.probe.send_websocket import send_websocket
from wirediff.record.body import DEFAULT_BODY_CAP
from wirediff.record.spool import build_item
from wirediff.record.websocket import is_websocket
from wirediff.replay.config import CONNECT_TIMEOUT
from wirediff.replay.connections import Connections
from wirediff.replay.plan import Node, make_plan
from wirediff.replay.request import Outgoing, prepare
from wirediff.replay.sender import TargetRun
from wirediff.replay.targets import Target

__all__ = ["BAD_KEY", "send_records"]

BAD_KEY = "sk-wirediff-probe-not-a-valid-key"
"""What a bad-key request carries: no server's key (it is recorded as a fingerprint anyway)."""


class _ProbeRun(TargetRun):
    """Run the replayer, with the bad key on the requests that must carry it."""

    def __init__(self, *args: object, bad_key: Collection[str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.bad_key = frozenset(bad_key)

    def prepare(self, node: Node, mapping: Mapping[str, str]) -> Outgoing:
        key = BAD_KEY if node.id in self.bad_key else self.api_key
        return prepare(node.rec, self.target, key, mapping, api_prefixes=node.api_prefixes)


def send_records(
    records: Sequence[Record],
    target: Target,
    api_key: str | None,
    *,
    bad_key: Collection[str] = (),
    timeout: float,
    concurrency: int,
    sink: Callable[[Record], None],
) -> None:
    """Send `records`, originals of the bundled session, to `target`.

    `sink` gets each record as it is made; its `replay_of` is the original's id."""
    http = [r for r in records if not is_websocket(r)]
    sockets = [r for r in records if is_websocket(r)]
    plan = make_plan(http)
    limits = httpx.Timeout(timeout, connect=min(CONNECT_TIMEOUT, timeout))
    run = _ProbeRun(
        plan, target, api_key, sink, {}, concurrency=concurrency, timeout=limits, bad_key=bad_key
    )

    async def socket(rec: Record) -> None:
        ex = await send_websocket(rec, target, api_key, timeout, DEFAULT_BODY_CAP)
        meta = {
            "session": str(rec.get("session") or ""),
            "label": target.label,
            "seq": int(rec.get("seq") or 0),
            "listener": run.listener,
            "replay_of": str(rec["id"]),
        }
        sink(build_item(ex, meta, DEFAULT_BODY_CAP, frozenset()))

    async def everything() -> None:
        async with Connections.to_network(concurrency) as connections:
            await asyncio.gather(run.run(connections), *(socket(r) for r in sockets))

    asyncio.run(everything())
