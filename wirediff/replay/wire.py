"""Send one request on the wire with httpx, seen as an `Exchange` for the record builder."""

from __future__ import annotations

import ssl
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from wirediff._support import as_bytes
from wirediff._types import Record
from wirediff.record.exchange import (
    Error,
    Exchange,
    Request,
    Response,
    Timings,
    header_pairs,
    header_value,
)
from wirediff.record.tap import StreamTap, is_sse
from wirediff.replay.request import DEFAULT_PREFIXES, Outgoing, prepare, url_bytes_escaped
from wirediff.replay.targets import Target

__all__ = [
    "CONNECT_FAILED",
    "Sent",
    "exception_words",
    "exchange_from_httpx",
    "send",
    "to_httpx",
    "unsent_exchange",
]


def to_httpx(out: Outgoing, timeout: Mapping[str, Any]) -> httpx.Request:
    """Build the httpx request for `out`.

    Header values are as the capture decoded them, UTF-8 with undecodable bytes as surrogates,
    so a non-ASCII value goes out as it came in, and such bytes in the URL percent-encoded, as
    httpx sends any non-ASCII there."""
    headers = [(k.encode("ascii"), as_bytes(v)) for k, v in out.headers]
    url = url_bytes_escaped(out.url)
    return httpx.Request(
        out.method, url, headers=headers, content=out.content, extensions={"timeout": timeout}
    )


def unsent_exchange(
    rec: Record,
    target: Target,
    api_key: str | None,
    mapping: Mapping[str, str],
    error: Error,
    timeout: Mapping[str, Any],
    api_prefixes: Collection[str] = DEFAULT_PREFIXES,
) -> Exchange:
    """Make the exchange of a step without an answer.

    It holds the request it would have been (for an original too malformed to prepare, its
    method to the target's base URL) and `error` (its kind: `skipped`, not sent; `interrupted`,
    sent and no answer awaited)."""
    try:
        out = prepare(rec, target, api_key, mapping, api_prefixes=api_prefixes)
        request = to_httpx(out, timeout)
    except Exception:
        method = rec["request"].get("method")
        method = method if isinstance(method, str) and method.isascii() else "GET"
        out = Outgoing(method.upper(), target.base, [], None, None, False)
        request = to_httpx(out, timeout)
    return exchange_from_httpx(request, out.content, timings=Timings(time.time()), error=error)


def exchange_from_httpx(
    request: httpx.Request,
    content: bytes | None,
    response: httpx.Response | None = None,
    *,
    body: bytes = b"",
    timings: Timings,
    error: Error | None = None,
    tap: StreamTap | None = None,
) -> Exchange:
    """See `request` as sent and what came back as an `Exchange`.

    The `response` holds its raw, still encoded `body`, or a `tap` that saw the body stream
    through.

    `content` is the body the request was given (None: none): httpx sends no body and an
    empty one alike. The URL is the one the server saw, with the host from the Host header.
    """
    headers = header_pairs(request.headers.raw)
    path = request.url.raw_path.decode("utf-8", "surrogateescape")
    host = header_value(headers, "host") or request.url.netloc.decode("ascii")
    return Exchange(
        request=Request(
            method=request.method,
            url=f"{request.url.scheme}://{host}{path}",
            path=path,
            http_version="HTTP/1.1",  # the transport is made without http2
            headers=headers,
            content=content,
        ),
        response=None
        if response is None
        else Response(
            status=response.status_code,
            reason=response.reason_phrase,
            http_version=response.http_version,
            headers=header_pairs(response.headers.raw),
            content=body,
        ),
        timings=timings,
        error=error,
        tap=tap,
    )


@dataclass(frozen=True, slots=True)
class Sent:
    exchange: Exchange
    connect_failed: bool = False
    """No connection to the target could be made: it is down, or not where it is said to be."""


def exception_words(e: BaseException) -> str:
    """Put an exception in words; some, such as a reset connection, have none of their own."""
    return str(e) or type(e).__name__


CONNECT_FAILED = "cannot connect to"
"""How the message of an exchange begins when no connection was made: its host follows."""


def connect_failure_kind(e: BaseException) -> str:
    """Name a connection that failed by its cause, as the capture names it: `tls`, `timeout`.

    A TLS handshake that failed is `tls`, a connection that timed out `timeout`, any other
    `upstream_unreachable`. The cause is found in the chain of exceptions, never in words,
    which hold the target's host name."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ssl.SSLError):
            return "tls"
        if isinstance(cause, TimeoutError | httpx.ConnectTimeout):
            return "timeout"
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return "upstream_unreachable"


async def send(
    transport: httpx.AsyncBaseTransport, request: httpx.Request, content: bytes | None, cap: int
) -> Sent:
    """Send `request` with `content`, and stream the answer through a `StreamTap`.

    SSE events are split and timed as they arrive; `cap` decoded bytes are kept, whatever the
    target sends.

    Straight to the transport: a replay follows no redirect (each hop is its own exchange
    in the capture), keeps no cookies and runs no auth flow.
    """
    started = time.time()

    def failed(message: str, kind: str, *, connect_failed: bool = False) -> Sent:
        error = Error(message, kind)
        ex = exchange_from_httpx(request, content, timings=Timings(started), error=error)
        return Sent(ex, connect_failed)

    try:
        resp = await transport.handle_async_request(request)
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:
        port = request.url.port or (443 if request.url.scheme == "https" else 80)  # the default
        where = f"{request.url.host}:{port}"
        message = f"{CONNECT_FAILED} {where}: {exception_words(e)}"
        return failed(message, connect_failure_kind(e), connect_failed=True)
    except httpx.TimeoutException as e:
        return failed(f"timed out waiting for the answer: {exception_words(e)}", "timeout")
    except httpx.HTTPError as e:
        low = str(e).lower()
        disconnect = "disconnect" in low or "closed" in low or isinstance(e, httpx.ReadError)
        kind = "upstream_disconnect" if disconnect else "upstream_protocol"
        return failed(f"no valid HTTP answer: {exception_words(e)}", kind)
    first_byte = time.time()
    sse = is_sse(resp.headers.get("content-type", ""))
    encoding = resp.headers.get("content-encoding", "")
    tap = StreamTap(t0=started, content_encoding=encoding, cap=cap, sse=sse)
    finished: float | None = None
    error: Error | None = None
    try:
        async for chunk in resp.aiter_raw():
            tap(chunk)
        finished = time.time()
    except httpx.TimeoutException as e:
        error = Error(f"timed out reading the answer: {exception_words(e)}", "timeout")
    except httpx.HTTPError as e:
        error = Error(
            f"server disconnected mid-answer: {exception_words(e)}", "upstream_disconnect"
        )
    finally:
        await resp.aclose()
    timings = Timings(started, first_byte, finished)
    ex = exchange_from_httpx(request, content, resp, timings=timings, error=error, tap=tap)
    return Sent(ex)
