"""A dataset's row is input like a capture's line: what is no record is said in one line, and
a record is read as loading reads it."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.records import error_record
from wirediff.analysis.comparison.observe import observe
from wirediff.engine.sources import dataset_record
from wirediff.errors import CaptureError


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[1, 2]", "not a wirediff/1 record (a JSON array"),
        ('"x"', "not a wirediff/1 record (a JSON string"),
        ("[" * 70 + "]" * 70, "not a wirediff/1 record (a JSON array"),
        ('{"format": "wirediff/1"}', "malformed wirediff/1 record (id is missing)"),
        (
            '{"format": "wirediff/1", "tags": 5, "response": {"status": 200, "events": [1]}}',
            "malformed wirediff/1 record",
        ),
    ],
    ids=["array", "string", "deep array", "no id", "odd tags and events"],
)
def test_a_row_that_is_no_record_is_one_line(text: str, said: str) -> None:
    with pytest.raises(CaptureError) as e:
        dataset_record("ds/part-0.parquet", 3, text)
    assert str(e.value).startswith(f"ds/part-0.parquet: row 3: {said}")


def test_a_rows_error_body_is_tagged_a_soft_error_as_loading_tags_it() -> None:
    rec = error_record(status=200, body={"error": "Unexpected endpoint or method."})
    rec["tags"]["soft_error"] = False
    _, read = dataset_record("ds/part-0.parquet", 0, json.dumps(rec))
    assert read["tags"]["soft_error"] is True


def test_a_row_is_checked_before_it_is_read_as_the_analysis_reads_it() -> None:
    """As a capture's line is: a deep body kept as text would hide a `response.text` that is
    no text, which the check refuses."""
    deep: object = 1
    for _ in range(70):
        deep = {"a": deep}
    rec = error_record(status=500, body={"error": deep})
    rec["response"]["text"] = 5  # type: ignore[index, arg-type]
    with pytest.raises(CaptureError, match="row 0: malformed wirediff/1 record"):
        dataset_record("ds/part-0.parquet", 0, json.dumps(rec))


def test_an_error_body_nested_too_deeply_is_read_as_text_and_no_soft_error() -> None:
    """Loading keeps a body nested past `MAX_DEPTH` as its text, as the capture does, and tags
    what that leaves: the comparison, which reads the body, agrees with the tag."""
    deep: object = 1
    for _ in range(70):
        deep = {"a": deep}
    rec = error_record(status=200, body={"error": deep})
    rec["tags"]["soft_error"] = False
    _, read = dataset_record("ds/part-0.parquet", 0, json.dumps(rec))
    resp = read["response"]
    assert resp is not None and resp["body"] is None and resp["depth_limited"]
    assert read["tags"]["soft_error"] is False
    assert observe(read).soft_error is False
