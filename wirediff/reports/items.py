"""The items of `summary.json`'s long lists (every finding, every diagnosis) as the text
`json.dumps(summary, ensure_ascii=False, indent=1)` gives them, one item at a time: so that
the workers of the partitioned engine write a finding's text once, where it is found, and
then merge the texts into place."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import IO, Any

import numpy as np
import pandas as pd

from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.diagnosis.explain import DIAGNOSIS_COLUMNS
from wirediff.record.scrub import scrub_output
from wirediff.reports.formatters import missing, redact

__all__ = [
    "diagnosis_items",
    "diagnosis_rows",
    "diagnosis_texts",
    "finding_text",
    "item_text",
    "jsonable",
    "write_list",
]

WRITTEN = 1000
"""Items written together: one write of their joined texts instead of two each."""
_FLAT = json.JSONEncoder(ensure_ascii=False)
_INDENTED = json.JSONEncoder(ensure_ascii=False, indent=1)
_KEYS: dict[str, str] = {}
_FINDING = (
    "{\n   "
    + ",\n   ".join(encode_basestring(k).replace("%", "%%") + ": %s" for k in DIVERGENCE_COLUMNS)
    + "\n  }"
)
"""A finding's item with its values left to fill in (as JSON strings)."""


def _text(item: dict[str, Any]) -> str:
    """`json.dumps(item, ensure_ascii=False, indent=1)`, byte for byte, the scalar values
    encoded by the C encoder (indenting makes json encode in Python, value by value)."""
    if not item or not all(type(k) is str for k in item):
        return _INDENTED.encode(item)
    lines = []
    for k, v in item.items():
        head = _KEYS.get(k)
        if head is None:
            head = _KEYS[k] = f" {encode_basestring(k)}: "
        if type(v) is str:
            lines.append(head + encode_basestring(v))
        elif type(v) is list and v and all(type(x) is str for x in v):  # ids, evidence
            lines.append(head + "[\n  " + ",\n  ".join(map(encode_basestring, v)) + "\n ]")
        elif isinstance(v, dict | list | tuple) and v:
            lines.append(head + _INDENTED.encode(v).replace("\n", "\n "))
        else:
            lines.append(head + _FLAT.encode(v))
    return "{\n" + ",\n".join(lines) + "\n}"


def item_text(item: dict[str, Any]) -> str:
    """An item of a list that is a top-level key's value, indented as it is written there,
    scrubbed (`scrub_output`)."""
    return scrub_output(_text(item).replace("\n", "\n  "))


def finding_text(values: Sequence[Any]) -> str:
    """`item_text` of a finding row (`DIVERGENCE_COLUMNS` values, strings: a finding's
    columns all are) without making its dict."""
    try:
        return scrub_output(_FINDING % tuple(map(encode_basestring, values)))
    except TypeError:  # a value that is no string (or a column too many or too few)
        return item_text(dict(zip(DIVERGENCE_COLUMNS, values, strict=True)))


def write_list(fh: IO[str], texts: Iterable[str]) -> None:
    """A list as `json.dump(..., indent=1)` writes one that is a top-level key's value,
    from its items' texts (`item_text`)."""
    items = iter(texts)
    batch = list(itertools.islice(items, WRITTEN))
    if not batch:
        fh.write("[]")
        return
    fh.write("[\n  ")
    while batch:
        fh.write(",\n  ".join(batch))
        batch = list(itertools.islice(items, WRITTEN))
        if batch:
            fh.write(",\n  ")
    fh.write("\n ]")


def jsonable(value: Any) -> Any:
    """pandas/numpy scalars and containers as plain JSON values (NaN and NA become null)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [jsonable(v) for v in value]
    if missing(value):
        return None
    if isinstance(value, np.bool_ | bool):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def diagnosis_rows(diagnoses: pd.DataFrame) -> list[dict[str, Any]]:
    """Every diagnosis in `DIAGNOSIS_COLUMNS`, strings scrubbed of credentials."""
    return diagnosis_items(diagnoses.reindex(columns=DIAGNOSIS_COLUMNS).to_dict("records"))


def diagnosis_items(rows: Iterable[Mapping[Any, Any]]) -> list[dict[str, Any]]:
    """`diagnosis_rows` of diagnoses as `diagnose_chain` gives them (dicts, not a frame)."""
    out = []
    for row in rows:
        item = {k: jsonable(row.get(k)) for k in DIAGNOSIS_COLUMNS}
        item["exchange_ids"] = [str(i) for i in item["exchange_ids"] or []]
        item["evidence"] = [redact(e) for e in item["evidence"] or []]
        for key in ("summary", "remedy", "title"):
            if isinstance(item.get(key), str):
                item[key] = redact(item[key])
        out.append(item)
    return out


def diagnosis_texts(rows: Iterable[Mapping[Any, Any]]) -> list[str]:
    """`item_text` of every diagnosis (`diagnosis_items`)."""
    return [item_text(item) for item in diagnosis_items(rows)]
