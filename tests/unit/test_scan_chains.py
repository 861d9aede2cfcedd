"""The failing chains of scanned captures: those of the same records held in memory, every
link kind found across the chunks of a file."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.chain_records import (
    INNER_LISTENER,
    OTHER_KEY,
    T0,
    record,
    redirected_post,
    sdk_headers,
)
from wirediff._types import Record
from wirediff.analysis.diagnosis.chains import CHAIN_COLUMNS, chain_rows
from wirediff.analysis.index.analyze import Index
from wirediff.engine import scan
from wirediff.engine.run import Run
from wirediff.record.store import RecordWriter, load_records

ERR: dict[str, Any] = dict(status=502, content_type="text/html", resp_text="Bad Gateway")
MISSING: dict[str, Any] = dict(status=404, resp_body={"detail": "Not Found"})
SOFT: dict[str, Any] = dict(
    status=200, resp_body={"error": "Unexpected endpoint or method. (POST /v1/responses)"}
)


def asking(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


def scenes() -> list[Record]:
    """One of each link kind, each in a session of its own and with a prompt of its own
    (so that each is found for its own reason): a gateway's hop, SDK retries (and one with
    another body), a fallback after a 404 and after a soft error, a redirect; a client's
    404 and another client's call after it, which is no fallback; and, in another session,
    exchanges of one."""
    hop: dict[str, Any] = dict(session="hop", body=asking("hop"), **ERR)
    again: dict[str, Any] = dict(headers=sdk_headers(retry=1))
    fell: dict[str, Any] = dict(path="/v1/responses", body={"model": "m", "input": "fb"})
    return [
        record(id="outer", label="gateway", duration_ms=200.0, **hop),
        record(id="inner", listener=INNER_LISTENER, started=T0 + 0.02, duration_ms=100.0, **hop),
        record(id="r0", session="retry", body=asking("r"), started=T0 + 1, **ERR),
        record(id="r1", session="retry", body=asking("r"), started=T0 + 1.5, **again),
        record(id="x0", session="retry", body=asking("x"), started=T0 + 2, **ERR),
        record(id="x1", session="retry", body=asking("y"), started=T0 + 2.5, **again),
        record(id="resp", session="fb", started=T0 + 3, **fell, **MISSING),
        record(id="chat", session="fb", body=asking("fb"), started=T0 + 3.2),
        record(id="soft", session="soft", started=T0 + 4, **fell, **SOFT),
        record(id="after-soft", session="soft", body=asking("fb"), started=T0 + 4.1),
        record(id="alone", session="alone", started=T0 + 5, **fell, **MISSING),
        record(
            id="other",
            session="alone",
            headers=sdk_headers(key=OTHER_KEY),
            body=asking("fb"),
            started=T0 + 5.1,
        ),
        *redirected_post(),
        *(
            record(id=f"ok{k}", session="quiet", body=asking(f"q{k}"), started=T0 + 10 + k)
            for k in range(6)
        ),
        record(id="down", session="quiet", body=asking("q-down"), started=T0 + 20, **ERR),
    ]


def capture(path: Path, copies: int) -> Path:
    with RecordWriter(path) as w:
        for k in range(copies):
            for rec in scenes():
                r = copy.deepcopy(rec)
                r["id"] = f"{rec['id']}~{k}"
                r["started"] = rec["started"] + 100 * k
                w.write(r)
    return path


def failing(path: Path) -> list[tuple[Any, ...]]:
    """The failing chains of a capture scanned in chunks of a few records, checked to be
    those of its records held in memory."""
    with Run("local", progress=False, workers=1) as run:
        index, _ = run.scan([str(path)])
    found = chain_rows(index.rows, failing_only=True)
    assert found == chain_rows(Index.of(load_records([path])).rows, failing_only=True)
    return found


def column(found: list[tuple[Any, ...]], name: str) -> list[Any]:
    return [row[CHAIN_COLUMNS.index(name)] for row in found]


def test_the_scan_links_every_kind_as_the_records_in_memory_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "CHUNK_BYTES", 1 << 12)
    found = failing(capture(tmp_path / "c.jsonl", 3))
    assert {kind for kinds in column(found, "kinds") for kind in kinds} == {
        "hop", "retry", "fallback", "redirect",
    }  # fmt: skip
    # per copy: the hop, r0-r1, x0 (x1 is ok), the fallback, the soft fallback, `alone`
    # (`other` is ok), the redirect, `down`
    assert len(found) == 3 * 8


def test_no_row_is_linked_in_a_capture_of_plain_calls(tmp_path: Path) -> None:
    recs = [record(id=f"c{k}", body=asking(f"q{k}"), started=T0 + k) for k in range(5)]
    recs.append(record(id="bad", body=asking("q-bad"), started=T0 + 9, **ERR))
    path = tmp_path / "c.jsonl"
    with RecordWriter(path) as w:
        for rec in recs:
            w.write(rec)
    found = failing(path)
    assert column(found, "exchange_ids") == [["bad"]] and column(found, "kinds") == [[]]


def test_urls_that_do_not_parse_and_missing_keys_are_each_the_same_as_itself_only(
    tmp_path: Path,
) -> None:
    """A port that is no number, beside a redirect and as a redirect's target; an exchange
    without a listener or a key."""
    odd = "http://api.test:abc/v1/chat/completions"
    recs = [
        *redirected_post(),
        record(id="bad-port", url="http://127.0.0.1:abc/v1/models", path="/v1/models",
               started=T0 + 5, **ERR),
        record(id="to-odd", url="http://api.test/v1/x", status=301, content_type=None,
               resp_body=None, resp_headers=[("location", odd)], started=T0 + 7),
        record(id="odd", method="GET", body=None, url=odd, started=T0 + 7.1, **ERR),
        record(id="bare", listener=None, headers=sdk_headers(key=None), body=asking("n"),
               started=T0 + 9, **ERR),
    ]  # fmt: skip
    path = tmp_path / "c.jsonl"
    with RecordWriter(path) as w:
        for rec in recs:
            w.write(rec)
    found = failing(path)
    assert [list(k) for k in column(found, "kinds")].count(["redirect"]) == 2
    assert len(found) == 4  # the two redirects, `bad-port`, `bare`
