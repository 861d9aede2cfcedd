"""Bodies over the cap (uploads, images inlined as base64): the recorder is handed the cap's
worth of them and their end, and tags what the SDK wrote around the long value."""

from __future__ import annotations

import base64
import gzip
import json
import marshal
import random
from typing import Any

import pytest
from mitmproxy import http

from tests.unit.test_capture_addon import chat_flow
from wirediff.record.build import build_record
from wirediff.record.flow import exchange_from_flow, exchange_from_snapshot, snapshot
from wirediff.record.partial import cut_members

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
    for _ in range(300):
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
    assert cut_members(gzip.compress(body.encode())[:100].decode("latin-1")) == {}


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
    sent = gzip.compress(body, 1) if encoding else body
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
