"""Lend connections to one target, each sending a request in one write.

At most `size` requests go at once, each on a connection of its own.

httpx's connection pool looks at every connection it holds each time a request starts or
ends, and asks each idle one's socket whether it is readable: its cost per request grows
with the pool (at concurrency 8, about a quarter of the replayer's CPU). Here a request
takes a transport that holds one connection, kept alive for the next request that takes it,
so that check sees one connection (an idle one the server closed is found when its transport
is next taken, or at `aclose`). And httpcore writes a request's head, its body and its
end separately: held until the answer is read, they leave in one send, which spares the
client and the target a wake-up each (about 5% of both's CPU per exchange on loopback).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import httpcore
import httpx

__all__ = ["HOLD_AT_MOST", "Connections", "OneWriteStream"]

HOLD_AT_MOST = 64 << 10
"""Bytes a connection holds back before it writes them anyway.

A large upload goes out as it is written."""


class OneWriteStream(httpcore.AsyncNetworkStream):
    """Hold what is written to a connection until the next read or `HOLD_AT_MOST` bytes.

    The bytes sent are the same, in fewer sends."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._held: list[bytes] = []
        self._size = 0

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self._size + len(buffer) < HOLD_AT_MOST:
            if buffer:
                self._held.append(buffer)
                self._size += len(buffer)
            return
        await self._flush(timeout)
        await self._stream.write(buffer, timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Send what was held, with this read's timeout, then read.

        A server may close its end and answer before it reads a request, a 413 say; so, as
        httpcore does with its own writes, a failed write leaves the answer to be read."""
        if self._held:
            with contextlib.suppress(httpcore.WriteError):
                await self._flush(timeout)
        return await self._stream.read(max_bytes, timeout)

    async def _flush(self, timeout: float | None) -> None:
        if not self._held:
            return
        data = b"".join(self._held)
        self._held.clear()
        self._size = 0
        await self._stream.write(data, timeout)

    async def aclose(self) -> None:
        self._held.clear()
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return OneWriteStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _OneWriteBackend(httpcore.AsyncNetworkBackend):
    """Wrap httpcore's own backend so that its connections are `OneWriteStream`s."""

    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return OneWriteStream(stream)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        return OneWriteStream(
            await self._backend.connect_unix_socket(path, timeout, socket_options)
        )

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class _OneConnectionTransport(httpx.AsyncHTTPTransport):
    """Send each request in one write over one connection, as an httpx transport."""

    def __init__(self, context: ssl.SSLContext) -> None:
        one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        super().__init__(limits=one, verify=context, trust_env=True)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=1,
            max_keepalive_connections=1,
            keepalive_expiry=one.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=_OneWriteBackend(),
        )


class Connections:
    """Lend `size` transports, made by `make` as they are first needed, one per request."""

    def __init__(self, size: int, make: Callable[[], httpx.AsyncBaseTransport]) -> None:
        self.size = max(size, 1)
        self._make = make
        self._made: list[httpx.AsyncBaseTransport] = []
        self._free: list[httpx.AsyncBaseTransport] = []
        self._slots: asyncio.Semaphore | None = None

    @classmethod
    def to_network(cls, size: int) -> Connections:
        """Make real connections, with one SSL context for all of them.

        Making a context reads the CA bundle; this one honours SSL_CERT_FILE / SSL_CERT_DIR for
        targets behind a private CA."""
        context = httpx.create_ssl_context(trust_env=True)
        return cls(size, lambda: _OneConnectionTransport(context))

    @asynccontextmanager
    async def one(self) -> AsyncIterator[httpx.AsyncBaseTransport]:
        """Lend a transport of its own for one request; wait while `size` are lent."""
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
        """Close every transport made; the first failure is raised once all are closed."""
        made, self._made, self._free = self._made, [], []
        failed: list[Exception] = []
        for transport in made:
            try:
                await transport.aclose()
            except Exception as e:
                failed.append(e)
        if failed:
            raise failed[0]

    async def __aenter__(self) -> Connections:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
