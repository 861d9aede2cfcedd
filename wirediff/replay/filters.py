"""Filter records with `--only`: `KEY=GLOB` terms over what a record is, its family, model…."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass

from wirediff._types import Record
from wirediff.errors import PlanError
from wirediff.record.tags import route
from wirediff.replay.safety import is_stream

__all__ = ["FILTER_KEYS", "Term", "filter_value", "names_listener", "parse_filter", "selected"]

_GLOB = re.compile(r"[*?\[]")
"""What makes a filter's value a pattern."""
FILTER_KEYS = (
    "family",
    "endpoint",
    "method",
    "path",
    "stream",
    "model",
    "id",
    "session",
    "listener",
    "label",
)


@dataclass(frozen=True)
class Term:
    key: str
    pattern: str
    negate: bool

    def matches(self, rec: Record) -> bool:
        value = filter_value(rec, self.key)
        pattern = self.pattern.upper() if self.key == "method" else self.pattern
        hit = fnmatch.fnmatchcase(value, pattern)
        return hit != self.negate


def parse_filter(text: str) -> tuple[Term, ...]:
    """Parse `family=responses,stream=true` into terms that must all match.

    `!=` negates; values are shell-style globs (`endpoint=/v1/responses*`)."""
    terms = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        negate = "!=" in part
        key, sep, value = part.partition("!=" if negate else "=")
        key = key.strip().lower()
        if not sep or key not in FILTER_KEYS:
            raise PlanError(
                f"--only: expected KEY=VALUE with KEY one of {', '.join(FILTER_KEYS)}, got {part!r}"
            )
        value = value.strip()
        if key == "stream" and value.lower() not in ("true", "false") and not _GLOB.search(value):
            raise PlanError(f"--only: stream is true or false, not {value!r}")  # nothing matches
        terms.append(Term(key, value.lower() if key == "stream" else value, negate))
    if not terms:
        raise PlanError("--only: empty filter")
    return tuple(terms)


def filter_value(rec: Record, key: str) -> str:
    req, tags = rec.get("request") or {}, rec.get("tags") or {}
    if key == "family":
        return str(tags.get("family") or route(req.get("path") or "")[0])
    if key == "endpoint":
        return str(tags.get("endpoint") or route(req.get("path") or "")[1])
    if key == "method":
        return str(req.get("method", "")).upper()
    if key == "path":
        return str(req.get("path") or "").split("?", 1)[0]
    if key == "stream":
        return "true" if is_stream(rec) else "false"
    if key == "model":
        return str(tags.get("model") or "")
    return str(rec.get(key) or "")  # id, session, listener, label


def selected(rec: Record, filters: Sequence[tuple[Term, ...]]) -> bool:
    """Tell whether a record is selected.

    No filters select everything; several select what any of them does, each with all of its
    terms."""
    return not filters or any(all(t.matches(rec) for t in f) for f in filters)


def names_listener(filters: Sequence[tuple[Term, ...]]) -> bool:
    """Tell whether some filter chooses listeners itself.

    A label counts too: it is a listener in a two-hop capture. Inner hops are then not left out
    by default."""
    return any(t.key in ("listener", "label") for f in filters for t in f)
