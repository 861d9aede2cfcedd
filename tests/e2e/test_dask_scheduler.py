"""`--engine dask --scheduler ADDRESS`: an address that is none, or a port that accepts and
never answers as a scheduler, is one usage error (exit 2), not a hang."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from wirediff.engine.engines import DaskEngine
from wirediff.errors import UsageError

pytestmark = pytest.mark.e2e


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never says anything."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:  # closed
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    with contextlib.suppress(OSError):  # wakes the accept: a close alone may not
        server.shutdown(socket.SHUT_RDWR)
    thread.join(10)  # before the close: its number may not be reused while it accepts
    assert not thread.is_alive()
    server.close()
    for conn in held:  # every one it accepted, now that it accepts no more
        conn.close()


def test_a_port_that_never_answers_is_a_usage_error(silent_port: int) -> None:
    with pytest.raises(UsageError, match="nothing answered as a Dask scheduler in 1 s"):
        DaskEngine(f"tcp://127.0.0.1:{silent_port}", connect_s=1)


@pytest.mark.parametrize("address", ["file:///x", "", "tcp://127.0.0.1:99999"])
def test_an_address_that_is_none_is_told_without_connecting(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import distributed

    def connect(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{address!r} was connected to")

    monkeypatch.setattr(distributed, "Client", connect)
    with pytest.raises(UsageError, match=r"a scheduler's address: tcp://HOST:8786"):
        DaskEngine(address, connect_s=5)


def test_a_host_that_resolves_to_nothing_says_what_an_address_looks_like() -> None:
    with pytest.raises(UsageError, match=r"a scheduler's address: tcp://HOST:8786"):
        DaskEngine("foo", connect_s=5)


def test_a_port_nothing_listens_on_is_said_at_once() -> None:
    """Refused: told as the refusal, not as a client's time-out 30 s later."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(
        UsageError, match=rf"--scheduler tcp://127.0.0.1:{port}: Connection refused"
    ):
        DaskEngine(f"tcp://127.0.0.1:{port}", connect_s=30)


def test_a_client_that_connects_once_given_up_on_is_closed(
    monkeypatch: pytest.MonkeyPatch, silent_port: int
) -> None:
    import distributed

    late = threading.Event()
    closed = threading.Event()

    class SlowClient:
        def __init__(self, address: str, timeout: float) -> None:
            late.wait(10)

        def close(self) -> None:
            closed.set()

    monkeypatch.setattr(distributed, "Client", SlowClient)
    with pytest.raises(UsageError, match="nothing answered"):
        DaskEngine(f"tcp://127.0.0.1:{silent_port}", connect_s=0.1)
    late.set()
    assert closed.wait(10)


def test_whatever_the_client_raises_is_the_one_line_said(
    monkeypatch: pytest.MonkeyPatch, silent_port: int
) -> None:
    import distributed

    def refused(address: str, timeout: float) -> None:
        raise RuntimeError("handshake refused")

    monkeypatch.setattr(distributed, "Client", refused)
    with pytest.raises(UsageError, match="handshake refused"):
        DaskEngine(f"tcp://127.0.0.1:{silent_port}", connect_s=5)
