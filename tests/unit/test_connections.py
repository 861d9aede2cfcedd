"""Connections to a target: one per request in flight, kept alive, at most `size` at once."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import httpcore
import httpx
import pytest

from wirediff.replay.connections import HOLD_AT_MOST, Connections, OneWriteStream


class Counting(httpx.AsyncBaseTransport):
    """A transport that knows how many requests it carries at once, and whether it closed."""

    def __init__(self, gate: asyncio.Event, busy: list[int]) -> None:
        self.gate, self.busy = gate, busy
        self.now = self.most = self.served = 0
        self.closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.now += 1
        self.busy[0] += 1
        self.most = max(self.most, self.now)
        self.busy[1] = max(self.busy[1], self.busy[0])
        await self.gate.wait()
        self.now -= 1
        self.busy[0] -= 1
        self.served += 1
        return httpx.Response(200)

    async def aclose(self) -> None:
        self.closed = True


def test_each_request_in_flight_has_a_transport_of_its_own_and_at_most_size_run() -> None:
    made: list[Counting] = []
    busy = [0, 0]  # in flight now, most at once

    async def main() -> None:
        gate = asyncio.Event()

        def make() -> Counting:
            made.append(Counting(gate, busy))
            return made[-1]

        async with Connections(3, make) as connections:

            async def one() -> None:
                async with connections.one() as t:
                    await t.handle_async_request(httpx.Request("GET", "http://t.test/"))

            tasks = [asyncio.create_task(one()) for _ in range(10)]
            for _ in range(1000):  # three in flight; the others wait for a connection
                if busy[0] == 3:
                    break
                await asyncio.sleep(0)
            for _ in range(20):
                await asyncio.sleep(0)
            assert busy[0] == 3
            gate.set()
            await asyncio.gather(*tasks)

    asyncio.run(main())
    assert len(made) == 3 and busy[1] == 3
    assert all(t.most == 1 for t in made)  # never two requests on one connection
    assert sum(t.served for t in made) == 10 and all(t.closed for t in made)


def test_a_connection_is_kept_for_the_next_request() -> None:
    made: list[Counting] = []

    async def main() -> None:
        gate = asyncio.Event()
        gate.set()

        def make() -> Counting:
            made.append(Counting(gate, [0, 0]))
            return made[-1]

        connections = Connections(8, make)
        for _ in range(5):
            async with connections.one() as t:
                await t.handle_async_request(httpx.Request("GET", "http://t.test/"))
        await connections.aclose()

    asyncio.run(main())
    assert len(made) == 1 and made[0].served == 5 and made[0].closed


class Wire(httpcore.AsyncNetworkStream):
    """What reached the socket, send by send; `broken`: the server closed its end."""

    def __init__(self, broken: bool = False) -> None:
        self.sends: list[bytes] = []
        self.broken, self.closed = broken, False
        self.tls: Wire | None = None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self.broken:
            raise httpcore.WriteError("[Errno 104] Connection reset by peer")
        self.sends.append(buffer)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return b"HTTP/1.1 413 Too Large\r\ncontent-length: 0\r\n\r\n"

    async def aclose(self) -> None:
        self.closed = True

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        self.tls = Wire()
        return self.tls


def test_a_request_leaves_in_one_send_with_the_same_bytes() -> None:
    async def main() -> tuple[Wire, bytes]:
        wire = Wire()
        conn = OneWriteStream(wire)
        parts = [b"POST /v1/chat HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\n", b"{}", b""]
        for part in parts:
            await conn.write(part)
        assert wire.sends == []  # held until the answer is read
        head = await conn.read(65536)
        assert wire.sends == [b"".join(parts)]
        big = b"x" * HOLD_AT_MOST
        await conn.write(b"PUT / HTTP/1.1\r\n\r\n")
        await conn.write(big)  # past the bound: what was held, then the upload as it is
        assert wire.sends[1:] == [b"PUT / HTTP/1.1\r\n\r\n", big]
        await conn.write(b"GET / HTTP/1.1\r\n\r\n")
        await conn.aclose()  # closed unanswered: what was held is dropped with it
        return wire, head

    wire, head = asyncio.run(main())
    assert head.startswith(b"HTTP/1.1 413") and len(wire.sends) == 3 and wire.closed


def test_an_answer_sent_before_the_request_was_read_is_still_read() -> None:
    """As httpcore does with its own writes: a server that closed its end may have answered."""

    async def main() -> bytes:
        conn = OneWriteStream(Wire(broken=True))
        await conn.write(b"POST / HTTP/1.1\r\ncontent-length: 9\r\n\r\ntoo large")
        return await conn.read(65536)

    assert asyncio.run(main()).startswith(b"HTTP/1.1 413")


def test_tls_is_started_on_the_connection_and_holds_its_writes_too() -> None:
    async def main() -> Wire:
        wire = Wire()
        tls = await OneWriteStream(wire).start_tls(ssl.create_default_context())
        assert isinstance(tls, OneWriteStream)
        await tls.write(b"GET / HTTP/1.1\r\n\r\n")
        assert wire.tls is not None and wire.tls.sends == []
        await tls.read(65536)
        return wire

    wire = asyncio.run(main())
    assert wire.tls is not None and wire.tls.sends == [b"GET / HTTP/1.1\r\n\r\n"]


def test_closing_closes_every_transport_even_when_one_fails() -> None:
    class Closing(httpx.AsyncBaseTransport):
        def __init__(self, fails: bool) -> None:
            self.fails, self.closed = fails, False

        async def aclose(self) -> None:
            self.closed = True
            if self.fails:
                raise OSError("gone")

    made = [Closing(True), Closing(False)]

    async def main() -> None:
        pool = iter(made)
        connections = Connections(2, lambda: next(pool))
        async with connections.one(), connections.one():
            pass
        with pytest.raises(OSError, match="gone"):
            await connections.aclose()

    asyncio.run(main())
    assert all(t.closed for t in made)
