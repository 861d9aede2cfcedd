"""A stand-in's lifetime: start one on a free loopback port, use it, stop it.

wirediff needs backends to capture from and replay against on a machine with no network
and no keys. One small stdlib server (`wirediff.backends.server`) plays any provider
profile in `wirediff/profiles/`, answering with the bodies and events of
`wirediff.backends.payloads`.

Usage:
    with standin("lmstudio", delay=0.0) as url:
        client = OpenAI(base_url=url + "/v1", api_key="x")
    wirediff stand-in lmstudio --port 1234
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from wirediff.backends.server import Seen, StandinServer, StoredResponse
from wirediff.profiles import Profile, profile

__all__ = ["Standin", "make_standin", "standin"]


@dataclass
class Standin:
    """A running stand-in (see `standin()` for the options); `url` is the server root."""

    profile: Profile
    delay: float = 0.0
    api_key: str | None = None
    models: list[str] = field(default_factory=list)
    gzip: bool = False
    redirect: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    verbose: bool = False
    pace: Callable[[int], bool] | None = None
    """Asked before SSE event i > 0 is written; False drops the connection instead."""
    seen: list[Seen] = field(default_factory=list)
    store: dict[str, StoredResponse] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)
    _server: StandinServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("stand-in not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> str:
        self._server = StandinServer((self.host, self.port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"standin-{self.profile['name']}",
            daemon=True,
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop accepting, end open connections (so no handler lingers), close the socket."""
        srv, self._server = self._server, None
        if srv is None:
            return
        self.stopping.set()
        srv.shutdown()
        with srv.lock:
            conns = list(srv.conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        srv.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Standin:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def make_standin(
    name: str | Profile = "openai",
    *,
    delay: float = 0.0,
    api_key: str | None = None,
    models: Sequence[str] | None = None,
    gzip: bool = False,
    redirect: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    verbose: bool = False,
    pace: Callable[[int], bool] | None = None,
) -> Standin:
    """A not-yet-started `Standin` (for callers that need `.seen` or a manual lifetime).

    `pace(i)` is asked before each SSE event after the first: tests hand a stream over one
    event at a time with it (see `standin()` for the other options).
    """
    prof = profile(name) if isinstance(name, str) else name
    served = (
        list(models) if models is not None else list((prof.get("models") or {}).get("served", []))
    )
    return Standin(
        prof,
        delay=delay,
        api_key=api_key,
        models=served,
        gzip=gzip,
        redirect=redirect,
        host=host,
        port=port,
        verbose=verbose,
        pace=pace,
    )


@contextlib.contextmanager
def standin(
    name: str | Profile = "openai",
    *,
    delay: float = 0.0,
    api_key: str | None = None,
    models: Sequence[str] | None = None,
    gzip: bool = False,
    redirect: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
) -> Iterator[str]:
    """Run a stand-in for profile `name` on a free loopback port; yields its root URL
    (`http://127.0.0.1:PORT`, clients use `url + "/v1"`) and shuts it down on exit.

    `delay` seconds between SSE events; `api_key` turns on the profile's key checks;
    `models` replaces the profile's served ids (`fault-*` models always work; an empty
    list plays LM Studio's "No models loaded"); `gzip` compresses answers for clients
    that accept it; `redirect="https://host:port"` answers every request 301 to there.
    """
    with make_standin(
        name,
        delay=delay,
        api_key=api_key,
        models=models,
        gzip=gzip,
        redirect=redirect,
        host=host,
        port=port,
    ) as s:
        yield s.url
