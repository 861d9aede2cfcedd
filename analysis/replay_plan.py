"""Replay planning: what to send where, in which order, with which ids — pure, no I/O.

A captured session is a conversation with *state*: a Responses call names the one before it
(`previous_response_id`), a tool result answers a call the model made (`call_id`,
`tool_call_id`), a lookup names a stored object in its path (`/v1/responses/{id}`). The
target mints its own ids, so a faithful replay must send the producer first, read the id the
*target* returned, and put that id where the original one was.

Dependencies are found by value: an id is *produced* by the first original whose answer
carries it in a known place (a *slot*: the object's `id`, the k-th function call's
`call_id`, …), and *referenced* by any later request that contains the same string. The
target's answer to the producer is read through the same slots, so "the k-th function call
of the original" becomes "the k-th function call the target returned".
"""

from __future__ import annotations

import base64
import fnmatch
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from analysis._types import JSON, Record
from analysis.redact import AUTH_HEADERS
from analysis.tags import header_get, route

Slot = tuple[str | int, ...]
"""Where an id sits in an answer: `("id",)`, `("call", k)`, `("item", type, k)`,
`("tool_call", choice, k)`."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SAFE_POST = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/embeddings",
        "/v1/moderations",
    }
)
"""Generation endpoints: replayed by default. Anything else that is not a GET is *unsafe*."""

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
"""A reference under one of these keys (or in the path) cannot be sent without the target's
own id; other references (e.g. an echoed item `id`) are remapped when possible, else kept."""

NOT_REFERENCES = frozenset({"model"})

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "cookie",
        "x-wirediff-replay-of",
        "x-wirediff-label",
    }
)
"""Request headers never copied from the capture: the transport's own, plus cookies (the
capture holds only their fingerprints) and wirediff's control headers."""

FILTER_KEYS = ("family", "endpoint", "method", "path", "stream", "model", "id", "session")


class PlanError(ValueError):
    """A bad option value (filter, model map, header); one line for the user."""


# --- targets -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where to replay: the base URL as an SDK's `base_url` (e.g. `http://host:port/v1`)."""

    label: str
    url: str
    api_key_env: str | None = None
    model_map: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str | None] = field(default_factory=dict)
    """Header overrides by lower-case name; `None` removes the header."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", {k.lower(): v for k, v in self.headers.items()})
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PlanError(f"target {self.label!r}: not an http(s) URL: {self.url!r}")
        bad = sorted(set(self.headers) & (set(AUTH_HEADERS) | {"cookie"}))
        if bad:
            raise PlanError(
                f"target {self.label!r}: --header {bad[0]} would put a secret on the command "
                "line or in a file; use --api-key-env VAR"
            )

    @property
    def base(self) -> str:
        return self.url.rstrip("/")

    def map_model(self, model: str) -> str:
        return self.model_map.get(model, self.model_map.get("*", model))


def default_label(url: str) -> str:
    """The target's host (and port when not the scheme's default), like the capture's label."""
    parts = urlsplit(url)
    host = parts.hostname or url
    default = 443 if parts.scheme == "https" else 80
    return host if parts.port in (None, default) else f"{host}:{parts.port}"


def parse_pairs(items: Iterable[str], what: str, *, allow_empty: bool) -> dict[str, str]:
    """`A=B` strings to a dict; `what` names the option in the error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or (not value and not allow_empty):
            raise PlanError(f"{what}: expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def parse_rate(text: str) -> float:
    """`5`, `5/s`, `300/m`, `300/min`, `3600/h` → requests per second."""
    num, _, unit = text.strip().partition("/")
    per = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}.get(unit.strip())
    try:
        value = float(num)
    except ValueError:
        value = -1.0
    if per is None or value <= 0:
        raise PlanError(f"--rate: expected a positive number per s/m/h (e.g. 5/s), got {text!r}")
    return value / per


# --- filters -------------------------------------------------------------------------------


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
    """`family=responses,stream=true` → terms that must all match. `!=` negates; values
    are shell-style globs (`endpoint=/v1/responses*`)."""
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
        terms.append(Term(key, value.strip(), negate))
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
    return str(rec.get(key) or "")


def selected(rec: Record, filters: Sequence[tuple[Term, ...]]) -> bool:
    """No filters: everything. Several: any of them, each with all of its terms."""
    return not filters or any(all(t.matches(rec) for t in f) for f in filters)


# --- what a record is ----------------------------------------------------------------------


def is_stream(rec: Record) -> bool:
    body = (rec.get("request") or {}).get("body")
    return bool((rec.get("tags") or {}).get("stream")) or (
        isinstance(body, dict) and body.get("stream") is True
    )


def endpoint_of(rec: Record) -> tuple[str, str]:
    """`(METHOD, route template)` from the request itself (tags may be from an older build)."""
    req = rec.get("request") or {}
    return str(req.get("method", "")).upper(), route(str(req.get("path") or ""))[1]


def unsafe_reason(rec: Record) -> str | None:
    """Why this exchange is not replayed without `--allow-unsafe` (None: it is safe)."""
    method, endpoint = endpoint_of(rec)
    if method in SAFE_METHODS or (method == "POST" and endpoint in SAFE_POST):
        return None
    return f"{method} {endpoint} may change state on the target; replayed only with --allow-unsafe"


def is_replayable_original(rec: Record) -> bool:
    """Originals only: replays and skipped records are never replayed again."""
    if rec.get("replay_of"):
        return False
    err = rec.get("error")
    return not (isinstance(err, dict) and err.get("kind") == "skipped")


# --- ids: what an answer produces ------------------------------------------------------------


def _object_slots(obj: Any, slots: dict[Slot, str]) -> None:
    """Slots of a Response or a chat completion object."""
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
    """Output items: the k-th item of each type by `id`, the k-th call by `call_id`."""
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
    """Slots of a stream: the last full Response object seen, else the items one by one;
    chat chunks by choice and tool-call index."""
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
    """The ids an exchange's answer mints, by slot (empty for non-producers)."""
    if endpoint_of(rec) not in PRODUCERS:
        return {}
    resp = rec.get("response")
    if not isinstance(resp, dict):
        return {}
    slots: dict[Slot, str] = {}
    _object_slots(resp.get("body"), slots)
    if resp.get("events"):
        _event_slots(resp["events"], slots)
    return slots


def describe_slot(slot: Slot) -> str:
    if slot[0] == "id":
        return "an id"
    if slot[0] == "call":
        return f"function call #{int(slot[1]) + 1}"
    if slot[0] == "tool_call":
        return f"tool call #{int(slot[2]) + 1}"
    return f"{slot[1]} item #{int(slot[2]) + 1}"


# --- ids: what a request references ---------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    """One original id in a request, produced by an earlier original."""

    value: str
    producer: str
    slot: Slot
    where: str
    """`path` or the JSON key holding it (`previous_response_id`, `call_id`, …)."""
    essential: bool


def _walk_strings(obj: JSON, key: str = "") -> Iterator[tuple[str, str]]:
    """`(key, string)` for every string value in a JSON tree (list items keep their key)."""
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
    """References in a request to ids that earlier originals produced."""
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


# --- the plan ------------------------------------------------------------------------------


@dataclass
class Node:
    """One original to replay (or to record as skipped)."""

    rec: Record
    order: int
    refs: list[Ref] = field(default_factory=list)
    wanted: bool = True
    """Selected by the filters (False: pulled in only because a selected one depends on it)."""
    skip: str | None = None
    """Set when the original is never sent (unsafe, truncated request body)."""

    @property
    def id(self) -> str:
        return str(self.rec["id"])

    @property
    def deps(self) -> set[str]:
        return {r.producer for r in self.refs}


@dataclass
class Plan:
    nodes: list[Node]
    """Originals in start order."""

    def __post_init__(self) -> None:
        self.by_id = {n.id: n for n in self.nodes}
        self.dependents: dict[str, list[str]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for d in sorted(n.deps):
                self.dependents[d].append(n.id)

    def __len__(self) -> int:
        return len(self.nodes)


def make_plan(
    records: Iterable[Record],
    *,
    filters: Sequence[tuple[Term, ...]] = (),
    allow_unsafe: bool = False,
) -> Plan:
    """Originals in start order with their references; filtered, plus what they depend on."""
    seen: set[str] = set()
    originals: list[tuple[float, int, Record]] = []
    for i, rec in enumerate(records):
        if not is_replayable_original(rec) or rec.get("id") in seen:
            continue
        seen.add(str(rec.get("id")))
        originals.append((float(rec.get("started") or 0.0), i, rec))
    originals.sort(key=lambda t: (t[0], t[1]))

    produced: dict[str, tuple[str, Slot]] = {}
    nodes: list[Node] = []
    for order, (_, _, rec) in enumerate(originals):
        node = Node(rec, order, find_refs(rec, produced))
        for slot, value in produced_slots(rec).items():
            produced.setdefault(value, (node.id, slot))
        nodes.append(node)

    by_id = {n.id: n for n in nodes}
    keep: set[str] = set()
    stack = [n.id for n in nodes if selected(n.rec, filters)]
    wanted = set(stack)
    while stack:
        nid = stack.pop()
        if nid in keep:
            continue
        keep.add(nid)
        stack.extend(by_id[nid].deps)
    out = []
    for n in nodes:
        if n.id not in keep:
            continue
        n.wanted = n.id in wanted
        if not allow_unsafe:
            n.skip = unsafe_reason(n.rec)
        if n.skip is None and (n.rec.get("request") or {}).get("truncated"):
            n.skip = "the captured request body was truncated (raise capture_body_cap)"
        out.append(n)
    return Plan(out)


# --- what the target's answer means for the steps after it ---------------------------------


def failure(outcome: Record) -> str | None:
    """Why a replayed exchange yields nothing to build on (None: it succeeded)."""
    err = outcome.get("error")
    if isinstance(err, dict) and err.get("kind") == "skipped":
        return f"it was skipped ({err.get('message')})"
    resp = outcome.get("response")
    if not isinstance(resp, dict):
        kind = err.get("kind") if isinstance(err, dict) else "no answer"
        return f"the target did not answer it ({kind})"
    status = resp.get("status")
    if not isinstance(status, int) or not 200 <= status < 300:
        return f"the target answered it with HTTP {status}"
    tags = outcome.get("tags") or {}
    if tags.get("soft_error"):
        sig = tags.get("signature")
        return f"the target answered it with HTTP {status} and an error body" + (
            f" ({sig})" if sig else ""
        )
    return None


def resolve(
    node: Node, outcome_of: Callable[[str], Record | None]
) -> tuple[dict[str, str], str | None]:
    """The id mapping (original → target's) for a node, or the reason it must be skipped."""
    mapping: dict[str, str] = {}
    slots_cache: dict[str, dict[Slot, str]] = {}
    for ref in node.refs:
        outcome = outcome_of(ref.producer)
        if outcome is None:
            why: str | None = "it was not replayed"
            target_id = None
        else:
            why = failure(outcome)
            if ref.producer not in slots_cache:
                slots_cache[ref.producer] = produced_slots(outcome) if why is None else {}
            target_id = slots_cache[ref.producer].get(ref.slot)
        if target_id is not None:
            mapping[ref.value] = target_id
            continue
        if ref.essential:
            reason = why or f"the target's answer to it has no {describe_slot(ref.slot)}"
            return mapping, f"{ref.where} {ref.value} comes from {ref.producer}, but {reason}"
    return mapping, None


# --- the request to send -------------------------------------------------------------------


@dataclass(frozen=True)
class Outgoing:
    method: str
    url: str
    headers: list[tuple[str, str]]
    content: bytes | None
    model: str | None
    stream: bool


def _remap(obj: JSON, mapping: Mapping[str, str], key: str = "") -> JSON:
    if isinstance(obj, str):
        return mapping.get(obj, obj) if key not in NOT_REFERENCES else obj
    if isinstance(obj, dict):
        return {k: _remap(v, mapping, str(k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_remap(v, mapping, key) for v in obj]
    return obj


def rebase(path: str, target: Target, mapping: Mapping[str, str]) -> str:
    """The original path after its API prefix, onto the target's base URL, ids remapped."""
    bare, sep, query = path.partition("?")
    family, template, prefix = route(bare)
    rest = bare[len(prefix) :] if family != "other" else bare
    segs = [mapping.get(s, s) for s in rest.split("/")]
    if template == "/v1/models/{id}":
        head, _, model = "/".join(segs).partition("/models/")
        segs = [head, "models", target.map_model(model)] if model else segs
    if query and mapping:
        pairs = (p.partition("=") for p in query.split("&"))
        query = "&".join(k + eq + mapping.get(v, v) for k, eq, v in pairs)
    return target.base + "/".join(segs) + (sep + query)


def _auth_header(rec: Record, key: str) -> tuple[str, str]:
    auth = (rec.get("tags") or {}).get("auth") or {}
    name = str(auth.get("header") or "authorization")
    scheme = auth.get("scheme") or ("Bearer" if name == "authorization" else None)
    return name, f"{scheme} {key}" if scheme else key


def prepare(
    rec: Record, target: Target, api_key: str | None, mapping: Mapping[str, str]
) -> Outgoing:
    """The request to send for an original: re-based, remapped, model-mapped, re-keyed."""
    req = rec.get("request") or {}
    body = req.get("body")
    model: str | None = None
    content: bytes | None
    if body is not None:
        body = _remap(body, mapping) if mapping else body
        if isinstance(body, dict) and isinstance(body.get("model"), str):
            body = {**body, "model": target.map_model(body["model"])}
            model = body["model"]
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    elif req.get("text") is not None:
        content = str(req["text"]).encode("utf-8")
    elif req.get("b64") is not None:
        content = base64.b64decode(req["b64"])
    else:
        content = None
    if content == b"" and str(req.get("method")).upper() in SAFE_METHODS:
        content = None

    auth = _auth_header(rec, api_key) if api_key else None
    headers: list[tuple[str, str]] = []
    for name, value in req.get("headers") or ():
        low = name.lower()
        if low in HOP_BY_HOP or low in target.headers:
            continue
        if low in AUTH_HEADERS:
            if auth is not None and low == auth[0]:
                headers.append(auth)
                auth = None
            continue
        headers.append((low, value))
    if auth is not None:
        headers.append(auth)
    for name, override in target.headers.items():
        if override is not None:
            headers.append((name, override))
    if body is not None and header_get(headers, "content-type") is None:
        headers.append(("content-type", "application/json"))
    return Outgoing(
        method=str(req.get("method", "GET")).upper(),
        url=rebase(str(req.get("path") or "/"), target, mapping),
        headers=headers,
        content=content,
        model=model if model is not None else (rec.get("tags") or {}).get("model"),
        stream=is_stream(rec),
    )
