"""Write the JSON Lines of every finding and every diagnosis for `--findings`, one line each.

A finding has the keys of `DIVERGENCE_COLUMNS`, a diagnosis those of `DIAGNOSIS_COLUMNS`. A line
is made where its row is found, so that the partitioned engine's workers write each finding's
line once and the command only merges lines in order."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from wirediff.analysis.comparison.divergences import (
    DIVERGENCE_COLUMNS,
    FINDING_COLUMNS,
    PAIR_META,
)
from wirediff.analysis.diagnosis.explain import DIAGNOSIS_COLUMNS
from wirediff.record.scrub import MAY_HOLD, scrub_output
from wirediff.reports.findings import Listed
from wirediff.reports.formatters import SEQUENCES, missing, redact

__all__ = [
    "csv_chunks",
    "diagnosis_items",
    "diagnosis_lines",
    "finding_lines",
    "jsonable",
    "scrubbed",
]

CHUNK = 1 << 16
"""Findings whose lines are made together."""


def _unscrubbed(item: Mapping[str, Any]) -> str:
    """Write one item as a line of compact JSON, newline included.

    orjson writes it; the standard library takes what orjson refuses, an integer past 64 bits."""
    try:
        return orjson.dumps(item, option=orjson.OPT_APPEND_NEWLINE).decode("utf-8")
    except TypeError:
        return json.dumps(item, ensure_ascii=False, separators=(",", ":")) + "\n"


def _encoded(values: Iterable[Any]) -> list[str]:
    """Encode each value as JSON text, as `_unscrubbed` writes it."""
    out = []
    for v in values:
        try:
            out.append(orjson.dumps(v).decode("utf-8"))
        except TypeError:
            out.append(json.dumps(v, ensure_ascii=False))
    return out


def scrubbed(lines: pa.Array | list[str]) -> str:
    """Join texts, lines or whole tables, each scrubbed as `scrub_output` scrubs it.

    RE2 finds the texts where the scrub may find something (`MAY_HOLD`), all at once; only those
    are scrubbed one by one. In most, a word such as `tokens` is no credential's."""
    lines = pa.array(lines, pa.large_string()) if isinstance(lines, list) else lines
    hit = pc.match_substring_regex(lines, MAY_HOLD, ignore_case=True)
    texts = lines.to_pylist()
    for k in np.flatnonzero(hit.to_numpy(zero_copy_only=False)).tolist():
        texts[k] = scrub_output(texts[k])
    return "".join(texts)


def finding_lines(found: Listed, chunk: int = CHUNK) -> Iterator[str]:
    """Write the line of every finding in order, its `DIVERGENCE_COLUMNS` as keys, by chunks."""
    keys = [json.dumps(k) for k in DIVERGENCE_COLUMNS]
    heads = ["{" + keys[0] + ":", *(f",{k}:" for k in keys[1 : len(PAIR_META)])]
    tail = "".join(f",{k}:{{}}" for k in keys[len(PAIR_META) :]) + "}}\n"
    for lines in _assembled(found, chunk, _encoded, heads, tail, '""'):
        yield scrubbed(lines)


def csv_chunks(found: Listed, chunk: int = CHUNK) -> Iterator[str]:
    """Write the divergence table as CSV, the header first, in chunks, as `to_csv` writes it.

    Each row is scrubbed on its own, so that a credential's shape never reaches into the next:
    a message ending in `token` takes no id of the row after it for a key."""
    heads = ["", *[","] * (len(PAIR_META) - 1)]
    tail = "".join(",{}" for _ in FINDING_COLUMNS) + "\n"
    yield ",".join(_csv_fields(DIVERGENCE_COLUMNS)) + "\n"
    for lines in _assembled(found, chunk, _csv_fields, heads, tail, ""):
        yield scrubbed(lines)


def _assembled(
    found: Listed,
    chunk: int,
    encode: Callable[[Iterable[Any]], list[str]],
    heads: Sequence[str],
    tail: str,
    empty: str,
) -> Iterator[pa.Array]:
    """Assemble the text of each finding, a chunk of findings at a time.

    Each exchange's and each distinct finding's values are encoded once (`encode`); a finding
    is its `PAIR_META` values, each after its head, then its template's values in `tail`."""
    if not len(found):
        return
    ids, labels = pa.array(encode(found.ids.to_pylist())), pa.array(encode(found.labels))
    families, endpoints = pa.array(encode(found.families)), pa.array(encode(found.endpoints))
    values = found.values[FINDING_COLUMNS]
    tails = pa.array(
        [
            tail.format(*row)
            for row in zip(*(encode(values[c]) for c in FINDING_COLUMNS), strict=True)
        ]
    )
    nothing = pa.scalar(empty)
    for start in range(0, len(found), chunk):
        at = slice(start, start + chunk)
        c, b = found.candidate[at], found.baseline[at]
        own = b < 0
        base = np.where(own, c, b)
        idc = ids.take(c)
        meta = [
            idc,
            labels.take(c),
            pc.if_else(own, nothing, labels.take(np.maximum(b, 0))),
            pc.if_else(own, nothing, ids.take(np.maximum(b, 0))),
            idc,
            families.take(base),
            endpoints.take(base),
        ]
        parts = [part for pair in zip(heads, meta, strict=True) for part in pair]
        yield pc.binary_join_element_wise(*parts, tails.take(found.template[at]), "")


def _csv_fields(values: Iterable[Any]) -> list[str]:
    """Encode each text as a CSV field, as `to_csv` writes it: quoted only where it must be."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    out = []
    for v in values:
        buf.seek(0)
        buf.truncate()
        writer.writerow((v, ""))  # one empty field alone would be written `""`
        out.append(buf.getvalue()[:-2])
    return out


def jsonable(value: Any) -> Any:
    """Turn pandas and numpy scalars and containers into plain JSON values.

    NaN and NA become null."""
    if type(value) is str:  # most are
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, SEQUENCES):
        return [jsonable(v) for v in value]
    if missing(value):
        return None
    if isinstance(value, _BOOLS):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


_BOOLS = (np.bool_, bool)
"""Booleans, numpy's too (a tuple: `isinstance` checks one faster than a union)."""


def diagnosis_items(rows: Iterable[Mapping[Any, Any]]) -> list[dict[str, Any]]:
    """Turn diagnoses, rows of `DIAGNOSIS_COLUMNS` as dicts, into items.

    Items hold plain JSON values, their strings scrubbed of credentials."""
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


def diagnosis_lines(rows: Iterable[Mapping[Any, Any]] | pd.DataFrame) -> str:
    """Write the lines of these diagnoses, dicts as `diagnose_chain` gives them or a frame."""
    if isinstance(rows, pd.DataFrame):
        rows = rows.reindex(columns=DIAGNOSIS_COLUMNS).to_dict("records")
    return scrubbed([_unscrubbed(item) for item in diagnosis_items(rows)])
