"""Read once what the comparison needs of one exchange.

That is what `compare` looks at, from `observe`; what the references and the real clients make of
its answer, from `record_check` with its conformance rows; whether it says "not here" and in what
words; and its stream's event labels.

Equal readings give equal findings: every check after this reads a `Reading`, never the record,
so the analysis of many exchanges works once per distinct reading, by `reading_key`, and fans the
result back to the exchanges that share it. A reading keeps nothing per exchange: no id, no time,
only the presence of `x-request-id` among the headers, whose value is never compared.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import orjson

from wirediff._support import is_2xx
from wirediff._types import Record
from wirediff.analysis.comparison.assumed import standin_of
from wirediff.analysis.comparison.breaks import server_words
from wirediff.analysis.comparison.clients.asked import asks_structured
from wirediff.analysis.comparison.compare import compare
from wirediff.analysis.comparison.conformance import ConformanceRow, RecordCheck, record_check
from wirediff.analysis.comparison.divergences import BASELINE_SOURCE
from wirediff.analysis.comparison.noise import is_noise
from wirediff.analysis.comparison.observe import Observed, observe, stream_labels
from wirediff.analysis.comparison.severity import answer_failed, judging_breaks, severity_of
from wirediff.analysis.comparison.shapes import spell
from wirediff.analysis.comparison.verdicts import answer_texts, route_failure

__all__ = [
    "FindingRow",
    "Reading",
    "answer_key",
    "pair_findings",
    "read_answer",
    "reading_key",
    "same_reading",
]

REQUEST_ID = "x-request-id"


@dataclass(frozen=True, slots=True, eq=False)
class Reading:
    """Hold one exchange as the comparison reads it."""

    observed: Observed
    check: RecordCheck
    rows: tuple[ConformanceRow, ...]
    """Its conformance and `client` rows (`FINDING_COLUMNS` values)."""
    route_failure: bool
    answered: str
    """The answer in a verdict's words (`404: the server's words`)."""
    not_implemented: str
    status: str
    """The answer's status in short (`404`, `200 with an error body`)."""
    words: str
    """The server's own error message, quoted by a break (`server_words`)."""
    failed: bool
    """No 2xx answer, or an error in one."""
    timeline: tuple[str, ...]
    """Its stream's event labels, delta runs collapsed (`stream_labels`)."""
    standin: str
    """The stand-in profile that gave the answer, if one did (`standin_of`)."""


def read_answer(record: Record) -> Reading:
    """Read one record; `prepare` its batch for the clients first."""
    observed = observe(record)
    observed.headers = {REQUEST_ID: ""} if REQUEST_ID in observed.headers else {}
    check, rows = record_check(record)
    answered, not_implemented, status = answer_texts(record)
    return Reading(
        observed,
        check,
        rows,
        route_failure(record),
        answered,
        not_implemented,
        status,
        server_words(record),
        answer_failed(record),
        stream_labels(record),
        standin_of(record),
    )


_UNREAD = ("messages", "input", "prompt")
"""What a request says that no check of its answer reads."""
_UNSPELLED = ("headers", "size")
"""What `answer_key` spells of an answer apart, or not at all."""


def answer_key(record: Record) -> tuple[Any, ...] | None:
    """Spell what `read_answer` reads of a record, for equal keys to give equal readings.

    A reading costs as much as every check of the answer, and most answers repeat a few
    structures with other words, so the scan reads one record per key. A failed answer is
    spelled word for word, since its words are read. The key is None, and the record read
    alone, when the exchange ended in an error, a failed answer is a stream, or structured
    output was asked, whose words are read too."""
    resp, tags = record.get("response"), record.get("tags")
    req = record.get("request") or {}
    if record.get("error") is not None or type(resp) is not dict or type(tags) is not dict:
        return None
    status, events = resp.get("status"), resp.get("events")
    failed = not is_2xx(status) or tags.get("soft_error")
    ask = req.get("body")
    if (failed and events is not None) or asks_structured(ask):
        return None
    if type(ask) is dict:
        ask = {k: v for k, v in ask.items() if k not in _UNREAD}
    headers = resp.get("headers") or ()
    names = [str(name).lower() for name, _ in headers]
    out: list[Any] = [
        frozenset(names),
        next((v for n, (_, v) in zip(names, headers, strict=True) if n == "content-type"), None),
        standin_of(record),
        "upgrade" in (str(name).lower() for name, _ in req.get("headers") or ()),
        req.get("method"),
        req.get("path"),
        resp.get("text"),
        server_words(record),
    ]
    answer = {k: v for k, v in resp.items() if k not in _UNSPELLED}
    try:  # the request and the tags word for word: they vary little
        out += (orjson.dumps(ask), orjson.dumps(tags), orjson.dumps(answer) if failed else None)
    except TypeError:  # an integer past 64 bits
        return None
    if not failed:
        spell(answer, out, {})
    return tuple(out)


FindingRow = tuple[str, str, str, str, str, str, str, str, str]
"""A finding's `FINDING_COLUMNS` values."""


def pair_findings(
    b: Reading, c: Reading, noise: frozenset[str] = frozenset()
) -> tuple[tuple[FindingRow, ...], tuple[FindingRow, ...]]:
    """Judge a candidate's answer against its baseline's.

    It returns the divergences and the pair's `client` rows.

    The divergences are what `compare` finds less the `noise` paths, judged by `severity_of`.
    There are none when the baseline says "not here", since the candidate has nothing to differ
    from."""
    cand = c.observed
    breaks, own = judging_breaks(
        b.check, c.check, c.words, None if cand.responded else cand.failure
    )
    better = b.failed and not c.failed
    found: list[FindingRow] = []
    if not b.route_failure:
        for f in compare(b.observed, cand):
            if is_noise(f.path, noise):
                continue
            severity, evidence = severity_of(
                (f.kind, f.path, f.baseline, f.candidate), breaks, c.check, better
            )
            found.append(
                (
                    f.kind,
                    f.path,
                    f.baseline,
                    f.candidate,
                    severity,
                    BASELINE_SOURCE,
                    "",
                    evidence,
                    f.message,
                )
            )
    clients = tuple(
        ("client", x.probe, x.baseline, x.candidate, "breaking", x.client, "", x.message, x.message)
        for x in own
    )
    return tuple(found), clients


def same_reading(reading: Reading) -> tuple[Any, ...]:
    """Make a hashable value that is equal for equal readings, in this process.

    The remembered shapes and checks are shared objects, so it is cheap to hash."""
    o = reading.observed
    error_doc = _plain_bytes(o.error_doc) if o.error_doc is not None else None
    observed = (
        o.responded,
        o.failure,
        o.status,
        o.content_type,
        o.media_type,
        bool(o.headers),
        o.rate_limits,
        o.asked_stream,
        o.is_stream,
        o.failed,
        o.soft_error,
        error_doc,
        o.error_prefix,
        o.shape,
        o.values,
        tuple(o.event_shapes.items()),
        tuple(o.embedded.items()),
        tuple(o.labels),
        o.terminal,
        o.sequence_fault,
    )
    return (
        observed,
        reading.check,
        reading.rows,
        reading.route_failure,
        reading.answered,
        reading.not_implemented,
        reading.status,
        reading.words,
        reading.failed,
        reading.timeline,
        reading.standin,
    )


def reading_key(reading: Reading) -> int:
    """Number a reading in 63 bits, the same in every process and on every machine.

    Sets are sorted, objects kept in their order and types kept. The analysis groups exchanges by
    it."""
    text = _plain_bytes(_plain(same_reading(reading)))
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest()) >> 1


_SCALARS = (str, int, float, bool)
_LISTS = (tuple, list)
_SETS = (frozenset, set)
"""Types `_plain` checks at once (a tuple: `isinstance` checks one faster than a union)."""


def _plain(value: Any) -> Any:
    """Turn `value` into JSON values that say the same in any process.

    A set is sorted, a tuple becomes a list, an object a list of its items in their order, a
    dataclass its name and fields."""
    if isinstance(value, _SCALARS) or value is None:
        return value
    if isinstance(value, _LISTS):
        return [_plain(v) for v in value]
    if isinstance(value, _SETS):
        items = [_plain(v) for v in value]
        return ["{set}", *sorted(items, key=_plain_bytes)]
    if isinstance(value, dict):
        return ["{dict}", *([_plain(k), _plain(v)] for k, v in value.items())]
    if isinstance(value, bytes):
        return ["{bytes}", value.hex()]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = (getattr(value, f.name) for f in dataclasses.fields(value))
        return [type(value).__name__, *map(_plain, fields)]
    return ["{other}", repr(value)]


def _plain_bytes(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer past 64 bits, a lone surrogate
        return json.dumps(value, ensure_ascii=True, default=repr).encode()
