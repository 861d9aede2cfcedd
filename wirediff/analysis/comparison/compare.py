"""Compare two observations kind by kind, as `wirediff.analysis.comparison.kinds` lists them.

Each comparison yields `Finding`s; answers of one kind share a handful of shapes and header sets,
so each distinct comparison is made once and remembered. How much a finding matters depends on
what the client makes of both answers, so `wirediff.analysis.comparison.severity` says it
afterwards.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from wirediff._support import clip, is_2xx
from wirediff._types import JSON
from wirediff.analysis.comparison.observe import MEMO_LIMIT, Observed, union
from wirediff.analysis.comparison.shapes import Frozen, ancestors, by_path, json_type, type_label

__all__ = [
    "Finding",
    "align_events",
    "compare",
    "compare_shapes",
    "error_faults",
    "error_message",
    "short",
]

SHORT = 120
"""Characters of a value kept in the baseline/candidate columns."""
MESSAGE_VALUE = 80
"""Characters of a quoted value (an error message, a wrong type) kept in a one-line message."""
ERROR_FIELDS = (
    ("message", frozenset({"string"})),
    ("type", frozenset({"string"})),
    ("param", frozenset({"string", "null"})),
    ("code", frozenset({"string", "null"})),
)
_header_findings: dict[tuple[Any, ...], tuple[Finding, ...]] = {}


@dataclass(frozen=True, slots=True)
class Finding:
    """Record one difference between a baseline and a candidate answer."""

    kind: str
    path: str
    baseline: str
    candidate: str
    message: str


def short(value: JSON) -> str:
    """Show a value as a short JSON string for the baseline and candidate columns."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return clip(text, SHORT)


def compare(b: Observed, c: Observed) -> list[Finding]:
    """Find every difference between a baseline and a candidate observation."""
    if not (b.responded and c.responded):
        return _compare_responded(b, c)
    out: list[Finding] = []
    if b.status != c.status:
        out.append(
            Finding(
                "status",
                "status",
                str(b.status),
                str(c.status),
                f"status {b.status} became {c.status}",
            )
        )
    out += _compare_soft_error(b, c)
    out += _compare_headers(b, c)
    if c.failed and (c.soft_error or (c.status or 0) >= 400):
        out += _compare_error_shape(b, c)
    transport = _compare_transport(b, c) if is_2xx(b.status) and is_2xx(c.status) else []
    out += transport
    if b.failed or c.failed or transport:
        return out
    if b.is_stream:
        out += _compare_events(b, c)
        for label, (b_shape, b_values) in b.event_shapes.items():
            if label in c.event_shapes:
                c_shape, c_values = c.event_shapes[label]
                out += compare_shapes(b_shape, c_shape, b_values, c_values)
        out += _compare_embedded(b, c)
    else:
        out += compare_shapes(b.shape, c.shape, b.values, c.values)
    return out


def _compare_embedded(b: Observed, c: Observed) -> list[Finding]:
    """Compare the Response objects carried by the event types both streams have, merged."""
    common = [label for label in b.embedded if label in c.embedded]
    if not common:
        return []
    merged = [
        (union({o.embedded[t][0] for t in common}), union({o.embedded[t][1] for t in common}))
        for o in (b, c)
    ]
    return compare_shapes(merged[0][0], merged[1][0], merged[0][1], merged[1][1])


def _compare_responded(b: Observed, c: Observed) -> list[Finding]:
    if b.responded == c.responded:
        return []
    if not c.responded:
        return [
            Finding(
                "transport",
                "response",
                str(b.status),
                c.failure,
                f"no response from the candidate ({c.failure})",
            )
        ]
    return [
        Finding(
            "transport",
            "response",
            b.failure,
            str(c.status),
            f"the baseline got no response ({b.failure}); the candidate answered {c.status}",
        )
    ]


def _compare_soft_error(b: Observed, c: Observed) -> list[Finding]:
    if b.soft_error == c.soft_error:
        return []
    if c.soft_error:
        return [
            Finding(
                "soft_error",
                "error",
                "",
                short(c.error_doc),
                f"a {c.status} answer that carries an error: {error_message(c.error_doc)}",
            )
        ]
    return [
        Finding(
            "soft_error",
            "error",
            short(b.error_doc),
            "",
            f"the baseline's {b.status} carried an error; the candidate's does not",
        )
    ]


def error_message(doc: JSON) -> str:
    """Take the human part of an error document, shortened, for one-line messages."""
    err = doc.get("error") if isinstance(doc, dict) else doc
    if isinstance(err, dict):
        err = err.get("message", err)
    return clip(short(err), MESSAGE_VALUE)


def _compare_headers(b: Observed, c: Observed) -> list[Finding]:
    """Find what the headers of a pair differ in, worked out once per distinct set of facts."""
    key = (
        "x-request-id" in b.headers,
        "x-request-id" in c.headers,
        b.rate_limits,
        c.rate_limits,
        b.media_type,
        c.media_type,
        b.content_type,
        c.content_type,
    )
    found = _header_findings.get(key)
    if found is None:
        if len(_header_findings) >= MEMO_LIMIT:
            _header_findings.clear()
        found = _header_findings[key] = tuple(_header_differences(b, c))
    return list(found)


def _header_differences(b: Observed, c: Observed) -> list[Finding]:
    out: list[Finding] = []
    for name in ("x-request-id",):
        if (name in b.headers) != (name in c.headers):
            side = "candidate" if name in b.headers else "baseline"
            out.append(
                Finding(
                    "header",
                    f"headers.{name}",
                    _presence(b.headers, name),
                    _presence(c.headers, name),
                    f"`{name}` is missing in the {side}",
                )
            )
    b_limits, c_limits = b.rate_limits, c.rate_limits
    if b_limits != c_limits:
        only_b, only_c = sorted(b_limits - c_limits), sorted(c_limits - b_limits)
        what = f"missing {', '.join(only_b)}" if only_b else f"extra {', '.join(only_c)}"
        out.append(
            Finding(
                "header",
                "headers.x-ratelimit-*",
                ",".join(only_b),
                ",".join(only_c),
                f"rate-limit headers differ: {what}",
            )
        )
    if (
        b.media_type == c.media_type
        and b.content_type != c.content_type
        and normalize_content_type(b.content_type) != normalize_content_type(c.content_type)
    ):
        out.append(
            Finding(
                "header",
                "headers.content-type",
                b.content_type,
                c.content_type,
                f"content-type parameters differ: {c.content_type!r}",
            )
        )
    return out


def normalize_content_type(content_type: str) -> str:
    return ";".join(part.strip() for part in content_type.lower().split(";"))


def _presence(headers: dict[str, str], name: str) -> str:
    """Reduce a request id to whether it is there, since ids differ by nature."""
    return "present" if name in headers else ""


def error_faults(doc: JSON, prefix: str = "") -> list[tuple[str, str, str]]:
    """List how a document departs from OpenAI's `{"error": Error}` as `(path, expected, got)`."""
    if not isinstance(doc, dict) or "error" not in doc:
        got = short(doc) if doc is not None else ""
        return [(f"{prefix}error", "object", got)]
    err = doc["error"]
    if not isinstance(err, dict):
        return [(f"{prefix}error", "object", json_type(err))]
    faults = []
    for key, allowed in ERROR_FIELDS:
        expected = type_label(allowed)
        if key not in err:
            faults.append((f"{prefix}error.{key}", expected, ""))
        elif json_type(err[key]) not in allowed:
            faults.append((f"{prefix}error.{key}", expected, json_type(err[key])))
    return faults


def _compare_error_shape(b: Observed, c: Observed) -> list[Finding]:
    known = (
        {path for path, _, _ in error_faults(b.error_doc, b.error_prefix)} if b.failed else set()
    )
    out = [
        Finding(
            "error_shape",
            path,
            expected,
            got,
            f"the error is not OpenAI-shaped: `{path}` should be {expected}, "
            + (f"got {got[:MESSAGE_VALUE]}" if got else "is absent"),
        )
        for path, expected, got in error_faults(c.error_doc, c.error_prefix)
        if path not in known
    ]
    if b.failed:
        b_type, c_type = _error_type(b.error_doc), _error_type(c.error_doc)
        if b_type is not None and c_type is not None and b_type != c_type:
            path = f"{c.error_prefix}error.type"
            out.append(
                Finding(
                    "enum",
                    path,
                    short(b_type),
                    short(c_type),
                    f"`{path}` is {c_type!r}, the baseline says {b_type!r}",
                )
            )
    return out


def _error_type(doc: JSON) -> str | None:
    err = doc.get("error") if isinstance(doc, dict) else None
    typ = err.get("type") if isinstance(err, dict) else None
    return typ if isinstance(typ, str) else None


def _compare_transport(b: Observed, c: Observed) -> list[Finding]:
    if b.is_stream and not c.is_stream and c.asked_stream:
        message = f"asked for a stream (SSE), got {c.media_type or 'no content type'}"
    elif b.is_stream != c.is_stream or b.media_type != c.media_type:
        message = f"content type {b.media_type or 'none'} became {c.media_type or 'none'}"
    else:
        return []
    return [Finding("transport", "content-type", b.media_type, c.media_type, message)]


def _compare_events(b: Observed, c: Observed) -> list[Finding]:
    out: list[Finding] = []
    if b.labels != c.labels:
        out += align_events(b.labels, c.labels)
    if b.terminal != c.terminal:
        out.append(
            Finding(
                "event_terminal",
                "events[terminal]",
                b.terminal or "",
                c.terminal or "",
                f"the stream ends with {c.terminal or 'no terminal event'}, "
                f"the baseline's with {b.terminal or 'none'}",
            )
        )
    if b.sequence_fault is None and c.sequence_fault is not None:
        path, got = c.sequence_fault
        out.append(
            Finding("event_sequence", path, "0, 1, 2, …", got, f"`sequence_number` is {got}")
        )
    return out


def align_events(base: list[str], cand: list[str]) -> list[Finding]:
    """Align two collapsed event sequences; an event both dropped and added has moved."""
    missing: dict[str, int] = {}
    extra: dict[str, int] = {}
    matcher = SequenceMatcher(None, base, cand, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("delete", "replace"):
            for i in range(i1, i2):
                missing.setdefault(base[i], i)
        if tag in ("insert", "replace"):
            for j in range(j1, j2):
                extra.setdefault(cand[j], j)
    out: list[Finding] = []
    for label, i in missing.items():
        path = f"events[{label}]"
        if label in extra:
            j = extra[label]
            out.append(
                Finding(
                    "event_order",
                    path,
                    f"#{i}",
                    f"#{j}",
                    f"`{label}` comes at position {j}, the baseline has it at {i}",
                )
            )
        else:
            out.append(
                Finding(
                    "event_missing",
                    path,
                    f"#{i}",
                    "",
                    f"`{label}` is missing (baseline position {i})",
                )
            )
    for label, j in extra.items():
        if label not in missing:
            out.append(
                Finding(
                    "event_extra",
                    f"events[{label}]",
                    "",
                    f"#{j}",
                    f"`{label}` is extra (position {j})",
                )
            )
    return out


def compare_shapes(
    b_shape: AbstractSet[tuple[str, str]],
    c_shape: AbstractSet[tuple[str, str]],
    b_values: AbstractSet[tuple[str, str]],
    c_values: AbstractSet[tuple[str, str]],
) -> list[Finding]:
    """Find the missing, extra and retyped paths, the topmost only, then changed constant values.

    Answers of one kind share a handful of shapes, so each distinct comparison is made once:
    shapes are frozen when observed, and a frozenset hashes once."""
    return list(
        _compare_shapes(
            frozenset(b_shape), frozenset(c_shape), frozenset(b_values), frozenset(c_values)
        )
    )


@functools.lru_cache(maxsize=MEMO_LIMIT)
def _compare_shapes(
    b_shape: Frozen, c_shape: Frozen, b_values: Frozen, c_values: Frozen
) -> tuple[Finding, ...]:
    out: list[Finding] = []
    reported: set[str] = set()
    if b_shape != c_shape:
        differing = {path for path, _ in b_shape ^ c_shape}
        b_types, c_types = by_path(b_shape, differing), by_path(c_shape, differing)
        for path in sorted(differing):
            if any(a in reported for a in ancestors(path)):
                continue
            reported.add(path)
            out.append(_shape_finding(path, b_types.get(path), c_types.get(path)))
    if b_values != c_values:
        changed = {path for path, _ in b_values ^ c_values}
        b_seen, c_seen = by_path(b_values, changed), by_path(c_values, changed)
        for path in sorted(b_seen.keys() & c_seen.keys()):
            if path in reported or any(a in reported for a in ancestors(path)):
                continue
            out.append(_enum_finding(path, b_seen[path], c_seen[path]))
    return tuple(out)


def _enum_finding(path: str, bv: set[str], cv: set[str]) -> Finding:
    return Finding(
        "enum",
        path,
        short(sorted(bv)),
        short(sorted(cv)),
        f"`{path}` is {', '.join(sorted(cv))}; the baseline says {', '.join(sorted(bv))}",
    )


def _shape_finding(path: str, bt: set[str] | None, ct: set[str] | None) -> Finding:
    if ct is None:
        assert bt is not None
        return Finding(
            "schema_missing",
            path,
            type_label(bt),
            "",
            f"`{path}` is missing (baseline: {type_label(bt)})",
        )
    if bt is None:
        return Finding(
            "schema_extra",
            path,
            "",
            type_label(ct),
            f"`{path}` is extra ({type_label(ct)})",
        )
    return Finding(
        "schema_type",
        path,
        type_label(bt),
        type_label(ct),
        f"`{path}` is {type_label(ct)}, the baseline has {type_label(bt)}",
    )
