"""The failing chains over the engine's index: links are looked for only among the rows
that can have one, and what that finds is what looking among all of them finds."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
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
from wirediff.engine.chaining import Failing, failing_chains, linkable_rows
from wirediff.engine.engines import LocalEngine
from wirediff.engine.progress import Progress
from wirediff.engine.run import scan_inputs
from wirediff.record.store import RecordWriter

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


def same(a: Failing, b: Failing) -> bool:
    return a.count == b.count and [
        (first, rows.tolist(), links) for first, rows, links in a.batches
    ] == [(first, rows.tolist(), links) for first, rows, links in b.batches]


@pytest.mark.parametrize("batch", [1, 5, 4000])
def test_links_among_the_rows_that_can_have_one_are_those_among_all(
    tmp_path: Path, batch: int
) -> None:
    index = scan_inputs(LocalEngine(1), [str(capture(tmp_path / "c.jsonl", 3))], Progress(False))
    n = len(index)
    linkable = linkable_rows(index)
    assert 0 < len(linkable) < n  # the exchanges of one are left out
    found = failing_chains(index, batch)
    assert same(found, failing_chains(index, batch, np.arange(n)))
    kinds = {kind for _, _, links in found.batches for kind, _, _ in links}
    assert kinds == {"hop", "retry", "fallback", "redirect"}
    # per copy: the hop, r0-r1, x0 (x1 is ok), the fallback, the soft fallback, `alone`
    # (`other` is ok), the redirect, `down`
    assert found.count == 3 * 8


def test_no_row_can_be_linked_in_a_capture_of_plain_calls(tmp_path: Path) -> None:
    recs = [record(id=f"c{k}", body=asking(f"q{k}"), started=T0 + k) for k in range(5)]
    recs.append(record(id="bad", body=asking("q-bad"), started=T0 + 9, **ERR))
    path = tmp_path / "c.jsonl"
    with RecordWriter(path) as w:
        for rec in recs:
            w.write(rec)
    index = scan_inputs(LocalEngine(1), [str(path)], Progress(False))
    assert linkable_rows(index).tolist() == []
    found = failing_chains(index, 4000)
    assert found.count == 1 and same(found, failing_chains(index, 4000, np.arange(len(index))))


def test_urls_that_do_not_parse_and_missing_keys_are_linked_as_among_all_rows(
    tmp_path: Path,
) -> None:
    """A port that is no number, beside a redirect and as a redirect's target; an exchange
    without a listener or a key: each the same as itself only, on either path."""
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
    index = scan_inputs(LocalEngine(1), [str(path)], Progress(False))
    found = failing_chains(index, 4000)
    assert same(found, failing_chains(index, 4000, np.arange(len(index))))
    links = sorted(link for _, _, links in found.batches for link in links)
    assert links == [("redirect", 0, 1), ("redirect", 3, 4)]
    assert found.count == 4  # the two redirects, `bad-port`, `bare`
