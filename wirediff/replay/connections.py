"""Connections to one target: at most `size` requests at once, each on a connection of its
own.

httpx's connection pool looks at every connection it holds each time a request starts or
ends, and asks each idle one's socket whether it is readable: its cost per request grows
with the pool (at concurrency 8, about a quarter of the replayer's CPU). Here a request
takes a transport that holds one connection, kept alive for the next request that takes it,
so that check sees one connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType

import httpx

__all__ = ["Connections"]


class Connections:
    """`size` transports made by `make` as they are first needed, lent one per request."""

    def __init__(self, size: int, make: Callable[[], httpx.AsyncBaseTransport]) -> None:
        self.size = max(size, 1)
        self._make = make
        self._made: list[httpx.AsyncBaseTransport] = []
        self._free: list[httpx.AsyncBaseTransport] = []
        self._slots: asyncio.Semaphore | None = None

    @classmethod
    def to_network(cls, size: int) -> Connections:
        """Real connections: one SSL context for all of them (making one reads the CA
        bundle), which honours SSL_CERT_FILE / SSL_CERT_DIR for targets behind a private CA."""
        context = httpx.create_ssl_context(trust_env=True)
        one = httpx.Limits(max_connections=1, max_keepalive_connections=1)

        def make() -> httpx.AsyncBaseTransport:
            return httpx.AsyncHTTPTransport(limits=one, verify=context, trust_env=True)

        return cls(size, make)

    @asynccontextmanager
    async def one(self) -> AsyncIterator[httpx.AsyncBaseTransport]:
        """A transport of its own for one request; waits while `size` are lent."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        async with self._slots:
            if self._free:
                transport = self._free.pop()  # the last returned: its connection is warm
            else:
                transport = self._make()
                self._made.append(transport)
            try:
                yield transport
            finally:
                self._free.append(transport)

    async def aclose(self) -> None:
        made, self._made, self._free = self._made, [], []
        for transport in made:
            await transport.aclose()

    async def __aenter__(self) -> Connections:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
