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

A capture holds fingerprints where it met secrets (auth headers, cookies, headers named in
`capture_redact`, key-like query parameters): those are never sent, the target's key comes
from the environment. A session captured on two listeners (client → gateway → backend)
holds each call twice; only the outer hop is an original to replay.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
import math
import re
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from wirediff._support import is_2xx
from wirediff._types import JSON, Record
from wirediff.errors import PlanError
from wirediff.record.keys import HOP_LOOKBACK, HOP_SLACK_S, HOP_WINDOW_S, hop_key
from wirediff.record.redact import AUTH_HEADERS, SECRET_QUERY
from wirediff.record.tags import header_get, route

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
        "content-encoding",
        "cookie",
        "x-wirediff-replay-of",
        "x-wirediff-label",
    }
)
"""Request headers never copied from the capture: the transport's own (`content-encoding`
too: the capture holds the body decoded, and it is sent so), plus cookies (the capture holds
only their fingerprints) and wirediff's control headers."""

FINGERPRINT = re.compile(r"(\w+ )?sha256:[0-9a-f]{12}")
"""A header value the capture replaced by its fingerprint (`redact_value`): not the value."""

DEFAULT_PREFIXES = frozenset({"/v1"})
"""The API prefix assumed for a session without any known route to learn it from."""

RETRY_KINDS = frozenset({"skipped", "upstream_unreachable", "timeout", "upstream_disconnect"})
"""`error.kind`s of a replay record that leave its original to try again on resume."""

FILTER_KEYS = (
    "family", "endpoint", "method", "path", "stream", "model", "id", "session", "listener",
    "label",
)  # fmt: skip


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
        """The URL without its query, no trailing `/`: what a path after the prefix goes onto."""
        p = urlsplit(self.url)
        return urlunsplit((p.scheme, p.netloc, p.path.rstrip("/"), "", ""))

    @property
    def origin(self) -> str:
        """`scheme://host:port`: what a path outside the session's API prefix goes onto."""
        p = urlsplit(self.url)
        return f"{p.scheme}://{p.netloc}"

    @property
    def query(self) -> str:
        """The target URL's own query (Azure's `api-version=…`), sent on every request."""
        return urlsplit(self.url).query

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
    if per is None or not math.isfinite(value) or value <= 0:
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
    return str(rec.get(key) or "")  # id, session, listener, label


def selected(rec: Record, filters: Sequence[tuple[Term, ...]]) -> bool:
    """No filters: everything. Several: any of them, each with all of its terms."""
    return not filters or any(all(t.matches(rec) for t in f) for f in filters)


def names_listener(filters: Sequence[tuple[Term, ...]]) -> bool:
    """Some filter chooses listeners (or labels, one a listener in a two-hop capture)
    itself: inner hops are then not left out by default."""
    return any(t.key in ("listener", "label") for f in filters for t in f)


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


def check_original(rec: Record) -> None:
    """A `PlanError` (one line) for a record that cannot even be planned."""
    rid = rec.get("id")
    if not isinstance(rid, str) or not rid:
        raise PlanError(f"a record has no id (session {rec.get('session')!r})")
    if not isinstance(rec.get("request"), dict):
        raise PlanError(f"record {rid}: no request object")
    started = rec.get("started")
    if started is not None and (isinstance(started, bool) or not isinstance(started, int | float)):
        raise PlanError(f"record {rid}: `started` is not a number ({started!r})")


def request_problem(rec: Record) -> str | None:
    """Why the captured request cannot be sent again (None: it can)."""
    req = rec["request"]
    if not isinstance(req.get("method"), str) or not req["method"].strip():
        return "the captured request has no method"
    if not isinstance(req.get("path"), str):
        return "the captured request has no path"
    headers = req.get("headers") or []
    if not isinstance(headers, list) or not all(
        isinstance(h, list | tuple) and len(h) == 2 and all(isinstance(x, str) for x in h)
        for h in headers
    ):
        return "the captured request headers are not [name, value] pairs"
    b64 = req.get("b64")
    if req.get("body") is None and req.get("text") is None and b64 is not None:
        try:
            base64.b64decode(str(b64), validate=True)
        except (binascii.Error, ValueError) as e:
            return f"the captured request body is not valid base64 ({e})"
    return None


def _duration_s(rec: Record) -> float | None:
    dur = rec.get("duration_ms")
    if isinstance(dur, int | float) and not isinstance(dur, bool) and math.isfinite(dur):
        return float(dur) / 1000.0
    return None


def inner_hops(originals: Sequence[Record]) -> set[str]:
    """Ids of the inner hops of two-hop captures: a record on another listener than its
    session's first record that lies, in time, inside an earlier record asking the same
    thing (`wirediff.record.keys.hop_key`) on another listener — the same call seen again behind
    a gateway. `originals` in start order; the time slack and look-back are the chains'."""
    first: dict[Any, Any] = {}
    listeners: dict[Any, set[Any]] = {}
    for rec in originals:
        sess = rec.get("session")
        first.setdefault(sess, rec.get("listener"))
        listeners.setdefault(sess, set()).add(rec.get("listener"))
    if all(len(v) < 2 for v in listeners.values()):
        return set()
    ends: dict[tuple[Any, Hashable], dict[str, list[float]]] = {}
    inner: set[str] = set()
    for rec in originals:
        sess, here = rec.get("session"), rec.get("listener")
        if not isinstance(here, str) or len(listeners[sess]) < 2:
            continue
        start, dur = float(rec.get("started") or 0.0), _duration_s(rec)
        by_listener = ends.setdefault((sess, hop_key(rec["request"])), {})
        if here != first[sess]:
            end = start + (dur or 0.0)
            if any(
                end <= outer_end
                for other, prior in by_listener.items()
                if other != here
                for outer_end in prior[-HOP_LOOKBACK:]
            ):
                inner.add(str(rec["id"]))
        outer_end = start + (dur if dur is not None else HOP_WINDOW_S) + HOP_SLACK_S
        by_listener.setdefault(here, []).append(outer_end)
    return inner


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
    api_prefixes: frozenset[str] = DEFAULT_PREFIXES
    """The API prefixes of its session's known routes (`/v1`): where an unknown path's
    own prefix ends."""
    wanted: bool = True
    """Selected by the filters (False: pulled in only because a selected one depends on it)."""
    skip: str | None = None
    """Set when the original is never sent (unsafe, truncated or malformed request)."""

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
    hops_left_out: dict[str, int] = field(default_factory=dict)
    """Inner hops of two-hop captures not replayed, counted by listener."""

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
    """Originals in start order with their references; filtered, plus what they depend on.

    Inner hops of two-hop captures are left out unless a filter names a `listener` or a
    `label`; what a selected exchange depends on is kept whatever the filters say.
    """
    seen: set[str] = set()
    originals: list[tuple[float, int, Record]] = []
    for i, rec in enumerate(records):
        if not is_replayable_original(rec) or rec.get("id") in seen:
            continue
        check_original(rec)
        seen.add(str(rec["id"]))
        originals.append((float(rec.get("started") or 0.0), i, rec))
    originals.sort(key=lambda t: (t[0], t[1]))
    in_order = [rec for _, _, rec in originals]

    prefixes: dict[Any, set[str]] = {}
    for rec in in_order:
        family, _, prefix = route(str(rec["request"].get("path") or ""))
        if family != "other":
            prefixes.setdefault(rec.get("session"), set()).add(prefix)
    frozen = {s: frozenset(p) for s, p in prefixes.items()}

    produced: dict[str, tuple[str, Slot]] = {}
    nodes: list[Node] = []
    for order, rec in enumerate(in_order):
        node = Node(rec, order, find_refs(rec, produced))
        node.api_prefixes = frozen.get(rec.get("session"), DEFAULT_PREFIXES)
        for slot, value in produced_slots(rec).items():
            produced.setdefault(value, (node.id, slot))
        nodes.append(node)

    hops = set() if names_listener(filters) else inner_hops(in_order)
    by_id = {n.id: n for n in nodes}
    keep: set[str] = set()
    stack = [n.id for n in nodes if n.id not in hops and selected(n.rec, filters)]
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
        n.skip = request_problem(n.rec)
        if n.skip is None and not allow_unsafe:
            n.skip = unsafe_reason(n.rec)
        if n.skip is None and n.rec["request"].get("truncated"):
            n.skip = "the captured request body was truncated (raise capture_body_cap)"
        out.append(n)
    left_out: dict[str, int] = {}
    for hid in sorted(hops - keep):
        listener = str(by_id[hid].rec.get("listener"))
        left_out[listener] = left_out.get(listener, 0) + 1
    return Plan(out, left_out)


def resumed(plan: Plan, prior: Mapping[str, Record]) -> dict[str, Record]:
    """The originals a resumed run does not send again, with their newest earlier record.

    An earlier attempt that got no answer (`RETRY_KINDS`: unreachable, timeout, a
    disconnect) is tried again; so is a skipped one, unless it would be skipped again for
    the same reason (still unsafe, or what it builds on is done and unchanged). In start
    order, so that a step is retried when what it depends on is.
    """
    done: dict[str, Record] = {}
    for n in plan.nodes:
        rec = prior.get(n.id)
        if rec is None:
            continue
        err = rec.get("error")
        kind = err.get("kind") if isinstance(err, dict) else None
        if kind not in RETRY_KINDS:
            done[n.id] = rec
            continue
        if kind != "skipped" or not isinstance(err, dict):
            continue
        again = n.skip
        if again is None and n.deps and n.deps <= done.keys():
            again = resolve(n, done.get)[1]
        if again is not None and again == err.get("message"):
            done[n.id] = rec
    return done


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
    if not is_2xx(status):
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
    dropped: tuple[str, ...] = ()
    """What the capture held only as a fingerprint and is therefore not sent
    (`header x-portkey-api-key`, `query parameter key`)."""


def _remap(obj: JSON, mapping: Mapping[str, str], key: str = "") -> JSON:
    if isinstance(obj, str):
        return mapping.get(obj, obj) if key not in NOT_REFERENCES else obj
    if isinstance(obj, dict):
        return {k: _remap(v, mapping, str(k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_remap(v, mapping, key) for v in obj]
    return obj


def _prefix_of(path: str, prefixes: Collection[str]) -> str | None:
    """The longest of `prefixes` that `path` lies under (segment-wise), or None."""
    under = [p for p in prefixes if path == p or path.startswith(p + "/")]
    return max(under, key=len) if under else None


def _query_name(part: str) -> str:
    return unquote_plus(part.partition("=")[0])


def secret_query(path: str) -> list[str]:
    """Names of the key-like query parameters in a captured path (`SECRET_QUERY`): their
    values are fingerprints, and a key is never carried to another target anyway."""
    query = path.partition("?")[2]
    return [
        n for n in map(_query_name, query.split("&") if query else ()) if n.lower() in SECRET_QUERY
    ]


def merge_query(query: str, target: Target, mapping: Mapping[str, str]) -> str:
    """The original's query without key-like parameters or those the target URL sets, ids
    remapped, then the target URL's own query."""
    own = [p for p in target.query.split("&") if p]
    own_names = {_query_name(p) for p in own}
    kept = []
    for part in query.split("&") if query else ():
        name = _query_name(part)
        if not part or name.lower() in SECRET_QUERY or name in own_names:
            continue
        key, eq, value = part.partition("=")
        kept.append(key + eq + mapping.get(value, value))
    return "&".join(kept + own)


def rebase(
    path: str,
    target: Target,
    mapping: Mapping[str, str],
    api_prefixes: Collection[str] = DEFAULT_PREFIXES,
) -> str:
    """The original path after its API prefix, onto the target's base URL, ids remapped.

    A known route's prefix is its own (`/openai/v1/responses`); a path no route knows is
    cut after the API prefix its session's known routes use (`api_prefixes`), so that
    `/v1/ask_url` goes to `<target base>/ask_url`, and a path outside that prefix
    (`/health`) goes onto the target's origin as it is. The query: `merge_query`.
    """
    bare, _, query = path.partition("?")
    family, template, prefix = route(bare)
    base = target.base
    if family != "other":
        rest = bare[len(prefix) :]
    else:
        own = _prefix_of(bare, api_prefixes)
        rest, base = (bare[len(own) :], base) if own is not None else (bare, target.origin)
    segs = [mapping.get(s, s) for s in rest.split("/")]
    if template == "/v1/models/{id}":
        head, _, model = "/".join(segs).partition("/models/")
        segs = [head, "models", target.map_model(model)] if model else segs
    merged = merge_query(query, target, mapping)
    return base + "/".join(segs) + ("?" + merged if merged else "")


def _auth_header(rec: Record, key: str) -> tuple[str, str]:
    auth = (rec.get("tags") or {}).get("auth") or {}
    name = str(auth.get("header") or "authorization")
    scheme = auth.get("scheme") or ("Bearer" if name == "authorization" else None)
    return name, f"{scheme} {key}" if scheme else key


def prepare(
    rec: Record,
    target: Target,
    api_key: str | None,
    mapping: Mapping[str, str],
    *,
    api_prefixes: Collection[str] = DEFAULT_PREFIXES,
) -> Outgoing:
    """The request to send for an original: re-based, remapped, model-mapped, re-keyed.

    Headers and query parameters the capture holds only as fingerprints are left out
    (`Outgoing.dropped`); a `--header` sets such a header again.
    """
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
    path = str(req.get("path") or "/")
    dropped = [f"query parameter {n}" for n in secret_query(path)]
    for name, value in req.get("headers") or ():
        low = name.lower()
        if low in HOP_BY_HOP or low in target.headers:
            continue
        if low in AUTH_HEADERS:
            if auth is not None and low == auth[0]:
                headers.append(auth)
                auth = None
            continue
        if FINGERPRINT.fullmatch(value):
            dropped.append(f"header {low}")
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
        url=rebase(path, target, mapping, api_prefixes),
        headers=headers,
        content=content,
        model=model if model is not None else (rec.get("tags") or {}).get("model"),
        stream=is_stream(rec),
        dropped=tuple(dropped),
    )
