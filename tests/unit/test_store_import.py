from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import re
from pathlib import Path
from typing import Any, cast

import pytest
from mitmproxy import io
from mitmproxy.addons.savehar import SaveHar
from mitmproxy.test import taddons, tflow

from tests.fixtures.records import answer, bare_record, events_of, websocket_of
from tests.unit.test_capture_addon import KEY, chat_flow, flow_response
from wirediff._types import ExchangeError, Record, RecordRequest, RecordResponse, Sdk
from wirediff.analysis.comparison.rows import EXCHANGE_COLUMNS, exchange_row
from wirediff.analysis.index.analyze import Index
from wirediff.cli import main
from wirediff.cli.inputs import iter_capture
from wirediff.errors import CaptureError
from wirediff.record.body import parse_json
from wirediff.record.importer import import_flows
from wirediff.record.store import (
    RecordWriter,
    _escaped,
    _lone_surrogates,
    encode_record,
    load_records,
)
from wirediff.replay.request import prepare
from wirediff.replay.targets import Target
from wirediff.replay.wire import to_httpx

REC = bare_record("a")
RESPONSE: RecordResponse = {
    "status": 200,
    "reason": "OK",
    "http_version": "HTTP/1.1",
    "headers": [],
    "body": None,
    "text": None,
    "size": 0,
    "events": None,
    "complete": True,
}


def test_truncated_last_line_is_tolerated(tmp_path: Path) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps(REC) + "\n" + json.dumps({**REC, "id": "b"})[:20])
    assert [r["id"] for r in load_records([p])] == ["a"]


def test_writer_after_a_cut_line_moves_the_fragment_aside(tmp_path: Path) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps(REC) + "\n" + '{"format": "wiredi')
    for rid in ("c", "d"):  # a restart, then another: the capture stays readable
        with RecordWriter(p) as w:
            w.write({**REC, "id": rid})
    assert [r["id"] for r in load_records([p])] == ["a", "c", "d"]
    assert (tmp_path / "c.jsonl.fragments").read_text() == '{"format": "wiredi\n'


def test_lone_surrogates_are_replayed_as_their_bytes_and_analysed_as_escapes(
    tmp_path: Path,
) -> None:
    """The recorder keeps a header's undecodable bytes as lone surrogates: a replay sends
    the bytes back; the analysis, whose frames hold only UTF-8, reads their escapes."""
    p = tmp_path / "s.jsonl"
    request: RecordRequest = {
        **REC["request"], "path": "/caf\udce9", "headers": [["x-name", "caf\udce9"]]
    }  # fmt: skip
    with RecordWriter(p) as w:
        w.write({**REC, "request": request})
    (sent,) = iter_capture(p)
    assert sent["request"]["path"] == "/caf\udce9"
    out = prepare(sent, Target("t", "http://t:1"), None, {})
    assert ("x-name", "caf\udce9") in out.headers
    request_sent = to_httpx(out, {})
    assert request_sent.headers.raw[-1] == (b"x-name", b"caf\xe9")
    assert request_sent.url.raw_path == b"/caf%E9"
    mixed = dataclasses.replace(out, headers=[("x-odd", "\udce9\ud800")])
    assert to_httpx(mixed, {}).headers.raw[-1] == (b"x-odd", b"\xe9\xed\xa0\x80")
    # a client's JSON may escape a lone surrogate: it goes back so
    odd = cast(Record, {**sent, "request": {**sent["request"], "body": {"x": "\ud800é"}}})
    assert prepare(odd, Target("t", "http://t:1"), None, {}).content == b'{"x":"\\ud800\\u00e9"}'
    (rec,) = load_records([p])
    assert rec["request"]["path"] == "/caf\\udce9"
    assert rec["request"]["headers"] == [["x-name", "caf\\udce9"]]


@pytest.mark.parametrize(
    ("text", "lone"),
    [
        ('"한국어"'.encode(), False),  # UTF-8 from ED 95 9C: not a surrogate's bytes
        (b'"\\ud83d\\ude00 \\uD83D\\uDE00"', False),  # escaped pairs: an emoji
        (b'"\\ud83d"', True),
        (b'"x\\uDE00"', True),
        (b'"\\ude00\\ud83d"', True),  # the wrong way round: two lone ones
        (b'"\xed\xb3\xa9"', True),  # \udce9 as bytes, which JSON readers take
    ],
)
def test_lone_surrogates_are_told_from_text_that_only_looks_alike(text: bytes, lone: bool) -> None:
    assert _lone_surrogates(text) is lone
    assert (_escaped(json.loads(text)) != json.loads(text)) is lone


def test_a_record_line_reads_back_as_the_record_whatever_its_values() -> None:
    odd: list[Any] = [10**30, -(2**63), 2**64, 1e-05, 1e16, -0.0, 5e-324, "\u2028é\x00", [], {}]
    rec = cast(Record, {**REC, "request": {**REC["request"], "body": {"odd": odd}}})
    line = encode_record(rec)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == rec  # an integer past 64 bits is kept exact (the fallback)
    assert math.copysign(1, json.loads(line)["request"]["body"]["odd"][5]) == -1


async def test_a_har_timing_that_is_not_a_finite_number_counts_as_none(tmp_path: Path) -> None:
    with taddons.context():
        har = SaveHar().make_har([chat_flow()])

    def imported(timings: dict[str, Any]) -> Record:
        for entry in har["log"]["entries"]:
            entry["timings"] = timings
        p = tmp_path / "s.har"
        p.write_text(json.dumps(har))
        (rec,) = import_flows(p)
        return rec

    odd = imported({"wait": "NaN", "receive": "Infinity", "blocked": "x"})
    assert odd["ttfb_ms"] == imported({})["ttfb_ms"] and math.isfinite(odd["duration_ms"] or 0)
    assert b"NaN" not in encode_record(odd)


@pytest.mark.parametrize("body", ['{"x": NaN}', '{"x": -Infinity}', '{"x": 1e400}', "[1, 2"])
def test_what_is_not_json_text_is_kept_as_text(body: str) -> None:
    assert parse_json(body) == (None, body, False)
    assert parse_json('{"x": 1e308}') == ({"x": 1e308}, None, False)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"format": "har/1.2"}\n', "not a wirediff/1 record (format='har/1.2')"),
        (
            "[1, 2]\n",
            "not a wirediff/1 record (a JSON array; each line of a capture is one record's object)",
        ),
        ("garbage\nmore\n", "c.jsonl: not a wirediff/1 capture (no line is a JSON record)"),
        (
            json.dumps({**REC, "id": 3}) + "\n",
            "malformed wirediff/1 record (id must be a string, not integer)",
        ),
        (json.dumps({**REC, "request": None}) + "\n", "(request must be an object, not null)"),
        (
            json.dumps({**REC, "response": {**RESPONSE, "status": "200"}}) + "\n",
            "(response.status must be an integer, not string)",
        ),
        (
            json.dumps({**REC, "response": {**RESPONSE, "websocket": [], "events": []}}) + "\n",
            "(response.websocket must be an object or null, not array)",
        ),
        (
            json.dumps(
                {
                    **REC,
                    "response": {
                        **RESPONSE,
                        "events": [{"event": None, "data": 1, "direction": 0}],
                    },
                }
            )
            + "\n",
            "(response.events[0].direction must be a string or null, not integer)",
        ),
        (
            json.dumps({**REC, "tags": {**REC["tags"], "transport": 1}}) + "\n",
            "(tags.transport must be a string or null, not integer)",
        ),
        (json.dumps({**REC, "tags": None}) + "\n", "(tags must be an object, not null)"),
        (
            json.dumps({**REC, "tags": {**REC["tags"], "sdk": {"user_agent": 5}}}) + "\n",
            "(tags.sdk.user_agent must be a string or null, not integer)",
        ),
    ],
)
def test_other_formats_are_rejected(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text(content)
    with pytest.raises(CaptureError, match=re.escape(message)):
        load_records([p])


def _lines(*ids: str) -> list[str]:
    return [json.dumps({**REC, "id": i}) for i in ids]


RESPONSES_B = json.dumps(
    {
        **REC,
        "id": "b",
        "request": {**REC["request"], "body": {"text": {"format": {"type": "text"}}}},
    }
)


@pytest.mark.parametrize(
    ("lines", "expect"),
    [
        (_lines("a", "b", "c", "d", "e"), ["a", "b", "c", "d", "e"]),  # across batches
        ([*_lines("a", "b", "c"), "", "  ", *_lines("d")], ["a", "b", "c", "d"]),  # blanks
        ([*_lines("a", "b", "c"), '{"format": "wiredi'], ["a", "b", "c"]),  # cut, 2nd batch
        ([*_lines("a"), '{"format": "wiredi'], ["a"]),  # cut, end of a batch
        ([*_lines("a"), '{"format": "wiredi', *_lines("b")], ["a", "b"]),  # torn mid-file
        ([*_lines("a", "b"), '{"format": "x"}', *_lines("c")], "c.jsonl:3: not a wirediff/1"),
        # two records on one line are not one record, even though "[a, b]" parses
        ([_lines("a")[0] + "," + _lines("b")[0], *_lines("c")], ["b", "c"]),
        # a record appended after a fragment a crash left is recovered
        ([*_lines("a"), '{"format": "wire' + _lines("b")[0], *_lines("c")], ["a", "b", "c"]),
        # ... whose body has a "format" key of its own (a Responses request's `text`)
        ([*_lines("a"), '{"format": "wire' + RESPONSES_B, *_lines("c")], ["a", "b", "c"]),
        ([*_lines("a"), RESPONSES_B[:-9] + RESPONSES_B, *_lines("c")], ["a", "b", "c"]),
    ],
)
def test_records_parsed_in_batches_keep_line_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str], expect: object
) -> None:
    monkeypatch.setattr("wirediff.record.lines.BATCH_LINES", 2)
    p = tmp_path / "c.jsonl"
    p.write_text("\n".join(lines))
    if isinstance(expect, list):
        assert [r["id"] for r in load_records([p])] == expect
    else:
        with pytest.raises(CaptureError, match=str(expect)):
            load_records([p])


def test_torn_lines_anywhere_are_skipped_with_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text("\n".join([*_lines("a"), '{"format": "wiredi', *_lines("b"), "xx", *_lines("c")]))
    assert [r["id"] for r in load_records([p])] == ["a", "b", "c"]
    assert [r.getMessage().split(": ")[0] for r in caplog.records] == [f"{p}:2", f"{p}:4"]


def test_hostile_records_are_one_line_errors_naming_file_and_line(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"started": "yesterday"}, "started must be a number, not string"),
        ({"request": {**REC["request"], "headers": [["a"]]}}, "request.headers must be a list"),
        ({"request": {**REC["request"], "headers": "x"}}, "request.headers must be"),
        ({"response": {**RESPONSE, "events": [1]}}, "response.events[0] must be an object"),
        ({"tags": {**REC["tags"], "family": 3}}, "tags.family must be a string"),
        ({"tags": {"family": "models"}}, "tags.endpoint is missing"),
        ({"error": "boom"}, "error must be an object or null"),
        ({"label": None}, "label must be a string, not null"),
    ]
    for bad, message in cases:
        p = tmp_path / "h.jsonl"
        p.write_text(_lines("a")[0] + "\n" + json.dumps({**REC, **bad}) + "\n")
        with pytest.raises(CaptureError) as e:
            load_records([p])
        assert str(e.value).startswith(f"{p}:2: malformed wirediff/1 record (") and message in str(
            e.value
        )


def test_bodies_nested_too_deeply_are_kept_as_text(tmp_path: Path) -> None:
    deep: object = {}
    for _ in range(200):
        deep = {"a": deep}
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({**REC, "request": {**REC["request"], "body": deep}}) + "\n")
    (rec,) = load_records([p])
    assert rec["request"]["body"] is None and rec["request"]["depth_limited"]
    assert json.loads(rec["request"]["text"] or "") == deep
    p.write_text('{"format": "wirediff/1", "id": "a", "request": ' + "[" * 100_000 + "\n")
    with pytest.raises(CaptureError, match=r"d\.jsonl:1: record nested too deeply"):
        load_records([p])


def test_repeated_headers_and_clients_are_shared_and_unchanged(tmp_path: Path) -> None:
    def rec(i: str, sdk: Sdk) -> Record:
        headers = [["content-type", "application/json"], ["x-request-id", f"req_{i}"]]
        return {
            **REC,
            "id": i,
            "request": {**REC["request"], "headers": headers},
            "response": {**RESPONSE, "headers": headers},
            "tags": {
                **REC["tags"],
                "sdk": sdk,
                "auth": {
                    "header": "authorization",
                    "scheme": None,
                    "fingerprint": "sha256:1",
                    "forwarded": True,
                },
            },
        }

    python: Sdk = {"user_agent": None, "lang": "python"}
    unknown = cast(Sdk, {**python, "extra": {"nested": True}})  # a key the format does not name
    written = [rec("a", python), rec("b", {**python}), rec("c", unknown)]
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in written))
    a, b, c = load_records([p])
    assert [a, b, c] == written
    assert a["request"]["headers"][0] is answer(b)["headers"][0]
    assert a["request"]["headers"][1] is not b["request"]["headers"][1]
    assert a["tags"]["sdk"] is b["tags"]["sdk"] and a["tags"]["auth"] is c["tags"]["auth"]


def test_missing_file_is_a_capture_error(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="cannot read capture"):
        load_records([tmp_path / "nope.jsonl"])


async def test_an_exchange_row_has_its_family_events_and_key(tmp_path: Path) -> None:
    from tests.unit.test_capture_addon import run

    f = chat_flow()
    flow_response(f).headers["content-type"] = "text/event-stream"
    recs = run(
        tmp_path, f, sse_chunks=[b'event: x\ndata: {"type":"x","sequence_number":0}\n\n', b""]
    )
    recs += run(tmp_path / "b", chat_flow())
    rows = [dict(zip(EXCHANGE_COLUMNS, exchange_row(r), strict=True)) for r in recs]
    assert [r["family"] for r in rows] == ["chat.completions"] * 2
    assert [r["n_events"] for r in rows] == [1, None]
    assert all(r["auth_fingerprint"] for r in rows)
    event = events_of(recs[0])[0]
    assert (event["event"], event["data"]["type"], event["data"]["sequence_number"]) == (
        "x",
        "x",
        0,
    )


def write_flows(path: Path) -> None:
    with path.open("wb") as fh:
        w = io.FlowWriter(fh)
        w.add(chat_flow())
        sse = chat_flow()
        flow_response(sse).headers["content-type"] = "text/event-stream"
        flow_response(sse).content = b'data: {"a":1}\n\ndata: [DONE]\n\n'
        w.add(sse)
        w.add(tflow.ttcpflow())  # non-HTTP flows are skipped
        ws = tflow.twebsocketflow()  # mitmproxy's test session: 3 messages, closed normally
        ws.request.path = "/v1/realtime?model=gpt-realtime"
        w.add(ws)


def test_import_flow_file(tmp_path: Path) -> None:
    p = tmp_path / "s.flow"
    write_flows(p)
    recs = import_flows(p)
    assert [r["tags"]["family"] for r in recs] == ["chat.completions"] * 2 + ["realtime"]
    assert [e["data"] for e in events_of(recs[1])] == [{"a": 1}, "[DONE]"]
    assert all(r["session"] == "s" for r in recs)
    ws = recs[2]
    assert ws["tags"]["transport"] == "websocket" and ws["tags"]["model"] == "gpt-realtime"
    assert [e["direction"] for e in events_of(ws)] == ["client", "client", "server"]
    assert websocket_of(ws)["close_code"] == 1000 and answer(ws)["complete"]


def test_a_flow_file_cut_short_keeps_its_whole_flows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """mitmdump killed mid-write: the flows before the torn one are imported, with a warning."""
    whole = tmp_path / "s.flow"
    write_flows(whole)
    cut = tmp_path / "cut.flow"
    cut.write_bytes(whole.read_bytes()[:-40])  # into the last flow, the WebSocket session
    recs = import_flows(cut)
    assert [r["tags"]["family"] for r in recs] == ["chat.completions"] * 2
    [said] = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"{cut}: cut short after 3 whole flows (") and "not read" in said


async def test_import_har_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with taddons.context():
        har = SaveHar().make_har([chat_flow()])
    p = tmp_path / "s.har"
    p.write_text(json.dumps(har))
    assert main(["import", str(p), "-o", str(tmp_path / "out.jsonl")]) == 0
    assert "1 exchange → " in capsys.readouterr().out
    (rec,) = load_records([tmp_path / "out.jsonl"])
    assert rec["request"]["body"]["model"] == "gpt-4o-mini"
    capsys.readouterr()
    assert main(["import", str(p), "-o", str(tmp_path / "out.jsonl")]) == 2  # never overwritten
    assert "exists" in capsys.readouterr().err
    assert len(load_records([tmp_path / "out.jsonl"])) == 1
    assert KEY not in (tmp_path / "out.jsonl").read_text()


async def test_a_websocket_session_in_a_har_imports_as_from_the_flow_file(
    tmp_path: Path,
) -> None:
    """mitmproxy's own HAR writer keeps the session's messages as Chrome does
    (`_webSocketMessages`): the record holds them as the flow file's record does."""
    flows = tmp_path / "s.flow"
    write_flows(flows)
    from_flow = import_flows(flows)[2]
    with flows.open("rb") as fh:
        [ws] = [f for f in io.FlowReader(fh).stream() if getattr(f, "websocket", None)]
    with taddons.context():
        har = SaveHar().make_har([ws])
    assert har["log"]["entries"][0]["_webSocketMessages"]
    p = tmp_path / "s.har"
    p.write_text(json.dumps(har))
    [rec] = import_flows(p)
    assert rec["tags"]["transport"] == "websocket" and rec["tags"]["model"] == "gpt-realtime"
    seen = [(e["direction"], e["data"], e.get("b64")) for e in events_of(rec)]
    assert seen == [(e["direction"], e["data"], e.get("b64")) for e in events_of(from_flow)]
    assert len(seen) == 3
    times = [float(e["t_ms"] or 0) for e in events_of(rec)]
    assert times == sorted(times)


async def test_import_har_with_a_byte_order_mark(tmp_path: Path) -> None:
    """Fiddler writes its HAR files with a UTF-8 BOM."""
    with taddons.context():
        har = SaveHar().make_har([chat_flow()])
    p = tmp_path / "fiddler.har"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(har).encode())
    (rec,) = import_flows(p)
    assert rec["request"]["body"]["model"] == "gpt-4o-mini"


@pytest.mark.parametrize("content", [b"not a flow at all", b'{"log": 3}', b"{\xff"])
def test_import_bad_input_exits_2_with_one_line(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "bad.flow"
    p.write_bytes(content)
    assert main(["import", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wirediff: error:") and err.count("\n") == 1


def _set(entry: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        entry = entry[key]
    entry[last] = value


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        ("request.method", 5, "request.method must be a string, not integer"),
        ("request.url", "https://h/caf\u00e9", "request.url must be ASCII"),
        ("request.headers", [{"name": 5, "value": "x"}], "request.headers: a header's name"),
        ("response.status", "200", "response.status must be an HTTP status, not string"),
        ("response.status", 1000, "response.status must be an HTTP status, from 0 to 999"),
        ("response.status", True, "response.status must be an HTTP status, not boolean"),
        ("response.content", "x", "response.content must be an object, not string"),
        ("time", "x", "time must be a number, not string"),
        (
            "_webSocketMessages",
            [{"type": "sent", "data": "x", "time": 1}],
            "_webSocketMessages[0].type",
        ),
        (
            "_webSocketMessages",
            [{"type": "send", "data": 5, "time": 1}],
            "_webSocketMessages[0].data",
        ),
        ("_webSocketMessages", {"type": "send"}, "_webSocketMessages must be a list"),
    ],
)
async def test_a_har_entry_of_the_wrong_types_is_named_in_har_terms_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, value: Any, said: str
) -> None:
    """Said in the entry's own terms, not as an interpreter's (`'int' object has no
    attribute 'encode'`); and no record every command would then refuse is written."""
    with taddons.context():
        har = SaveHar().make_har([chat_flow()])
    _set(har["log"]["entries"][0], path, value)
    p = tmp_path / "s.har"
    p.write_text(json.dumps(har))
    assert main(["import", str(p), "-o", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"wirediff: error: {p}: HAR entry 0 is malformed ({said}")
    assert err.count("\n") == 1 and not (tmp_path / "out.jsonl").exists()


def test_import_of_a_file_without_http_exchanges_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.flow"
    empty.write_bytes(b"")
    with pytest.raises(CaptureError, match="empty, nothing to import"):
        import_flows(empty)
    tcp_only = tmp_path / "tcp.flow"
    with tcp_only.open("wb") as fh:
        io.FlowWriter(fh).add(tflow.ttcpflow())
    with pytest.raises(CaptureError, match="no HTTP exchanges in it"):
        import_flows(tcp_only)


def test_the_analysis_drops_only_the_failed_attempts_a_resume_retried(tmp_path: Path) -> None:
    def attempt(rid: str, started: float, kind: str | None) -> Record:
        error: ExchangeError | None = {"kind": kind, "message": "x"} if kind else None
        return {
            **REC,
            "id": rid,
            "replay_of": "o1",
            "label": "t",
            "started": started,
            "error": error,
        }

    p = tmp_path / "r.jsonl"
    with RecordWriter(p) as w:
        for rec in (
            bare_record("o1"),
            attempt("down", 1.0, "upstream_unreachable"),  # retried below: superseded
            attempt("answer-1", 2.0, None),
            attempt("answer-2", 3.0, None),  # a second answer: kept (noise control)
        ):
            w.write(rec)
    loaded = load_records([p])
    assert len(loaded) == 4, "loading reads every attempt"
    assert Index.of(loaded).rows["id"].tolist() == ["o1", "answer-1", "answer-2"]


class FullDisk:
    """`os.write` for the writer: writes part of a line, then fails, while `full` (for
    every file, or only for the descriptor `fd`)."""

    def __init__(self) -> None:
        self.full = False
        self.fd: int | None = None
        self.real = os.write

    def __call__(self, fd: int, data: bytes) -> int:
        if not self.full or self.fd not in (None, fd):
            return self.real(fd, data)
        if len(data) > 10 and not getattr(self, "_cut_once", False):
            self._cut_once = True
            return self.real(fd, data[: len(data) // 2])  # a short write: half a line
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_leaves_whole_lines_and_writes_the_waiting_records_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = FullDisk()
    monkeypatch.setattr("wirediff.record.store.os.write", disk)
    p = tmp_path / "c.jsonl"
    w = RecordWriter(p)
    assert w.write({**REC, "id": "a"})
    disk.full = True
    assert not w.write({**REC, "id": "b"}) and not w.write({**REC, "id": "c"})
    assert w.waiting == 2 and w.failure is not None and w.failure.errno == errno.ENOSPC
    assert [r["id"] for r in load_records([p])] == ["a"]  # no half line left behind
    assert p.read_bytes().endswith(b"\n")
    disk.full = False
    assert w.write({**REC, "id": "d"})
    w.close()
    ids = [r["id"] for r in load_records([p])]
    assert ids == ["a", "b", "c", "d"] and w.failure is None and w.waiting == 0


def test_records_past_the_waiting_bound_are_counted_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = FullDisk()
    disk.full = disk._cut_once = True
    monkeypatch.setattr("wirediff.record.store.os.write", disk)
    monkeypatch.setattr("wirediff.record.store.MAX_WAITING_BYTES", 300)
    w = RecordWriter(tmp_path / "c.jsonl")
    for i in range(10):
        w.write({**REC, "id": str(i)})
    assert w.waiting + w.lost == 10 and w.lost > 0
    w.close()


def test_records_a_full_disk_kept_are_one_line_errors_for_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = FullDisk()
    disk.full = disk._cut_once = True
    monkeypatch.setattr("wirediff.record.store.os.write", disk)
    with RecordWriter(tmp_path / "c.jsonl") as w:
        w.write(REC)
    with pytest.raises(OSError, match="1 records not written") as e:
        w.check()
    assert e.value.filename == str(tmp_path / "c.jsonl") and e.value.errno == errno.ENOSPC
