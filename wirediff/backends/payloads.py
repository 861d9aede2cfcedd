"""Shape answer bodies and SSE events as each provider profile does.

Pure functions of a profile and a `Plan` (what to say): the non-streamed
`chat.completion` and Response objects, the `chat.completion.chunk` sequence and the
Responses API's typed events, and their encoding as SSE frames. Ids and timestamps are
fresh per call; everything else is repeatable.
"""

from __future__ import annotations

import json
import secrets
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from wirediff.backends.answers import Plan
from wirediff.profiles import Profile, fill

__all__ = [
    "ResponseBuild",
    "build_response",
    "chat_chunks",
    "chat_completion",
    "chat_usage",
    "data_frame",
    "event_frame",
    "make_id",
    "response_events",
]

JSONDict = dict[str, Any]

_ALNUM = string.ascii_letters + string.digits


def make_id(template: str, index: int = 0) -> str:
    """Fill an id template's placeholders with random characters, or the item's position.

    `{hex}`: 32 hex digits; `{alnum}`: 24 letters or digits; `{lower8}`: 8 lower-case letters
    or digits; `{int}`: up to 6 digits; `{index}`: the item's position."""
    out = template.replace("{hex}", secrets.token_hex(16))
    out = out.replace("{alnum}", "".join(secrets.choice(_ALNUM) for _ in range(24)))
    lower = string.ascii_lowercase + string.digits
    out = out.replace("{lower8}", "".join(secrets.choice(lower) for _ in range(8)))
    out = out.replace("{int}", str(secrets.randbelow(999999)))
    return out.replace("{index}", str(index))


def _drop_nulls(obj: Any, keep: frozenset[str]) -> Any:
    """Drop null fields unless explicitly set in `keep`, as vLLM's `exclude_unset` does."""
    if isinstance(obj, dict):
        return {k: _drop_nulls(v, keep) for k, v in obj.items() if v is not None or k in keep}
    if isinstance(obj, list):
        return [_drop_nulls(v, keep) for v in obj]
    return obj


def _fragments(s: str, n: int = 3) -> list[str]:
    size = max(1, -(-len(s) // n))
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


# --- chat completions ---------------------------------------------------------------------


def chat_usage(prof: Profile, plan: Plan) -> JSONDict:
    completion = (len(plan.pieces()) if plan.says else 0) + len(plan.calls)
    usage: JSONDict = {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": plan.prompt_tokens + completion,
    }
    usage.update(prof["chat"].get("usage_extra") or {})
    return usage


def chat_completion(prof: Profile, model: str, plan: Plan) -> JSONDict:
    """Build the non-streamed `chat.completion` object as this provider shapes it."""
    c = prof["chat"]
    message: JSONDict = {"role": "assistant", "content": plan.text if plan.says else None}
    if plan.reasoning and prof["streaming"]["chat"].get("reasoning_field"):
        message[prof["streaming"]["chat"]["reasoning_field"]] = plan.reasoning
    message.update(c.get("message_extra") or {})
    if plan.calls:
        message["tool_calls"] = [
            {
                "id": make_id(c["tool_call_id"]),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in plan.calls
        ]
    choice: JSONDict = {"index": 0, "message": message}
    choice.update(c.get("choice_extra") or {})
    choice["finish_reason"] = "tool_calls" if plan.calls else "stop"
    obj: JSONDict = {
        "id": make_id(c["id"]),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": chat_usage(prof, plan),
    }
    obj.update(fill(c.get("object_extra") or {}, {"model": model}))
    return obj


def _tool_deltas(prof: Profile, plan: Plan, base: JSONDict) -> list[JSONDict]:
    """Build the deltas of each call: a head with id, type and name, then argument fragments.

    `index` numbers calls as the profile does: by position, all `zero`, or `omitted`. Where the
    profile sends calls whole, the head holds the whole arguments."""
    s = prof["streaming"]["chat"]
    numbering = s.get("tool_call_index")
    out: list[JSONDict] = []
    for i, call in enumerate(plan.calls):
        position: JSONDict = (
            {} if numbering == "omitted" else {"index": 0 if numbering == "zero" else i}
        )
        head: JSONDict = {
            **position,
            "id": make_id(prof["chat"]["tool_call_id"]),
            "type": "function",
            "function": {"name": call.name},
        }
        if s.get("tool_calls") == "whole" or not isinstance(call.arguments, str):
            head["function"]["arguments"] = call.arguments
            out.append({**base, "tool_calls": [head]})
            continue
        if s.get("tool_call_head_arguments"):
            head["function"]["arguments"] = ""
        out.append({**base, "tool_calls": [head]})
        out += [
            {**base, "tool_calls": [{**position, "function": {"arguments": frag}}]}
            for frag in _fragments(call.arguments)
        ]
    return out


def chat_chunks(prof: Profile, model: str, plan: Plan, include_usage: bool) -> list[JSONDict]:
    """Build the `chat.completion.chunk` objects of a stream, in order, without `[DONE]`."""
    s = prof["streaming"]["chat"]
    cid, created = make_id(prof["chat"]["id"]), int(time.time())
    extra = fill(s.get("chunk_extra") or {}, {"model": model})
    with_null_usage = include_usage and s.get("usage_null_in_chunks")

    def chunk(delta: JSONDict | None, finish: str | None = None) -> JSONDict:
        ch: JSONDict = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }
        ch.update(extra)
        if delta is None:
            ch["choices"] = []
        else:
            choice: JSONDict = {"index": 0, "delta": delta}
            choice.update(s.get("choice_extra") or {})
            choice["finish_reason"] = finish
            if finish is not None:
                choice.update(s.get("finish_choice_extra") or {})
            ch["choices"] = [choice]
        if with_null_usage:
            ch["usage"] = None
        return ch

    base: JSONDict = dict(s.get("delta_base") or {})
    out: list[JSONDict] = []
    if s.get("first_delta") is not None:
        out.append(chunk(dict(s["first_delta"])))
    if plan.reasoning and s.get("reasoning_field"):
        out.append(chunk({**base, s["reasoning_field"]: plan.reasoning}))
    if plan.says:
        out += [chunk({**base, "content": piece}) for piece in plan.pieces()]
    out += [chunk(delta) for delta in _tool_deltas(prof, plan, base)]
    finish = (s.get("tool_finish_reason") or "tool_calls") if plan.calls else "stop"
    out.append(chunk(dict(s.get("final_delta") or {}), finish))
    if include_usage and s.get("usage_chunk"):
        last = chunk(None)
        last["usage"] = chat_usage(prof, plan)
        out.append(last)
    if s.get("null_fields") == "omitted":
        keep = frozenset(s.get("kept_null") or [])
        out = [_drop_nulls(c, keep) for c in out]
    return out


# --- responses ----------------------------------------------------------------------------


def _echoed_tools(r: Profile, tools: Any) -> list[Any]:
    """Echo the request's tools as the Response does.

    Where the profile says so, function tools carry `strict`: the request's, else the profile's
    default."""
    out = list(tools) if isinstance(tools, list) else []
    default = r.get("tool_strict_default")
    if default is None:
        return out
    return [
        {**t, "strict": t.get("strict", default)}
        if isinstance(t, dict) and t.get("type") == "function" and t.get("strict") is None
        else t
        for t in out
    ]


@dataclass
class ResponseBuild:
    """Hold everything one Responses answer needs: the final object, its items and ids."""

    obj: JSONDict
    items: list[JSONDict]
    plan: Plan


def build_response(
    prof: Profile, body: JSONDict, model: str, plan: Plan, previous: str | None, turn: int
) -> ResponseBuild:
    """Build the completed Response object, carrying exactly the profile's field set."""
    r = prof["responses"]
    if plan.says and turn > 1:
        plan = replace(plan, text=f"(turn {turn}) {plan.text}")
    items: list[JSONDict] = []
    if plan.says:
        items.append(
            {
                "id": make_id(r["message_id"]),
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": plan.text, "annotations": [], "logprobs": []}
                ],
            }
        )
    items += [
        {
            "id": make_id(r["function_call_id"], i),
            "type": "function_call",
            "status": "completed",
            "arguments": call.arguments,
            "call_id": make_id(r["call_id"]),
            "name": call.name,
        }
        for i, call in enumerate(plan.calls)
    ]
    out_tokens = (len(plan.pieces()) if plan.says else 0) + len(plan.calls)
    usage: JSONDict = {
        "input_tokens": plan.prompt_tokens,
        "input_tokens_details": dict(r["usage"]["input_tokens_details"]),
        "output_tokens": out_tokens,
        "output_tokens_details": dict(r["usage"]["output_tokens_details"]),
        "total_tokens": plan.prompt_tokens + out_tokens,
    }
    now = int(time.time())
    store = bool(body.get("store", True)) if r.get("store") == "echo" else bool(r.get("store"))
    values: JSONDict = {
        "id": make_id(r["id"]),
        "object": "response",
        "created_at": now,
        "status": "completed",
        "background": bool(body.get("background", False)),
        "completed_at": now,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": model,
        "output": items,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": previous,
        "prompt": None,
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": body.get("reasoning"),
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": body.get("service_tier"),
        "store": store,
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text"),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": _echoed_tools(r, body.get("tools")),
        "top_logprobs": body.get("top_logprobs", 0),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    for k, v in (r.get("defaults") or {}).items():  # what the provider says when not asked
        if values.get(k) is None:
            values[k] = v
    values.update(r.get("overrides") or {})
    return ResponseBuild({k: values[k] for k in r["fields"]}, items, plan)


_HEAD = frozenset({"response.created", "response.in_progress"})
_TAIL = frozenset({"response.completed", "response.failed", "response.incomplete"})


def _item_events(
    s: Profile, names: list[str], item: JSONDict, index: int, plan: Plan
) -> list[tuple[str, JSONDict]]:
    """Build one output item's events: those of `names` between the head and the terminal."""
    iid = item["id"]
    at = {"item_id": iid, "output_index": index}
    part_empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    if item["type"] == "message":
        added_item: JSONDict = {**item, "status": "in_progress", "content": []}
    else:
        added_item = {**item, "status": "in_progress", "arguments": ""}
    args = item.get("arguments")
    frags: list[Any] = (
        _fragments(args)
        if isinstance(args, str) and s.get("function_call_arguments") == "fragmented"
        else [args]
    )

    def done_args() -> JSONDict:
        d: JSONDict = {**at, "arguments": args}
        if s.get("done_has_name"):
            d["name"] = item.get("name")
        return d

    builders: dict[str, Callable[[], list[JSONDict]]] = {
        "response.output_item.added": lambda: [{"output_index": index, "item": added_item}],
        "response.content_part.added": lambda: [{**at, "content_index": 0, "part": part_empty}],
        "response.output_text.delta": lambda: [
            {**at, "content_index": 0, "delta": p, "logprobs": []} for p in plan.pieces()
        ],
        "response.output_text.done": lambda: [
            {**at, "content_index": 0, "text": plan.text, "logprobs": []}
        ],
        "response.content_part.done": lambda: [
            {**at, "content_index": 0, "part": {**part_empty, "text": plan.text}}
        ],
        "response.output_item.done": lambda: [{"output_index": index, "item": item}],
        "response.function_call_arguments.delta": lambda: [{**at, "delta": f} for f in frags],
        "response.function_call_arguments.done": lambda: [done_args()],
    }
    return [(name, payload) for name in names for payload in builders[name]()]


def response_events(prof: Profile, rb: ResponseBuild) -> list[tuple[str, JSONDict]]:
    """List `(event type, payload)` in the profile's order, each output item's events in turn.

    `item_done_order: reversed` closes the first item last. The payload carries `type` and,
    where the profile says so, `sequence_number`."""
    s = prof["streaming"]["responses"]
    plan = rb.plan
    frame = s["events"]["text" if plan.says else "function_call"]
    initial = {**rb.obj, "status": "in_progress", "output": [], "usage": None}
    if "completed_at" in initial:
        initial["completed_at"] = None
    final = {**rb.obj, "output": []} if s.get("completed_output") == "empty" else rb.obj
    if s.get("created_at") == "float":  # a whole number of seconds, serialised as a float
        initial["created_at"] = float(initial["created_at"])
        final = {**final, "created_at": float(final["created_at"])}
    sequences = [
        _item_events(
            s,
            [
                n
                for n in s["events"][item["type"] if item["type"] == "function_call" else "text"]
                if n not in _HEAD and n not in _TAIL
            ],
            item,
            i,
            plan,
        )
        for i, item in enumerate(rb.items)
    ]
    if s.get("item_done_order") == "reversed" and len(sequences) > 1:
        first = sequences[0]
        cut = next((j for j, (n, _) in enumerate(first) if n.endswith(".done")), len(first))
        sequences = [first[:cut], *sequences[1:], first[cut:]]
    body = [ev for seq in sequences for ev in seq]
    head = [(n, {"response": initial}) for n in frame if n in _HEAD]
    tail = [(n, {"response": final}) for n in frame if n in _TAIL]
    out: list[tuple[str, JSONDict]] = []
    for name, payload in [*head, *body, *tail]:
        ev: JSONDict = {"type": name, **payload}
        if s.get("sequence_number"):
            ev["sequence_number"] = len(out)
        out.append((name, ev))
    return out


# --- SSE frames ---------------------------------------------------------------------------


def data_frame(obj: Any) -> bytes:
    """Frame one `data:` event, as chat completions send them."""
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def event_frame(name: str, obj: Any, event_line: bool) -> bytes:
    """Frame one typed Responses event, with its `event:` line where the provider sends one."""
    data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    return (f"event: {name}\n".encode() if event_line else b"") + b"data: " + data + b"\n\n"
