"""Locate id slots: where an answer carries the ids it mints, and where a request names them.

An id is *produced* by the first original whose answer carries it in a known place (a
*slot*: the object's `id`, the k-th function call's `call_id`, …), and *referenced* by any
later request that contains the same string. The target's answer to the producer is read
through the same slots, so "the k-th function call of the original" becomes "the k-th
function call the target returned".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wirediff._types import JSON, Record
from wirediff.replay.safety import endpoint_of

__all__ = [
    "ESSENTIAL_KEYS",
    "NOT_REFERENCES",
    "PRODUCERS",
    "Ref",
    "Slot",
    "describe_slot",
    "find_refs",
    "produced_slots",
]

Slot = tuple[str | int, ...]
"""Where an id sits in an answer.

`("id",)`, `("call", k)`, `("item", type, k)` or `("tool_call", choice, k)`."""

PRODUCERS = frozenset(
    {
        ("POST", "/v1/responses"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/files"),
        ("POST", "/v1/batches"),
    }
)
"""Exchanges whose answers mint ids that later requests may name."""

ESSENTIAL_KEYS = frozenset(
    {"previous_response_id", "call_id", "tool_call_id", "response_id", "file_id", "batch_id"}
)
"""Keys under which a reference, like one in the path, cannot be sent without the target's id.

Other references, such as an echoed item `id`, are remapped when possible, else kept."""

NOT_REFERENCES = frozenset({"model"})


def _object_slots(obj: Any, slots: dict[Slot, str]) -> None:
    """Find the slots of a Response or a chat completion object."""
    if not isinstance(obj, dict):
        return
    if isinstance(obj.get("id"), str) and obj["id"]:
        slots.setdefault(("id",), obj["id"])
    output = obj.get("output")
    if isinstance(output, list):
        _items_slots(output, slots)
    choices = obj.get("choices")
    if isinstance(choices, list):
        for pos, choice in enumerate(choices):
            if not isinstance(choice, dict):
                continue
            cidx = choice.get("index", pos)
            msg = choice.get("message")
            calls = msg.get("tool_calls") if isinstance(msg, dict) else None
            for k, call in enumerate(calls if isinstance(calls, list) else ()):
                if isinstance(call, dict) and isinstance(call.get("id"), str) and call["id"]:
                    slots.setdefault(("tool_call", cidx, k), call["id"])


def _items_slots(items: Sequence[Any], slots: dict[Slot, str]) -> None:
    """Find output items' slots: the k-th item of each type by `id`, the k-th call by `call_id`."""
    per_type: dict[str, int] = {}
    calls = 0
    for item in items:
        if not isinstance(item, dict):
            continue
        typ = str(item.get("type"))
        k = per_type.get(typ, 0)
        per_type[typ] = k + 1
        if isinstance(item.get("id"), str) and item["id"]:
            slots.setdefault(("item", typ, k), item["id"])
        if isinstance(item.get("call_id"), str) and item["call_id"]:
            slots.setdefault(("call", calls), item["call_id"])
            calls += 1


def _event_slots(events: Sequence[Any], slots: dict[Slot, str]) -> None:
    """Find the slots of a stream: the last full Response object seen, else the items one by one.

    Chat chunks give them by choice and tool-call index."""
    last_response: dict[str, Any] | None = None
    items: dict[int, dict[str, Any]] = {}
    for ev in events:
        data = ev.get("data") if isinstance(ev, dict) else None
        if not isinstance(data, dict):
            continue
        resp = data.get("response")
        if isinstance(resp, dict):
            last_response = resp
            continue
        item = data.get("item")
        if isinstance(item, dict) and isinstance(data.get("output_index"), int):
            items[data["output_index"]] = {**items.get(data["output_index"], {}), **item}
            continue
        if isinstance(data.get("id"), str) and data["id"]:
            slots.setdefault(("id",), data["id"])
        for pos, choice in enumerate(data.get("choices") or ()):
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            calls = delta.get("tool_calls") if isinstance(delta, dict) else None
            for k, call in enumerate(calls if isinstance(calls, list) else ()):
                if isinstance(call, dict) and isinstance(call.get("id"), str) and call["id"]:
                    idx = call.get("index", k)
                    slots.setdefault(("tool_call", choice.get("index", pos), idx), call["id"])
    if last_response is not None:
        _object_slots(last_response, slots)
    if items:
        _items_slots([items[i] for i in sorted(items)], slots)


def produced_slots(rec: Record) -> dict[Slot, str]:
    """Return the ids an exchange's answer mints, by slot; empty for non-producers."""
    if endpoint_of(rec) not in PRODUCERS:
        return {}
    resp = rec.get("response")
    if resp is None:
        return {}
    slots: dict[Slot, str] = {}
    _object_slots(resp.get("body"), slots)
    if events := resp.get("events"):
        _event_slots(events, slots)
    return slots


def describe_slot(slot: Slot) -> str:
    if slot[0] == "id":
        return "an id"
    if slot[0] == "call":
        return f"function call #{int(slot[1]) + 1}"
    if slot[0] == "tool_call":
        return f"tool call #{int(slot[2]) + 1}"
    return f"{slot[1]} item #{int(slot[2]) + 1}"


@dataclass(frozen=True)
class Ref:
    """Point at one original id in a request, produced by an earlier original."""

    value: str
    producer: str
    slot: Slot
    where: str
    """`path` or the JSON key holding it (`previous_response_id`, `call_id`, …)."""
    essential: bool


def _walk_strings(obj: JSON, key: str = "") -> Iterator[tuple[str, str]]:
    """Yield `(key, string)` for every string value in a JSON tree; list items keep their key."""
    if isinstance(obj, str):
        yield key, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if k not in NOT_REFERENCES:
                yield from _walk_strings(v, str(k))
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk_strings(v, key)


def find_refs(rec: Record, produced: Mapping[str, tuple[str, Slot]]) -> list[Ref]:
    """Find the references in a request to ids that earlier originals produced."""
    req = rec.get("request") or {}
    refs: dict[tuple[str, str], Ref] = {}
    path, _, query = str(req.get("path") or "").partition("?")
    for seg in path.split("/"):
        if seg in produced:
            refs[(seg, "path")] = Ref(seg, *produced[seg], "path", True)
    for part in query.split("&") if query else ():
        value = part.partition("=")[2]
        if value in produced:  # e.g. `?after=<item id>` when paging
            refs[(value, "query")] = Ref(value, *produced[value], "query", False)
    for key, value in _walk_strings(req.get("body")):
        if value in produced and (value, key) not in refs:
            refs[(value, key)] = Ref(value, *produced[value], key, key in ESSENTIAL_KEYS)
    return list(refs.values())
