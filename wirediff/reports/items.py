"""The JSON Lines of every finding and every diagnosis (`--findings`): one line each, a
finding with the keys of `DIVERGENCE_COLUMNS`, a diagnosis with those of `DIAGNOSIS_COLUMNS`.
A line is made where its row is found, so that the partitioned engine's workers write each
finding's line once and the command only merges lines in order."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import orjson
import pandas as pd

from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.diagnosis.explain import DIAGNOSIS_COLUMNS
from wirediff.record.scrub import scrub_output
from wirediff.reports.formatters import missing, redact

__all__ = ["diagnosis_items", "diagnosis_lines", "finding_line", "jsonable", "line"]


def line(item: Mapping[str, Any]) -> str:
    """Write one item as a line of compact JSON, newline included, scrubbed of secrets.

    orjson writes it; the standard library takes what orjson refuses, an integer past 64
    bits."""
    try:
        text = orjson.dumps(item, option=orjson.OPT_APPEND_NEWLINE).decode("utf-8")
    except TypeError:
        text = json.dumps(item, ensure_ascii=False, separators=(",", ":")) + "\n"
    return scrub_output(text)


def finding_line(values: Sequence[Any]) -> str:
    """The line of a finding row (`DIVERGENCE_COLUMNS` values)."""
    return line(dict(zip(DIVERGENCE_COLUMNS, values, strict=True)))


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


def diagnosis_items(rows: Iterable[Mapping[Any, Any]]) -> list[dict[str, Any]]:
    """Diagnoses (rows of `DIAGNOSIS_COLUMNS`, as dicts) as their items: plain JSON values,
    strings scrubbed of credentials."""
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


def diagnosis_lines(rows: Iterable[Mapping[Any, Any]] | pd.DataFrame) -> list[str]:
    """The lines of these diagnoses (dicts as `diagnose_chain` gives them, or a frame)."""
    if isinstance(rows, pd.DataFrame):
        rows = rows.reindex(columns=DIAGNOSIS_COLUMNS).to_dict("records")
    return [line(item) for item in diagnosis_items(rows)]
