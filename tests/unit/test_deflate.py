"""permessage-deflate as the capture has mitmproxy negotiate it: what wsproto does, each
message inflated to a bound at most (past it, 1009)."""

from __future__ import annotations

from typing import Any

import pytest
import wsproto.extensions
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, CloseConnection, Event, TextMessage

from wirediff.addons import _deflate
from wirediff.addons._deflate import BoundedDeflate

BOUND = 1000


def pair(*, no_takeover: bool) -> tuple[Connection, Connection]:
    """A server sending with wsproto's own deflate, a client reading with the bounded one."""
    offer = "permessage-deflate" + ("; server_no_context_takeover" if no_takeover else "")
    sending, reading = wsproto.extensions.PerMessageDeflate(), BoundedDeflate()
    sending.finalize(offer)
    reading.finalize(offer)
    return Connection(ConnectionType.SERVER, [sending]), Connection(
        ConnectionType.CLIENT, [reading]
    )


def relay(server: Connection, client: Connection, *events: Event, piece: int = 7) -> list[Any]:
    """What the client reads of `events`, fed a few bytes at a time: each message whole
    (its type and data), or the close."""
    wire = b"".join(server.send(e) for e in events)
    out: list[Any] = []
    parts: list[Any] = []
    for at in range(0, len(wire), piece):
        client.receive_data(wire[at : at + piece])
        for event in client.events():
            if isinstance(event, CloseConnection):
                out.append(event.code)
            elif isinstance(event, TextMessage | BytesMessage):
                parts.append(event.data)
                if event.message_finished:
                    out.append((type(event), parts[0][:0].join(parts)))
                    parts = []
    return out


@pytest.mark.parametrize("no_takeover", [False, True])
def test_messages_within_the_bound_read_as_wsproto_reads_them(
    monkeypatch: pytest.MonkeyPatch, no_takeover: bool
) -> None:
    monkeypatch.setattr(_deflate, "MAX_INFLATED", BOUND)
    server, client = pair(no_takeover=no_takeover)
    sent: list[TextMessage | BytesMessage] = [
        TextMessage("a" * BOUND),
        BytesMessage(b"\0" * BOUND),
        TextMessage("é" * 10),
    ] * 3
    assert relay(server, client, *sent) == [(type(e), e.data) for e in sent]


def test_a_message_past_the_bound_closes_with_1009(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_deflate, "MAX_INFLATED", BOUND)
    server, client = pair(no_takeover=False)
    got = relay(server, client, TextMessage("a" * BOUND), TextMessage("b" * (BOUND + 1)))
    assert got == [(TextMessage, "a" * BOUND), 1009]
