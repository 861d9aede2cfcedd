"""Define one way an answer departs from a reference, and the helpers the checks share.

The helpers spell paths in the divergence style, name the references, and remember verdicts per
structure."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from wirediff._types import Event
from wirediff.analysis.comparison.observe import EMBEDDED

__all__ = [
    "EMBEDDED_EVENTS",
    "GRAMMAR",
    "Problem",
    "data_events",
    "event_prefix",
    "join",
    "pointer_path",
    "remembered",
]

GRAMMAR = "stream-grammar"
"""The source of the stream grammar's rules (each with a rule id as its pointer)."""
EMBEDDED_EVENTS = f"events[{EMBEDDED}]"
"""Where the Response object several stream events carry is reported: one object."""
MEMO_LIMIT = 4096
"""Verdicts remembered per table (then it starts over: forgetting only costs time)."""
_REQUIRED = re.compile(r"^'([^']+)' is a required property")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Problem:
    """Record where an answer breaks which rule of which reference, and how."""

    path: str
    """The instance path in the divergence style: `choices[].message.refusal`."""
    message: str
    source: str
    """The reference's name and version: `openai-openapi 2.3.0`, `openai-python 2.54.0`…

    Also `open-responses 2026-04-24`, and `stream-grammar` for the stream grammar."""
    pointer: str
    """A JSON pointer into the reference, or for the grammar a rule id.

    For example `#/components/schemas/Error/required`, or `grammar:responses/one-created`."""
    position: int | None = None
    """The event it is found in, for streams."""


def data_events(events: Iterable[Event]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield each event's place and JSON object, for the checks of a stream's objects.

    A partial event, `[DONE]` and a text that is no JSON object are none."""
    for i, ev in enumerate(events):
        data = ev.get("data")
        if isinstance(data, dict) and not ev.get("partial"):
            yield i, data


def join(prefix: str, path: str) -> str:
    if not prefix:
        return path
    return f"{prefix}.{path}" if path else prefix


def pointer_path(pointer: str, message: str = "") -> str:
    """Turn a JSON pointer into a path in the divergence style.

    `/choices/0/message/annotations` becomes `choices[].message.annotations`. A missing required
    key, as in `'refusal' is a required property`, is reported at the key itself."""
    path = ""
    for raw in pointer.split("/")[1:] if pointer else ():
        part = raw.replace("~1", "/").replace("~0", "~")
        if part.isdigit():
            path += "[]"
        else:
            path = f"{path}.{part}" if path else part
    missing = _REQUIRED.match(message)
    return join(path, missing.group(1)) if missing else path


def event_prefix(label: str, path: str) -> str:
    """Spell a path inside a Responses stream event; the Response it carries is one object."""
    if path.split(".", 1)[0] == "response":
        return join(EMBEDDED_EVENTS, path)
    return join(f"events[{label}]", path)


def remembered(table: dict[Any, T], key: Any, compute: Callable[[], T]) -> T:
    found = table.get(key)
    if found is None:
        if len(table) >= MEMO_LIMIT:
            table.clear()
        found = table[key] = compute()
    return found
