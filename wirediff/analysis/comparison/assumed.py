"""Mark the findings that rest on a stand-in's assumed behaviour.

A stand-in names the profile it plays in every answer (`x-wirediff-standin`); a profile lists the
facts no source documents under `assumed:`, each a regex `when` over a finding's path and words,
and what it `says`. A finding on such an answer that matches one rests on an assumption, not on
evidence, and its verdict reason says so: "(assumed behaviour of <title>: <says>)". Real servers
send no such header: their findings are evidence.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from wirediff._types import Record
from wirediff.profiles import STANDIN_HEADER, load_bugs, load_profiles

__all__ = ["assumed_note", "standin_of"]


@cache
def _facts(name: str) -> tuple[str, tuple[tuple[re.Pattern[str], str], ...]]:
    """Return a profile's title and its assumed facts as `(when, says)` pairs."""
    known: dict[str, Any] = {**load_profiles(), **load_bugs()}
    prof: dict[str, Any] = known.get(name, {})
    facts = tuple(
        (re.compile(str(f["when"])), str(f["says"]))
        for f in prof.get("assumed") or ()
        if isinstance(f, dict) and "when" in f and "says" in f
    )
    return str(prof.get("title") or name), facts


def standin_of(record: Record) -> str:
    """Name the stand-in profile that gave the answer, from `x-wirediff-standin`, else ``."""
    resp = record.get("response")
    for name, value in resp.get("headers") or () if resp is not None else ():
        if str(name).lower() == STANDIN_HEADER:
            return str(value)
    return ""


def assumed_note(name: str, path: str, words: str) -> str:
    """Say ` (assumed behaviour of <title>: <says>)` when a finding rests on an assumed fact.

    That is when the finding's `path` and `words`, on an answer of the stand-in profile `name`
    (see `standin_of`), match an assumed fact of that profile; else it returns ``."""
    if not name:
        return ""
    title, facts = _facts(name)
    text = f"{path} {words}"
    for when, says in facts:
        if when.search(text):
            return f" (assumed behaviour of {title}: {says})"
    return ""
