"""Decide when two findings are one problem, and show a finding's words without ids.

References report one fact in their own words: the baseline diff says
"`choices[].message.refusal` is missing", the OpenAPI document "'refusal' is a required
property", the SDK types "Field required"; a client break and every finding it explains carry the
same evidence, the SDK's words. So a problem is the field or event a finding is about — or, where
the client breaks, what the client lost. Ids, timestamps and counts tell repeats of one problem
apart and nothing else: `without_ids` shows a text without them, and `problem_key` leaves them
and the numbers out of the key.
"""

from __future__ import annotations

import functools
import re

__all__ = ["problem_key", "told_alike", "without_ids"]

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_PREFIXED = re.compile(r"\b([A-Za-z]{2,16}[_-])(?=[A-Za-z0-9]*\d)[A-Za-z0-9]{12,}\b")
"""An id with its kind's prefix: `resp_…`, `chatcmpl-…`, `call_…`, `msg_…`."""
_HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{16,}\b")
_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_CALL = re.compile(r"(`[\w.]+)\([^`)]*\)`")
"""An SDK call as a finding names it: `client.responses.create(stream=True)`."""


def without_ids(text: str) -> str:
    """Show the ids and timestamps in `text` as an ellipsis, for a line a person reads.

    An id keeps its kind's prefix, as in `resp_…`. The exchange the text came from is linked, not
    named. Diagnoses and findings repeat their words by the thousand: short lines are
    remembered, so the memory it keeps stays bounded."""
    return _short_without_ids(text) if len(text) <= REMEMBERED_CHARS else _without_ids(text)


def told_alike(text: str) -> str:
    """Spell a line of a chain as chains diagnosed alike share it: `without_ids`, and a cut
    answer's byte counts left out, as httpx says them, since they vary with the answer."""
    return _RECEIVED.sub("(received … bytes", without_ids(text))


_RECEIVED = re.compile(r"\(received \d+ bytes(?:, expected \d+)?")
REMEMBERED_CHARS = 1_000
"""The longest line `without_ids` remembers; 16,384 of them at most."""


@functools.lru_cache(maxsize=1 << 14)
def _short_without_ids(text: str) -> str:
    return _without_ids(text)


def _without_ids(text: str) -> str:
    text = _UUID.sub("…", text)
    text = _PREFIXED.sub(r"\1…", text)
    text = _HEX.sub("…", text)
    return _TIME.sub("…", text)


def problem_key(path: str, evidence: str) -> str:
    """Key a finding by what it is about, whichever reference found it.

    Where the client breaks, that is the client's loss: the `evidence`, the same words on every
    finding it explains, with the call's arguments, ids and numbers left out. Else it is the
    field or event at `path`."""
    if evidence:
        return "effect:" + _NUMBER.sub("n", _CALL.sub(r"\1()`", without_ids(evidence)))
    return "path:" + path
