"""Write captures as a Parquet dataset, and read the dataset back.

`wirediff export CAPTURE… --parquet DIR` writes it; `report`, `check` and `diagnose` read it
from a directory or any fsspec URL. Its layout and columns: docs/format.md, "Parquet
datasets". `session` and `label` are the directories' keys (hive partitioning, `_segment`),
so any Parquet reader gives them as columns. Each task writes one file per session and label,
rows sorted by `root`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from wirediff import FORMAT, __version__
from wirediff._types import Record
from wirediff.analysis.comparison.rows import EXCHANGE_COLUMNS, exchange_row
from wirediff.analysis.index.row import record_keys
from wirediff.engine.sources import DATASET_MARK, Source, is_url, read_texts
from wirediff.record.decode import loads
from wirediff.record.keys import digest
from wirediff.record.redact import fingerprint_headers
from wirediff.record.scrub import scrub_output
from wirediff.record.store import encode_record, is_utf8, read_depth

__all__ = [
    "DATASET_FORMAT",
    "EVENT_SCHEMA",
    "EXCHANGE_SCHEMA",
    "PARTITION_KEYS",
    "export_part",
    "mark",
]

DATASET_FORMAT = "wirediff-dataset/1"
ROW_GROUP_ROWS = 2000
EXPORT_BYTES = 256 << 20
"""Bytes of records one export task writes, about."""
_STR, _F64, _I64, _BOOL, _U64 = pa.string(), pa.float64(), pa.int64(), pa.bool_(), pa.uint64()
_TYPES: dict[str, pa.DataType] = {c: _STR for c in EXCHANGE_COLUMNS}
_TYPES.update(
    seq=_I64,
    started=_F64,
    ttfb_ms=_F64,
    duration_ms=_F64,
    status=_I64,
    stream=_BOOL,
    sdk_async=_BOOL,
    retry=_I64,
    auth_forwarded=_BOOL,
    soft_error=_BOOL,
    n_events=_I64,
    complete=_BOOL,
    request_size=_F64,
    response_size=_F64,
)
EXTRA = {
    "id_digest": _U64,
    "replay_digest": _U64,
    "request_digest": _U64,
    "body_digest": _U64,
    "hop_digest": _U64,
    "fingerprint": _U64,
    "ask_digest": _U64,
    "location": _STR,
    "ok": _BOOL,
    "models": pa.list_(_STR),
}
PARTITION_KEYS = ("session", "label")
"""The dataset's directories, `session=S/label=L/`: in the paths, not in the files.

So any Parquet reader reads them as columns: pyarrow, pandas, Dask, DuckDB, Spark."""
EXCHANGE_SCHEMA = pa.schema(
    [
        ("ordinal", _I64),
        ("root", _U64),
        ("nbytes", _I64),
        *((c, _TYPES[c]) for c in EXCHANGE_COLUMNS if c not in PARTITION_KEYS),
        *EXTRA.items(),
        ("record", _STR),
    ]
)
EVENT_SCHEMA = pa.schema(
    [
        ("id", _STR),
        ("idx", _I64),
        ("t_ms", _F64),
        ("event", _STR),
        ("type", _STR),
        ("sequence_number", _I64),
        ("direction", _STR),
        ("partial", _BOOL),
    ]
)


def _fits(value: Any, kind: pa.DataType) -> bool:
    """Tell whether `value` is stored as it is in a column of `kind`; else it is stored as null."""
    if value is None:
        return True
    if kind == _STR:  # Arrow's strings are UTF-8: a lone surrogate is none
        return isinstance(value, str) and is_utf8(value)
    if kind == _BOOL:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == _F64:  # an integer only where a double holds it exactly
        return isinstance(value, float) or (isinstance(value, int) and abs(value) <= 1 << 53)
    if kind == _I64:
        return isinstance(value, int) and -(1 << 63) <= value < (1 << 63)
    if kind == _U64:
        return isinstance(value, int) and 0 <= value < (1 << 64)
    return isinstance(value, list) and all(isinstance(x, str) for x in value)


NULL_SEGMENT = "__HIVE_DEFAULT_PARTITION__"


SEGMENT_BYTES = 200
"""A key's directory name at most (file systems refuse a name past 255 bytes)."""


def _segment(value: Any) -> tuple[str, bool]:
    """Name a key's directory and say whether the name reads back as the key.

    The key is URL-quoted; a value that is the null's name is quoted further; one too long is
    cut, never inside an escape, and ended with `~` and its digest, so two such keys stay apart."""
    if value is None:
        return NULL_SEGMENT, True
    text = quote(str(value), safe="", errors="surrogatepass")
    if len(text) <= SEGMENT_BYTES:
        return ("%5F" + text[1:] if text == NULL_SEGMENT else text), True
    cut = SEGMENT_BYTES - 17
    cut -= 2 if text[cut - 2] == "%" else 1 if text[cut - 1] == "%" else 0
    return f"{text[:cut]}~{digest(text):016x}", False


def _opened(url: str) -> Any:
    """Open a file at a URL or a path for writing bytes, its folders made.

    Python opens a path: pyarrow takes only names it can encode."""
    if is_url(url):
        import fsspec

        return fsspec.open(url, "wb")
    os.makedirs(os.path.dirname(url), exist_ok=True)
    return open(url, "wb")


def _write(table: pa.Table, url: str) -> None:
    with _opened(url) as fh:
        pq.write_table(table, fh, row_group_size=ROW_GROUP_ROWS)


def export_part(
    sources: Sequence[Source],
    where: tuple[list[int], list[int], list[int]],
    ordinals: Sequence[int],
    roots: Sequence[int],
    out: str,
    task: int,
) -> tuple[int, int, int]:
    """Write one range of roots: a file of exchanges and one of events per session and label.

    Returns how many exchanges, events and files of exchanges were written."""
    texts = read_texts(sources, *where)
    groups: dict[tuple[Any, Any], list[tuple[int, int, bytes, Record]]] = {}
    for ordinal, root, line in zip(ordinals, roots, texts, strict=True):
        rec = read_depth(line, loads(line))
        if fingerprint_headers(rec):  # a capture another tool wrote: its raw credentials
            line = encode_record(rec).removesuffix(b"\n")
        text = _scrubbed(line)
        if text is not line:
            rec = read_depth(text, loads(text))
        key = (rec.get("session"), rec.get("label"))
        groups.setdefault(key, []).append((root, ordinal, text, rec))
    n_events = 0
    for (session, label), members in groups.items():
        members.sort(key=lambda m: (m[0], m[1]))
        columns: dict[str, list[Any]] = {name: [] for name in EXCHANGE_SCHEMA.names}
        events: dict[str, list[Any]] = {name: [] for name in EVENT_SCHEMA.names}
        (session_dir, whole_session), (label_dir, whole_label) = map(_segment, (session, label))
        exact = whole_session and whole_label  # else the keys are read from the records
        exact &= all(isinstance(k, str) or k is None for k in (session, label))
        for root, ordinal, text, rec in members:
            values = dict(zip(EXCHANGE_COLUMNS, exchange_row(rec), strict=True))
            values.update(_extra(rec))
            values.update(ordinal=ordinal, root=root, nbytes=len(text), record=_line_text(text))
            for name, kind in zip(EXCHANGE_SCHEMA.names, EXCHANGE_SCHEMA.types, strict=True):
                value = values[name]
                if not _fits(value, kind):
                    exact, value = False, None
                columns[name].append(value)
            _events(rec, events)
        where_to = f"session={session_dir}/label={label_dir}/part-{task:05d}.parquet"
        table = pa.table(columns, schema=EXCHANGE_SCHEMA)
        meta = {
            b"wirediff.exact": b"1" if exact else b"0",
            b"wirediff.version": __version__.encode(),
        }
        _write(table.replace_schema_metadata(meta), f"{out}/exchanges/{where_to}")
        if events["id"]:
            n_events += len(events["id"])
            _write(pa.table(events, schema=EVENT_SCHEMA), f"{out}/events/{where_to}")
    return len(texts), n_events, len(groups)


def _extra(rec: Record) -> dict[str, Any]:
    """Give the keys pairing and chains read of a record, `EXTRA`, as the dataset holds them."""
    replay_of = rec.get("replay_of")
    fingerprint, request, ask, hop, body, ok, location, models = record_keys(rec)
    return {
        "id_digest": digest(rec["id"]),
        "replay_digest": digest(replay_of) if replay_of is not None else 0,
        "request_digest": request,
        "body_digest": body,
        "hop_digest": hop,
        "fingerprint": fingerprint,
        "ask_digest": ask,
        "location": location,
        "ok": ok,
        "models": models,
    }


def _scrubbed(line: bytes) -> bytes:
    """Replace anything shaped like a credential in `line`, as in every output."""
    text = _line_text(line)
    scrubbed = scrub_output(text)
    return line if scrubbed is text else scrubbed.encode("utf-8")


def _line_text(line: bytes) -> str:
    """Give a record's line as a string, written again with escapes where it is no UTF-8.

    A lone surrogate's bytes are no UTF-8 but JSON readers take them; the line written again
    with escapes reads back as the same record."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return json.dumps(json.loads(line))


def _events(rec: Record, out: dict[str, list[Any]]) -> None:
    resp = rec.get("response")
    events = resp.get("events") if resp is not None else None
    for i, ev in enumerate(events or ()):
        data = ev.get("data")
        data = data if isinstance(data, dict) else {}
        row = {
            "session": rec.get("session"),
            "label": rec.get("label"),
            "id": rec["id"],
            "idx": i,
            "t_ms": ev.get("t_ms"),
            "event": ev.get("event"),
            "type": data.get("type"),
            "sequence_number": data.get("sequence_number"),
            "direction": ev.get("direction"),
            "partial": bool(ev.get("partial")),
        }
        for name, kind in zip(EVENT_SCHEMA.names, EVENT_SCHEMA.types, strict=True):
            value = row[name]
            out[name].append(value if _fits(value, kind) else None)


def mark(out: str, exchanges: int, events: int, files: int) -> None:
    """Make the dataset's mark, written last: a dataset without one is unfinished.

    `files` are its files of exchanges."""
    doc = {
        "format": DATASET_FORMAT,
        "record_format": FORMAT,
        "wirediff": __version__,
        "exchanges": exchanges,
        "events": events,
        "files": files,
    }
    with _opened(f"{out}/{DATASET_MARK}") as fh:
        fh.write((json.dumps(doc, indent=1) + "\n").encode())
