"""Cut an exchange down to what the diagnosis reads of it, and key it.

`evidence_record` keeps of a record only what `view`, the rules and the provider look at, and
`evidence_key` gives a number equal for exchanges whose diagnoses read the same.

A failing chain is diagnosed once per distinct sequence of such records and links, and
`wirediff.analysis.diagnosis.explain` fans the rows back to every chain that reads the same: ids,
times and generated text the rules never quote do not make chains differ.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

import orjson

from wirediff._types import Record
from wirediff.analysis.diagnosis.outcome import JSON_FAMILIES
from wirediff.analysis.diagnosis.provider import GO_PLAIN, PRODUCT_HEADERS
from wirediff.profiles import signature_headers

__all__ = ["SENT", "EvidenceById", "evidence_key", "evidence_record", "packed"]

SENT = "(sent by wirediff)"
"""An evidence record's `replay_of`: a replay, a mirrored request or a probe's, not which."""

_REQUEST_VALUES = frozenset({"model", "previous_response_id"})
"""Request body keys whose values the rules read (of the others, only the names)."""


@cache
def _headers_read() -> frozenset[str]:
    """Name the response headers the rules and the provider read."""
    named = {"content-type", "location", "www-authenticate", "allow", "server", "x-powered-by"}
    return frozenset(named | {name for name, _ in PRODUCT_HEADERS} | signature_headers())


def evidence_record(rec: Record, ok: bool) -> Record:
    """Cut `rec` down to what the diagnosis reads.

    `ok` says whether the exchange succeeded, as `exchange_ok` does. Of a failing answer its
    body, text and events are kept whole, event times left out; of a successful one, what names
    its provider and how its stream ended. Of `replay_of`, whether wirediff sent it, not which
    original it replays (`SENT`), so that equal evidence stays one."""
    req = rec["request"]
    body = req.get("body")
    asked: dict[str, Any] = {
        "method": req.get("method"),
        "path": req.get("path"),
        "url": req.get("url"),
        "headers": [h for h in req.get("headers") or () if h[0].lower() == "upgrade"],
        "body": (
            {k: (v if k in _REQUEST_VALUES else None) for k, v in body.items()}
            if isinstance(body, dict)
            else None
            if body is None
            else 0
        ),
    }
    if req.get("forwarded_headers") is not None:
        asked["forwarded_headers"] = req["forwarded_headers"]
    out: dict[str, Any] = {
        "id": rec["id"],
        "label": rec.get("label"),
        "listener": rec.get("listener"),
        "request": asked,
        "response": None,
        "error": rec.get("error"),
        "tags": rec.get("tags"),
        "replay_of": None if rec.get("replay_of") is None else SENT,
    }
    resp = rec.get("response")
    if resp is None:
        return out  # type: ignore[return-value]
    read = _headers_read()
    answer: dict[str, Any] = {
        "status": resp.get("status"),
        "headers": [h for h in resp.get("headers") or () if h[0].lower() in read],
        "complete": resp.get("complete"),
        "websocket": resp.get("websocket"),
    }
    events = resp.get("events")
    unparsed = resp.get("body") is None and (rec.get("tags") or {}).get("family") in JSON_FAMILIES
    if not ok or unparsed:  # kept whole: what `unreadable_answer` reads of it too
        answer["body"], answer["text"] = resp.get("body"), resp.get("text")
        answer.update({k: resp[k] for k in ("b64", "truncated", "depth_limited") if k in resp})
    if not ok:
        if events is not None:
            answer["events"] = [{k: v for k, v in ev.items() if k != "t_ms"} for ev in events]
    else:
        text = resp.get("text")
        if not unparsed:
            answer["body"] = _named_body(resp.get("body"))
            answer["text"] = text if isinstance(text, str) and GO_PLAIN.match(text) else None
        if events is not None:
            answer["events"] = [_event_end(ev) for ev in events]
    out["response"] = answer
    return out  # type: ignore[return-value]


def _named_body(body: Any) -> Any:
    """Keep of a successful answer's body what names its provider, and whether it is an object.

    The marks are `system_fingerprint` and a body of `detail` alone."""
    if not isinstance(body, dict):
        return None if body is None else 0
    if body.get("system_fingerprint") == "fp_ollama":
        return {"system_fingerprint": "fp_ollama"}
    return {"detail": None} if set(body) == {"detail"} else {}


def _event_end(ev: Any) -> Any:
    """Keep of a successful stream's event what tells how the stream ended.

    That is its name, the `type` of its data, whether it is cut, and who sent it."""
    data = ev.get("data")
    if isinstance(data, dict):
        data = {"type": data["type"]} if "type" in data else {}
    elif data != "[DONE]":
        data = ""
    return {k: v for k, v in (*ev.items(), ("data", data)) if k != "t_ms"}


def evidence_key(record: Record) -> int:
    """Number an evidence record in 63 bits, equal for records that read the same, ids aside.

    The number is the same in every process."""
    content = {k: v for k, v in record.items() if k != "id"}
    try:
        text = orjson.dumps(content)
    except TypeError:  # an integer past 64 bits, a lone surrogate
        text = json.dumps(content, ensure_ascii=True, default=repr).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest()) >> 1


def packed(record: Record) -> bytes:
    """Pack an evidence record into bytes, which `EvidenceById` unpacks when asked.

    A record held as objects takes three to four times its text: at a million exchanges the
    evidence of their failing answers would be hundreds of MB. Pickle gives back any value
    as it was, where JSON would not: integers past 64 bits, NaN, lone surrogates."""
    return pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)


UNPACKED = 1 << 8
"""Evidence records `EvidenceById` keeps unpacked, until it starts over."""


class EvidenceById(Mapping[str, Record]):
    """Give the evidence record of an exchange by its id, with its `evidence_key` by `key`.

    The records of exchanges whose evidence was kept by key are made when asked for, that key's
    record, unpacked, with the exchange's id: a copy each, for a million failing exchanges,
    takes a GB."""

    def __init__(self, keys: dict[str, int], shared: Mapping[int, bytes]) -> None:
        self._keys = keys
        self._shared = shared
        self._own: dict[str, tuple[int, Record]] = {}
        self._unpacked: dict[int, Record] = {}

    def add(self, record: Record) -> None:
        """Keep the evidence of `record`, an exchange read again, under its id."""
        seen = evidence_record(record, ok=True)
        self._own[record["id"]] = (evidence_key(seen), seen)

    def key(self, rid: str) -> int:
        """Give the evidence key of the exchange `rid`."""
        own = self._own.get(rid)
        return own[0] if own is not None else self._keys[rid]

    def shared_key(self, rid: str) -> int | None:
        """Give the evidence key of the exchange `rid` where its record is that key's, else None.

        Exchanges given that key's record read exactly alike but for their ids; one read
        again and added has a record of its own."""
        return None if rid in self._own else self._keys.get(rid)

    def __getitem__(self, rid: str) -> Record:
        own = self._own.get(rid)
        if own is not None:
            return own[1]
        key = self._keys[rid]
        found = self._unpacked.get(key)
        if found is None:
            if len(self._unpacked) >= UNPACKED:
                self._unpacked.clear()
            found = self._unpacked[key] = pickle.loads(self._shared[key])
        return {**found, "id": rid}  # type: ignore[typeddict-item]

    def __iter__(self) -> Iterator[str]:
        yield from self._keys
        yield from (rid for rid in self._own if rid not in self._keys)

    def __len__(self) -> int:
        return len(self._keys) + sum(rid not in self._keys for rid in self._own)
