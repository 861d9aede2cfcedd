"""Read one record into the index: its row, and what the checks made of its answer.

The row follows `INDEX_COLUMNS`: what pairing, the rules, the chains, the verdicts and the
report count on. Once per distinct value, a record also gives what the checks made of its
answer (`Reading`) and what the diagnosis reads of a failing exchange, its evidence record.

`Reader` reads records one batch at a time, wherever they are: the command's process, a
pool's worker or a Dask worker. It hands out the readings and evidence it has not handed out
before, keyed by numbers every process computes alike."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import orjson
import pandas as pd
from pandas.api.types import union_categoricals

from wirediff._types import Record
from wirediff.analysis.comparison import impact
from wirediff.analysis.comparison.reading import (
    Reading,
    answer_key,
    read_answer,
    reading_key,
    same_reading,
)
from wirediff.analysis.comparison.rows import EXCHANGE_COLUMNS, exchange_row
from wirediff.analysis.comparison.shapes import known_structures
from wirediff.analysis.diagnosis.chains import redirect_location
from wirediff.analysis.diagnosis.evidence import evidence_key, evidence_record, packed
from wirediff.analysis.diagnosis.explain import models_listed
from wirediff.analysis.diagnosis.outcome import exchange_ok
from wirediff.record.keys import ask_digest, digests, request_fingerprint
from wirediff.record.tags import SDK_FIELDS

__all__ = ["CATEGORIES", "INDEX_COLUMNS", "Reader", "concat_index", "index_frame", "record_keys"]

_UNINDEXED = frozenset(
    {
        "content_type",
        "sdk_async",
        "auth_header",
        "auth_scheme",
        "auth_forwarded",
        "signature",
        "n_events",
        "complete",
        "request_size",
        "response_size",
    }
)
_SHARED = [c for c in EXCHANGE_COLUMNS if c not in _UNINDEXED]
"""The columns of an exchange's row (`exchange_row`) the index holds too."""
INDEX_COLUMNS = [
    *_SHARED,
    "first_event_ms",
    "client",
    "skip_reason",
    "fingerprint",
    "request_digest",
    "ask_digest",
    "hop_digest",
    "body_digest",
    "ok",
    "location",
    "models",
    "reading",
    "evidence",
]
"""The columns of a record's row in the index.

First the record's fields, `_SHARED`. `first_event_ms`: its first SSE event's time. `client`:
`tags.sdk`'s `SDK_FIELDS`, as JSON. `skip_reason`: a skipped replay step's. Then the digests
pairing, noise and chains compare, from `record.keys`: `fingerprint` and `ask_digest` of an
original only, `hop_digest` of a hop candidate only, else 0. Then `ok` and `location`, and
`models`: a `/v1/models` answer's, as JSON. `reading`: its `reading_key`. `evidence`: the
`evidence_key` of a failing exchange, else 0."""
CATEGORIES = (
    "session",
    "label",
    "listener",
    "method",
    "path",
    "url",
    "family",
    "endpoint",
    "prefix",
    "model",
    "sdk_lang",
    "sdk_version",
    "auth_fingerprint",
    "error_kind",
    "transport",
    "client",
    "skip_reason",
    "location",
    "models",
)
"""Columns of few distinct values, held as categories: a code a row, each value once."""
_SHARED_AT = operator.itemgetter(*(EXCHANGE_COLUMNS.index(c) for c in _SHARED))
_FLOATS = ("started", "ttfb_ms", "duration_ms", "first_event_ms")
_INTEGERS = ("seq", "retry", "status")
_DIGESTS = ("fingerprint", "request_digest", "ask_digest", "hop_digest", "body_digest")
_KEYS = ("reading", "evidence")
_BOOLEANS = ("stream", "soft_error")
MEMO_LIMIT = 1 << 14
"""Readings remembered by their local value, or by their answer's key, until a table starts over."""
ANSWER_TOKENS = 1 << 19
"""Tokens the remembered answer keys may spell together, about 16 MB with what they refer to."""
_EMPTY: dict[str, Any] = {}


def _first_event_ms(events: Any) -> float | None:
    """Find the earliest time among the events that have one."""
    times = [
        t for ev in events or () if type(t := ev.get("t_ms")) in (int, float) and not math.isnan(t)
    ]
    return float(min(times)) if times else None


def _dict(value: Any) -> dict[str, Any]:
    return value if type(value) is dict else _EMPTY


def record_keys(rec: Record) -> tuple[int, int, int, int, int, bool, str | None, list[str] | None]:
    """Compute what pairing and chains read of a record, for the index and the dataset alike.

    An original's request fingerprint and ask digest (0 for a replay), its request, hop and body
    digests, whether it ended well, where it redirects, and the models a model list names."""
    req, resp = rec["request"], rec.get("response") or _EMPTY
    original = rec.get("replay_of") is None
    request, body, hop = digests(rec, original and isinstance(rec.get("listener"), str))
    models = None
    listing = (rec.get("tags") or _EMPTY).get("endpoint") == "/v1/models"
    if listing and req.get("method") == "GET" and resp.get("status") == 200:
        listed = models_listed(rec)
        models = sorted(listed) if listed is not None else None
    return (
        int(request_fingerprint(rec)[:16], 16) if original else 0,
        request,
        ask_digest(req) if original else 0,
        hop,
        body,
        exchange_ok(rec),
        redirect_location(rec),
        models,
    )


class Reader:
    """Read records into index rows, remembering which readings and evidence it read.

    A record whose `answer_key` it met before takes that record's reading unread. `take`
    hands out the readings and evidence not handed out before."""

    def __init__(self) -> None:
        self._keys: dict[tuple[Any, ...], int] = {}
        self._answers: dict[tuple[Any, ...], int] = {}
        self._answer_tokens = 0
        self._handed: set[int] = set()
        self.readings: dict[int, Reading] = {}
        self.evidence: dict[int, bytes] = {}

    def rows(self, records: Sequence[Record]) -> list[tuple[Any, ...]]:
        """Read the rows of a batch of records; the clients measure its new answers together."""
        keys = [answer_key(rec) for rec in records]
        # a key is long: hashed once a record where it was met before, as most are
        known = [None if key is None else self._answers.get(key) for key in keys]
        fresh: dict[tuple[Any, ...], Record] = {}
        alone = []
        for rec, key, number in zip(records, keys, known, strict=True):
            if key is None:
                alone.append(rec)
            elif number is None and key not in fresh:
                fresh[key] = rec
        with known_structures():
            impact.prepare([*fresh.values(), *alone])
            return [
                self.row(rec, key, number)
                for rec, key, number in zip(records, keys, known, strict=True)
            ]

    def row(
        self, rec: Record, answer: tuple[Any, ...] | None, reading: int | None = None
    ) -> tuple[Any, ...]:
        """Read a record's row; `answer` is its `answer_key`, if it has one, and `reading` the
        number of its reading, if known."""
        resp, tags = rec.get("response") or _EMPTY, rec.get("tags") or _EMPTY
        error = _dict(rec.get("error"))
        fingerprint, request, ask, hop, body, ok, location, models = record_keys(rec)
        return (
            *_SHARED_AT(exchange_row(rec)),
            _first_event_ms(resp.get("events")),
            _client(tags.get("sdk")),
            error.get("message") if error.get("kind") == "skipped" else None,
            fingerprint,
            request,
            ask,
            hop,
            body,
            ok,
            location,
            None if models is None else orjson.dumps(models).decode(),
            self._reading(rec, answer) if reading is None else reading,
            0 if ok else self._evidence(rec),
        )

    def _reading(self, rec: Record, answer: tuple[Any, ...] | None) -> int:
        """Number the record's reading, read once per `answer_key`."""
        key = self._answers.get(answer) if answer is not None else None
        if key is None:
            key = self._read(rec)
            if answer is not None:
                if len(self._answers) >= MEMO_LIMIT or self._answer_tokens > ANSWER_TOKENS:
                    self._answers.clear()
                    self._answer_tokens = 0
                self._answers[answer] = key
                self._answer_tokens += len(answer)
        return key

    def _read(self, rec: Record) -> int:
        reading = read_answer(rec)
        local = same_reading(reading)
        key = self._keys.get(local)
        if key is None:
            if len(self._keys) >= MEMO_LIMIT:
                self._keys.clear()
            key = self._keys[local] = reading_key(reading)
            if key not in self._handed:
                self._handed.add(key)
                self.readings[key] = reading
        return key

    def _evidence(self, rec: Record) -> int:
        seen = evidence_record(rec, ok=False)
        key = evidence_key(seen)
        if key not in self._handed:
            self._handed.add(key)
            self.evidence[key] = packed(seen)
        return key

    def take(self) -> tuple[dict[int, Reading], dict[int, bytes]]:
        """Hand out the readings and evidence records read since the last `take`."""
        out = (self.readings, self.evidence)
        self.readings, self.evidence = {}, {}
        return out


def _client(sdk: Any) -> str:
    """Describe the client of a record's `tags.sdk` as the JSON of its `SDK_FIELDS`."""
    said = sdk if isinstance(sdk, dict) else _EMPTY
    values = [said.get(k) for k in SDK_FIELDS]
    try:
        return orjson.dumps(values).decode()
    except TypeError:  # an integer past 64 bits
        return orjson.dumps([v if not isinstance(v, int) else str(v) for v in values]).decode()


def index_frame(rows: Sequence[tuple[Any, ...]]) -> pd.DataFrame:
    """Make the typed index frame of these rows, as `INDEX_COLUMNS`.

    Each column is typed as it is built: retyping the columns of a built frame costs more
    than the rows of a small batch."""
    columns = zip(*rows, strict=True) if rows else ((),) * len(INDEX_COLUMNS)
    return pd.DataFrame(
        {name: _typed(name, values) for name, values in zip(INDEX_COLUMNS, columns, strict=True)}
    )


def _typed(name: str, values: tuple[Any, ...]) -> Any:
    """Type one column's values as the index keeps them."""
    if name in CATEGORIES:
        # one dtype of categories in every part, whatever values a part happens to hold
        codes, categories = pd.factorize(pd.Series(values, dtype=object).to_numpy(), sort=True)
        return pd.Categorical.from_codes(codes, pd.Index(categories, dtype=object))
    if name in _DIGESTS:
        return np.array(values, dtype="uint64")
    if name in _KEYS:
        return np.array(values, dtype="int64")
    if name == "ok":
        return np.array(values, dtype=bool)
    if name in _BOOLEANS:
        return pd.array(values, dtype="boolean")
    column = pd.Series(values, dtype=object)
    if name in _FLOATS:
        return pd.to_numeric(column, errors="coerce").astype("float64")
    if name in _INTEGERS:
        return _integers(column)
    return column.astype("str")  # id, replay_of


def _integers(column: pd.Series) -> pd.Series:
    """Make whole numbers nullable integers, or floats past 64 bits."""
    try:
        return column.astype("Int64")
    except (OverflowError, TypeError, ValueError):
        return pd.to_numeric(column, errors="coerce").astype("float64")


def concat_index(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Put index frames one after another, uniting their categories."""
    given = list(frames)
    parts = [f for f in given if len(f)]
    if not parts:
        return given[0].iloc[:0] if given else index_frame([])
    if len(parts) == 1:
        return parts[0].reset_index(drop=True)
    columns = {}
    for name in parts[0].columns:
        if isinstance(parts[0][name].dtype, pd.CategoricalDtype):
            columns[name] = pd.Series(union_categoricals([p[name] for p in parts]))
        else:
            columns[name] = pd.concat([p[name] for p in parts], ignore_index=True)
    return pd.DataFrame(columns)
