"""Load the probe's bundled data, and tell which features a captured request exercises.

The data are the features (`data/features.yaml`), the `wirediff/1` session of client traffic
they are taken from (`data/probe.jsonl`) and what each known client needs (`data/clients.yaml`);
`match` tells the features.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from wirediff._types import Record
from wirediff.record.store import iter_records
from wirediff.record.tags import route

__all__ = [
    "CLIENTS_FILE",
    "FEATURES_FILE",
    "SESSION_FILE",
    "Client",
    "Feature",
    "ProbeData",
    "features_of",
    "load_clients",
    "load_features",
    "load_probe",
    "matches",
    "needs_of",
]

DATA = "data"
"""The bundled data's folder inside this package."""
FEATURES_FILE, SESSION_FILE, CLIENTS_FILE = "features.yaml", "probe.jsonl", "clients.yaml"
_MISSING = object()


@dataclass(frozen=True)
class Feature:
    """Describe one row of the matrix: what it is, where its requests come from, what it checks."""

    id: str
    title: str
    match: Mapping[str, Any]
    expect: Mapping[str, Any]
    need: bool
    exchanges: tuple[str, ...] = ()
    """Ids of its requests in the bundled session, in the order they are sent."""
    client: str = ""
    """The client whose capture they come from."""
    sources: tuple[str, ...] = ()
    """Only findings of these sources count (the stream grammar: `stream-grammar`)."""
    bad_key: bool = False
    """Its requests carry a key the server must refuse, not the probe's."""
    take_all: bool = False
    prefer: tuple[str, ...] = ()

    @classmethod
    def from_yaml(cls, doc: Mapping[str, Any]) -> Feature:
        return cls(
            id=str(doc["id"]),
            title=str(doc["title"]),
            match=dict(doc.get("match") or {}),
            expect=dict(doc.get("expect") or {}),
            need=bool(doc.get("need")),
            exchanges=tuple(str(x) for x in doc.get("exchanges") or ()),
            client=str(doc.get("client") or ""),
            sources=tuple(str(x) for x in doc.get("sources") or ()),
            bad_key=bool(doc.get("bad_key")),
            take_all=bool(doc.get("all")),
            prefer=tuple(str(x) for x in doc.get("from") or ()),
        )


@dataclass(frozen=True)
class Client:
    """Name a known client and the features it needs, derived from its captures."""

    id: str
    name: str
    needs: tuple[str, ...]
    captured: str = ""
    """What its needs come from: the client, its version, the calls it made."""


@dataclass(frozen=True)
class ProbeData:
    features: tuple[Feature, ...]
    records: tuple[Record, ...]
    clients: tuple[Client, ...]
    by_id: Mapping[str, Record] = field(default_factory=dict)

    def feature(self, fid: str) -> Feature:
        for f in self.features:
            if f.id == fid:
                return f
        raise KeyError(fid)


def _data_text(name: str) -> str:
    return resources.files(__package__).joinpath(DATA, name).read_text(encoding="utf-8")


def load_features(text: str | None = None) -> tuple[Feature, ...]:
    doc = yaml.safe_load(text if text is not None else _data_text(FEATURES_FILE))
    return tuple(Feature.from_yaml(f) for f in doc["features"])


def load_clients(text: str | None = None) -> tuple[Client, ...]:
    doc = yaml.safe_load(text if text is not None else _data_text(CLIENTS_FILE))
    return tuple(
        Client(
            str(c["id"]), str(c["name"]), tuple(c.get("needs") or ()), str(c.get("captured") or "")
        )
        for c in doc["clients"]
    )


@cache
def load_probe() -> ProbeData:
    """Load the bundled probe: features, their session and the clients."""
    path = resources.files(__package__).joinpath(DATA, SESSION_FILE)
    with resources.as_file(path) as p:
        records = tuple(iter_records(p))
    by_id = {str(r["id"]): r for r in records}
    return ProbeData(load_features(), records, load_clients(), by_id)


# --- which features a request exercises -----------------------------------------------------


def _at(body: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(body, dict) or part not in body:
            return _MISSING
        body = body[part]
    return body


def _present(value: Any) -> bool:
    return value is not _MISSING and value is not None and value not in ([], {}, "")


def matches(match: Mapping[str, Any], record: Record) -> bool:
    """Tell whether a captured exchange is what `match` describes; see features.yaml."""
    req = record.get("request") or {}
    tags = record.get("tags") or {}
    body = req.get("body")
    method = str(req.get("method") or "").upper()
    path = str(req.get("path") or "").split("?", 1)[0]
    resp = record.get("response")
    checks: dict[str, Any] = {
        "method": lambda want: method == str(want).upper(),
        "endpoint": lambda want: route(path)[1] == want,
        "path": lambda want: path == want,
        "transport": lambda want: str(tags.get("transport") or "http") == want,
        "stream": lambda want: bool(isinstance(body, dict) and body.get("stream") is True) is want,
        "status": lambda want: resp is not None and resp.get("status") == want,
        "with": lambda want: all(_present(_at(body, p)) for p in want),
        "without": lambda want: not any(_present(_at(body, p)) for p in want),
        "equals": lambda want: all(_at(body, p) == v for p, v in want.items()),
        "input_has": lambda want: (
            isinstance(body, dict)
            and isinstance(body.get("input"), list)
            and any(isinstance(i, dict) and i.get("type") == want for i in body["input"])
        ),
    }
    for key, want in match.items():
        if key not in checks:
            raise ValueError(f"features.yaml: unknown match key {key!r}")
        if not checks[key](want):
            return False
    return True


def features_of(record: Record, features: Iterable[Feature]) -> list[str]:
    """Return the features a captured exchange exercises."""
    return [f.id for f in features if matches(f.match, record)]


def needs_of(records: Iterable[Record], features: Sequence[Feature]) -> list[str]:
    """Derive what a client needs from its captured traffic.

    That is every feature one of its requests exercises that clients need (`need: true`), in the
    features' order."""
    hit: set[str] = set()
    for rec in records:
        hit.update(features_of(rec, (f for f in features if f.need)))
    return [f.id for f in features if f.id in hit]
