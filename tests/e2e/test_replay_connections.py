"""Connections to a real loopback server: kept alive and reused, at most `size` at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from wirediff.replay.connections import Connections, OneWriteStream

pytestmark = pytest.mark.e2e


@asynccontextmanager
async def _serve(counts: list[int]) -> AsyncIterator[str]:
    """A loopback HTTP/1.1 server that keeps connections alive and counts them."""
    writers: list[asyncio.StreamWriter] = []

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counts[0] += 1
        writers.append(writer)
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.close()
        for w in writers:
            w.close()
            await w.wait_closed()
        await server.wait_closed()


def test_real_connections_are_reused_and_bounded() -> None:
    counts = [0]

    async def main() -> list[int]:
        async with _serve(counts) as url, Connections.to_network(4) as connections:

            async def get() -> int:
                async with connections.one() as t:
                    resp = await t.handle_async_request(httpx.Request("GET", url))
                    await resp.aread()
                    assert isinstance(resp.extensions["network_stream"], OneWriteStream)
                    return resp.status_code

            return await asyncio.gather(*(get() for _ in range(40)))

    statuses = asyncio.run(main())
    assert statuses == [200] * 40
    assert 1 <= counts[0] <= 4  # 40 requests over at most four kept-alive connections
