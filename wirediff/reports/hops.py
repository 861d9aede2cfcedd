"""Draw each distinct failing chain once as hops, with every diagnosis it got.

A chain's diagnoses are listed together, since one chain can be both `endpoint_not_implemented`
and `soft_error_200`. Chains that read the same, with the same backend, endpoint, diagnoses, hops
and evidence, ids aside, fold into one drawing with a count and the list of all of them. A
chain's exchanges are grouped by the listener that captured them, so a chain seen on two
listeners, client → gateway and gateway → upstream, draws as two hops. Each hop is named by the
label of its records and the upstream host, never by the proxy's own port, which is often
ephemeral.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pandas as pd

from wirediff._support import error_kind
from wirediff._types import Record
from wirediff.analysis.comparison.observe import MEMO_LIMIT
from wirediff.analysis.comparison.pairing import text_codes
from wirediff.analysis.comparison.sameness import told_alike
from wirediff.analysis.diagnosis.evidence import EvidenceById
from wirediff.analysis.diagnosis.explain import CODES
from wirediff.reports.formatters import SEQUENCES, anchor, missing, path_only, redact, status_class

__all__ = [
    "MAX_CHAIN_GROUPS",
    "MAX_LISTED",
    "NO_ENDPOINT",
    "ChainGroup",
    "chain_groups",
]

NO_ENDPOINT = "(unrouted)"
MAX_CHAIN_GROUPS = 300
"""Distinct failing chains drawn; the rest are counted."""
MAX_LISTED = 100
"""Chains named under one drawing's "show all"; summary.json lists every diagnosis."""
ROW_BLOCK = 1 << 14
"""Diagnoses read into dicts at a time."""


@dataclass(slots=True)
class Step:
    """Show one exchange on a hop: what was asked and what came back."""

    method: str
    path: str
    status: str
    css: str
    auth: str


@dataclass(slots=True)
class Hop:
    """Draw one hop, `source → target`, captured on one listener."""

    source: str
    target: str
    host: str
    """The upstream host, when it says more than `target`."""
    role: str
    via: str
    listener: str
    steps: list[Step]


@dataclass(slots=True)
class Diagnosis:
    code: str
    provider: str
    summary: str
    remedy: str


@dataclass(slots=True)
class ChainRef:
    chain_id: str
    title: str


@dataclass(slots=True)
class ChainGroup:
    """Group the chains that read the same; the first is drawn, all are named."""

    anchor: str
    label: str
    endpoint: str
    diagnoses: list[Diagnosis]
    title: str
    evidence: list[str]
    hops: list[Hop]
    count: int = 0
    recovered: int = 0
    chains: list[ChainRef] = field(default_factory=list)
    shown: bool = True

    @property
    def code(self) -> str:
        """File the chain under its first diagnosis's code, in `CODES` order."""
        return self.diagnoses[0].code

    @property
    def codes(self) -> list[str]:
        return [d.code for d in self.diagnoses]

    @property
    def provider(self) -> str:
        return self.diagnoses[0].provider


def listener_target(listener: object, url: object) -> str:
    """Name who a listener forwards to: the reverse-mode upstream, else the request's host."""
    spec = "" if missing(listener) else str(listener)
    for prefix in ("reverse:", "replay:"):
        if spec.startswith(prefix):
            spec = re.sub(r"@\d+$", "", spec[len(prefix) :])
            return urlsplit(spec).netloc or spec
    return urlsplit("" if missing(url) else str(url)).netloc or "upstream"


def listener_kind(listener: str) -> str:
    """Say in words how a hop was recorded; the spec itself, ports and all, is its tooltip."""
    if listener.startswith("reverse:"):
        return "captured, reverse proxy"
    if listener.startswith("replay:"):
        return "replayed by wirediff"
    if listener.startswith(("regular", "upstream:")):
        return "captured, forward proxy"
    return "captured" if listener not in ("", "capture") else "imported"


def _auth(rec: Record) -> str:
    auth = (rec.get("tags") or {}).get("auth")
    if not isinstance(auth, dict) or not auth.get("header"):
        return "no credentials"
    scheme = f"{auth['scheme']} " if auth.get("scheme") else ""
    return redact(f"{auth['header']}: {scheme}{auth.get('fingerprint') or ''}".strip())


def _step(rec: Record) -> Step:
    req, resp = rec.get("request") or {}, rec.get("response")
    status = str(resp.get("status")) if resp else str(error_kind(rec) or "no response")
    return Step(
        str(req.get("method") or ""),
        path_only(req.get("path")),
        status,
        status_class(resp.get("status") if resp else None),
        _auth(rec),
    )


def hops(ids: Sequence[str], records_by_id: Mapping[str, Record]) -> list[Hop]:
    """Draw a chain as hops, one per listener: client → gateway, if any, → upstream."""
    recs = sorted(
        (records_by_id[i] for i in ids if i in records_by_id), key=lambda r: r.get("started") or 0.0
    )
    by_listener: dict[str, list[Record]] = {}
    for rec in recs:
        by_listener.setdefault(str(rec.get("listener") or "capture"), []).append(rec)
    out: list[Hop] = []
    source = "client"
    for n, (listener, members) in enumerate(by_listener.items()):
        host = redact(listener_target(listener, (members[0].get("request") or {}).get("url")))
        target = redact(str(members[0].get("label") or "")) or host
        role = "upstream" if n == len(by_listener) - 1 else "gateway"
        out.append(
            Hop(
                source,
                target,
                "" if host == target else host,
                role,
                listener_kind(listener),
                redact(listener),
                [_step(rec) for rec in members],
            )
        )
        source = target
    return out


def _listish(value: Any) -> Iterable[Any]:
    """Give a list cell's items; a lone value's as a list of one."""
    if isinstance(value, SEQUENCES):
        return value  # type: ignore[no-any-return]
    return [] if missing(value) else [value]


@dataclass(slots=True)
class _Chain:
    """Gather one chain's diagnoses from its rows, as the analysis wrote them."""

    label: str
    endpoint: str
    title: str
    exchange_ids: list[str]
    recovered: bool
    diagnoses: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """Each code's provider, summary and remedy."""
    evidence: dict[str, None] = field(default_factory=dict)


_TEXTS = ("chain_id", "label", "endpoint", "title", "code", "provider", "summary", "remedy")
_AS_IS = ("exchange_ids", "recovered", "evidence")
"""The columns `_chains` reads, in the order it unpacks them: texts, then values as they are."""


def _columns(frame: pd.DataFrame) -> Iterator[tuple[list[Any], ...]]:
    """Yield the columns of `_TEXTS` and `_AS_IS`, a block of rows at a time.

    The texts are text, "" where missing; a dict per row would be a kilobyte."""
    for lo in range(0, len(frame), ROW_BLOCK):
        block = frame.iloc[lo : lo + ROW_BLOCK]
        yield (
            *(_texts(block[name]) for name in _TEXTS),
            *(block[name].tolist() for name in _AS_IS),
        )


def _texts(column: pd.Series) -> list[str]:
    """Give a column's values as `text` does, each distinct value made text once."""
    codes, texts = text_codes(column)
    return texts[codes].tolist()  # type: ignore[no-any-return]


def _chains(diagnoses: pd.DataFrame) -> Iterator[tuple[str, _Chain]]:
    """Gather each chain's rows, one chain at a time, in the order chains first come.

    `diagnose_chains` writes a chain's rows together; rows of a chain apart are put together
    first. A chain is let go once gathered: held all at once, the 215k failing chains of the
    bench's million exchanges took 190 MB."""
    codes, _ = text_codes(diagnoses["chain_id"])
    if len(codes) and (np.diff(codes) < 0).any():
        diagnoses = diagnoses.iloc[np.argsort(codes, kind="stable")]
    chain_id, c = "", None
    for columns in _columns(diagnoses):
        for rid, label, endpoint, title, code, provider, summary, remedy, ids, ok, seen in zip(
            *columns, strict=True
        ):
            if c is None or rid != chain_id:
                if c is not None:
                    yield chain_id, c
                chain_id = rid
                c = _Chain(
                    label,
                    endpoint or NO_ENDPOINT,
                    title,
                    [str(i) for i in _listish(ids)],
                    ok is True or ok is np.True_,
                )
            c.diagnoses.setdefault(code, (provider or "unknown", summary, remedy))
            for line in _listish(seen):
                c.evidence.setdefault(str(line), None)
    if c is not None:
        yield chain_id, c


def _shape(ids: Sequence[str], records_by_id: Mapping[str, Record]) -> tuple[Any, ...]:
    """Read what a chain's drawing is made of from its records, cheaply, without drawing it."""
    out = []
    for i in ids:
        rec: Mapping[str, Any] = records_by_id.get(i) or {}  # a missing one: nothing to draw
        req, resp = rec.get("request") or {}, rec.get("response") or {}
        auth = (rec.get("tags") or {}).get("auth") or {}
        out.append(
            (
                rec.get("listener"),
                rec.get("label"),
                req.get("method"),
                path_only(req.get("path")),
                resp.get("status") or (rec.get("error") or {}).get("kind"),
                tuple(sorted(auth.items())) if isinstance(auth, dict) else auth,
            )
        )
    return tuple(sorted(out, key=repr))


_ORDER = {c: i for i, c in enumerate(CODES)}
"""Each diagnosis code's place, worst first."""


def _said(c: _Chain) -> tuple[tuple[str, str, str, str], ...]:
    """Give a chain's diagnoses as `(code, provider, summary, remedy)`, worst code first."""
    codes = sorted(c.diagnoses, key=lambda code: (_ORDER.get(code, len(_ORDER)), code))
    return tuple((code, *c.diagnoses[code]) for code in codes)


def _read_alike(c: _Chain, evidence: EvidenceById | None) -> tuple[Any, ...] | None:
    """Key a chain by what its group's key is made of, its records by their evidence keys.

    Most chains repeat another's key, so their group's key, which reads each record and takes
    the ids out of every text, is made once. None unless each record is its key's own."""
    if evidence is None:
        return None
    records = tuple(evidence.shared_key(i) for i in c.exchange_ids)
    if None in records:
        return None
    return (
        c.label,
        c.endpoint,
        tuple(c.diagnoses.items()),
        records,
        tuple(c.evidence),
        c.recovered,
    )


def chain_groups(diagnoses: pd.DataFrame, records_by_id: Mapping[str, Record]) -> list[ChainGroup]:
    """Group each distinct failing chain once, with its count and the chains it stands for.

    The chains come from `diagnoses`. Worst code first, then the most frequent; those past
    `MAX_CHAIN_GROUPS` are not drawn."""
    if diagnoses.empty:
        return []
    groups: dict[tuple[Any, ...], ChainGroup] = {}
    keys: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    evidence = records_by_id if isinstance(records_by_id, EvidenceById) else None
    for chain_id, c in _chains(diagnoses):
        read = _read_alike(c, evidence)
        key = keys.get(read) if read is not None else None
        said = None
        if key is None:
            said = _said(c)
            key = (
                c.label,
                c.endpoint,
                tuple(
                    (code, provider, told_alike(summary), remedy)
                    for code, provider, summary, remedy in said
                ),
                _shape(c.exchange_ids, records_by_id),
                tuple(told_alike(e) for e in c.evidence),
                c.recovered,
            )
            if read is not None:
                if len(keys) >= MEMO_LIMIT:  # chains that share no key: memory, not time
                    keys.clear()
                keys[read] = key
        g = groups.get(key)
        if g is None:
            said = said or _said(c)
            g = groups[key] = ChainGroup(
                anchor("c", *(code for code, *_ in said), c.label, c.endpoint, repr(key)),
                c.label,
                c.endpoint,
                [
                    Diagnosis(code, p, redact(summary), redact(remedy))
                    for code, p, summary, remedy in said
                ],
                redact(c.title),
                [redact(e) for e in c.evidence],
                hops(c.exchange_ids, records_by_id),
            )
        g.count += 1
        g.recovered += c.recovered
        if len(g.chains) < MAX_LISTED:
            g.chains.append(ChainRef(chain_id, redact(c.title)))
    out = sorted(
        groups.values(),
        key=lambda g: (_ORDER.get(g.code, len(_ORDER)), -g.count, g.label, g.endpoint),
    )
    for g in out[MAX_CHAIN_GROUPS:]:
        g.shown = False
    return out
