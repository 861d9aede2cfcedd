"""Bodies over the cap (uploads, images inlined as base64): the recorder is handed the cap's
worth of them and their end, with the credentials found in the rest, and tags what the SDK
wrote around the long value."""

from __future__ import annotations

import base64
import gzip
import json
import marshal
import random
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from tests.unit.test_capture_addon import chat_flow
from wirediff.record.build import build_record
from wirediff.record.flow import exchange_from_flow, exchange_from_snapshot, snapshot
from wirediff.record.names import MAX_FOUND, OVERLAP, WINDOW, credentials_in
from wirediff.record.partial import cut_members
from wirediff.record.redact import fingerprint
from wirediff.record.websocket import WebSocketTap

SCALARS: list[Any] = [None, True, False, 0, -12.5e3, "x", 'q"\\"', "é\\", ""]


def _json(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth > 3 or pick < 0.5:
        return rng.choice(SCALARS)
    if pick < 0.75:
        return [_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice('abc]}"\\'): _json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


@pytest.mark.parametrize("space", ["", " ", "\n  "])
def test_members_read_from_a_cut_object_are_its_own(space: str) -> None:
    """Whatever the cut, a member read is one the object has, with its value; a scalar
    member the kept start or the kept end holds whole is read."""
    rng = random.Random(space)
    for _ in range(100):
        obj = {f"k{i}": _json(rng) for i in range(rng.randint(1, 6))}
        members, spans, at = [], {}, 1 + len(space)
        for name, value in obj.items():
            member = f"{json.dumps(name)}{space}:{space}{json.dumps(value)}"
            members.append(member)
            spans[name] = (at, at + len(member))
            at += len(member) + len(space) + 1 + len(space)
        text = "{" + space + f"{space},{space}".join(members) + space + "}"
        for cut in range(len(text) + 1):
            found = cut_members(text[:cut], text[cut:])
            assert all(obj[k] == v for k, v in found.items()), (text, cut, found)
            number_at_cut = {  # the start's last number may be cut: `12` of `125`
                k for k, (_, b) in spans.items() if b == cut and isinstance(obj[k], int | float)
            }
            whole = {
                k
                for k, (a, b) in spans.items()
                if (b <= cut or a >= cut) and not isinstance(obj[k], dict | list)
            } - number_at_cut
            assert whole <= set(found), (text, cut, found)


def test_an_sdk_request_over_the_cap_keeps_its_model_and_stream() -> None:
    image = "data:image/png;base64," + "A" * 5_000_000
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}],
            "model": "gpt-4o-mini",
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )  # fmt: skip
    assert cut_members(body[: 1 << 20], body[-(64 << 10) :]) == {
        "model": "gpt-4o-mini",
        "stream": True,
    }
    assert cut_members(gzip.compress(body.encode(), mtime=0)[:100].decode("latin-1")) == {}


CAP = 1 << 16


def upload_flow(body: bytes, encoding: str = "") -> http.HTTPFlow:
    f = chat_flow(body)
    if encoding:
        f.request.headers["content-encoding"] = encoding
    return f


def vision_request(image_bytes: int) -> bytes:
    noise = random.Random(image_bytes).randbytes(image_bytes)  # gzip leaves it as long
    image = "data:image/png;base64," + base64.b64encode(noise).decode()
    content = [
        {"type": "text", "text": "what is it?"},
        {"type": "image_url", "image_url": {"url": image}},
    ]
    return json.dumps(
        {"messages": [{"role": "user", "content": content}], "model": "gpt-4o", "stream": True}
    ).encode()  # fmt: skip


@pytest.mark.parametrize("encoding", ["", "gzip"])
def test_a_body_over_the_cap_goes_to_the_recorder_cut_and_records_the_same(
    encoding: str,
) -> None:
    """The snapshot holds the cap's worth of an upload (and its end), not all of it; the
    record built from it is the one built from the whole flow in mitmdump's process."""
    body = vision_request(40 * CAP)
    sent = gzip.compress(body, 1, mtime=0) if encoding else body
    f = upload_flow(sent, encoding)
    frame = marshal.dumps(snapshot(f, None, CAP))
    assert len(frame) < 2 * CAP + (64 << 10) + 8192 < len(sent)
    again = build_record(
        exchange_from_snapshot(marshal.loads(frame)), session="s", label="l", seq=0, body_cap=CAP
    )
    whole = build_record(exchange_from_flow(f), session="s", label="l", seq=0, body_cap=CAP)
    assert again == whole
    request = whole["request"]
    assert request["size"] == len(sent) and request["truncated"] and request["body"] is None
    assert (request["text"] or "").startswith('{"messages"')
    tags = whole["tags"]
    assert (tags["model"], tags["stream"]) == (("gpt-4o", True) if not encoding else (None, False))


def test_a_body_within_the_cap_and_its_margin_is_sent_whole() -> None:
    f = upload_flow(b"{}" * CAP)
    snap = snapshot(f, None, CAP)
    assert snap[1][8] is f.request.data.content  # by reference, not copied


PAD = base64.b64encode(random.Random(7).randbytes(3 * CAP)).decode()
"""An upload's long middle: base64, as an inlined image is."""
SHAPES = [
    "sk-proj-Abc123def456ghi789jkl012",
    "SK-UPPER-CASED-KEY-0123456789ab",
    "gsk_0123456789abcdefABCDEFxyz",
    "hf_0123456789abcdefABCDEFxyz",
    "ghp_0123456789abcdefABCDEFxyz",
    "xai-0123456789abcdefABCDEFxyz",
    "AIzaSyA0123456789abcdefghijklmnopqrstu",
]
FIELDS = {
    "openai_api_key": "not-shaped-1",
    "authorization": "Bearer not-shaped-2",
    "key": "not-shaped-3",
    "token": "not-shaped-4",
    "client_secret": "not-shaped-5",
    "Password": "not-shaped-6",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_key_past_the_start_is_found_by_its_shape(shape: str) -> None:
    arounds = [f'"{shape}"', f" {shape}\n", f"={shape}&"]
    if "-" in shape or "_" in shape:  # found even amid base64, by its dash
        arounds.append(f"{PAD}/{shape}+{PAD}")
    for around in arounds:
        data = (PAD + around + PAD).encode()
        assert credentials_in(data, CAP) == [shape], around[:40]


def test_credential_named_fields_past_the_start_are_found_by_their_name() -> None:
    for name, value in FIELDS.items():
        for member in (f'"{name}":"{value}"', f'"{name}" :  "{value}"'):
            data = f'{{"input":"{PAD}",{member},"more":"{PAD}"}}'.encode()
            assert credentials_in(data, CAP) == [value], member
    escaped = f'{{"input":"{PAD}","api_key":"a\\"b\\u00e9c"}}'.encode()
    assert credentials_in(escaped, CAP) == ['a"béc']


def test_a_key_the_cut_splits_is_found_whole() -> None:
    key = SHAPES[0]
    for into in range(len(key) + 1):
        data = ("x" * (CAP - into) + " " + key + " " + PAD).encode()
        assert credentials_in(data, CAP + 1) == [key], into
    field = f'"api_key": "{FIELDS["key"]}"'
    for into in range(len(field) + 1):
        data = f'{{"a":"{"x" * (CAP - into)}",{field},"b":"{PAD}"}}'.encode()
        assert credentials_in(data, CAP + 8) == [FIELDS["key"]], into


def test_a_key_across_a_window_boundary_is_found_once() -> None:
    key = SHAPES[0]
    for at in (WINDOW - 10, WINDOW, WINDOW + OVERLAP - 10):
        data = b"A" * at + b" " + key.encode() + b" " + b"A" * 100
        assert credentials_in(data) == [key], at


def test_innocent_bytes_hold_no_credential() -> None:
    innocent = json.dumps(
        {
            "messages": [{"role": "user", "content": "the key to a secret token, sk-8 ok"}] * 200,
            "prompt_cache_key": "user-1234567890",
            "max_tokens": 10,
            "input": PAD,
            "url": "data:image/png;base64," + base64.urlsafe_b64encode(random.Random(3).randbytes(9999)).decode(),
            "tools": [{"type": "function", "name": "get_key", "description": "api-key-free"}],
        }
    ).encode()  # fmt: skip
    assert credentials_in(innocent) == []
    assert credentials_in(b"\xff\xfe" * CAP + b"\x00key\x00") == []


def test_a_body_stuffed_with_keys_gives_at_most_max_found() -> None:
    data = " ".join(f"sk-{i:024d}" for i in range(2 * MAX_FOUND)).encode()
    assert len(credentials_in(data)) == MAX_FOUND


def test_a_key_only_in_an_uploads_dropped_middle_is_scrubbed_from_its_echo() -> None:
    """The snapshot finds the key where the recorder is not handed the body; the record
    built from the snapshot is the one built from the whole flow, the echo fingerprinted."""
    key = "sk-proj-MIDDLE-ONLY-0123456789abcdef"
    long = "x" * (40 * CAP)
    body = json.dumps({"messages": [long], "api_key": key, "pad": long, "model": "m"}).encode()
    f = upload_flow(body)
    f.response = chat_flow(status_code=401).response
    assert f.response is not None
    f.response.headers["x-echo"] = key.upper()
    f.response.content = json.dumps({"error": {"message": f"bad key {key}"}}).encode()
    snap = snapshot(f, None, CAP)
    assert key.encode() not in marshal.dumps(snap)[: 2 * CAP] + (snap[1][12] or b"")
    again = build_record(exchange_from_snapshot(snap), session="s", label="l", seq=0, body_cap=CAP)
    whole = build_record(exchange_from_flow(f), session="s", label="l", seq=0, body_cap=CAP)
    assert again == whole
    text = json.dumps(again)
    assert key.lower() not in text.lower() and fingerprint(key) in text


def test_a_websocket_client_message_is_looked_through_where_no_event_keeps_it() -> None:
    """Past the cap of a message cut, and all of a message dropped (the session's events
    are full): the client's credentials there are the tap's; a server's are not."""
    key, other = SHAPES[0], "sk-DROPPED-WHOLE-0123456789abcdef"
    tap = WebSocketTap(t0=0.0, cap=CAP, max_events=2)
    cut = json.dumps({"type": "session.update", "pad": PAD, "openai_api_key": key}).encode()
    tap.message(WebSocketMessage(Opcode.TEXT, True, cut, 1.0))
    tap.message(WebSocketMessage(Opcode.TEXT, False, cut.replace(b"sk-", b"rk-"), 1.0))
    tap.message(WebSocketMessage(Opcode.TEXT, True, f'{{"key": "{other}"}}'.encode(), 1.0))
    assert (len(tap.events), tap.events_dropped) == (2, 1)
    assert key not in json.dumps(tap.events)
    assert tap.found == [key, other]
