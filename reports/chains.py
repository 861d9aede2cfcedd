"""Failing chains: diagnoses folded by what they say, their first examples drawn as hops.

A chain's exchanges are grouped by the listener that captured them, so a chain seen on two
listeners (client → gateway, gateway → upstream) draws as two hops.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pandas as pd

from wirediff._types import Record
from wirediff.analysis.diagnosis.diagnose import CODES
from wirediff.reports.formatters import anchor, missing, path_only, redact, status_class

__all__ = ["MAX_CHAIN_GROUPS", "NO_ENDPOINT", "ChainGroup", "chain_groups"]

NO_ENDPOINT = "(unrouted)"
MAX_CHAIN_GROUPS = 300
"""Kinds of failing chain drawn; the rest are counted."""


@dataclass(slots=True)
class Step:
    """One exchange on a hop: what was asked and what came back."""

    method: str
    path: str
    status: str
    css: str
    auth: str


@dataclass(slots=True)
class Hop:
    """`source → target`, captured on one listener."""

    source: str
    target: str
    role: str
    listener: str
    steps: list[Step]


@dataclass(slots=True)
class ChainExample:
    chain_id: str
    title: str
    evidence: list[str]
    hops: list[Hop]
    recovered: bool


@dataclass(slots=True)
class ChainGroup:
    """Diagnoses with the same code, backend, endpoint, provider, summary and remedy."""

    anchor: str
    code: str
    label: str
    endpoint: str
    provider: str
    summary: str
    remedy: str
    count: int
    recovered: int
    examples: list[ChainExample]
    shown: bool = True


def listener_target(listener: object, url: object) -> str:
    """Who a listener forwards to: the reverse-mode upstream, else the request's host."""
    spec = "" if missing(listener) else str(listener)
    if spec.startswith("reverse:"):
        spec = re.sub(r"@\d+$", "", spec[len("reverse:") :])
        return urlsplit(spec).netloc or spec
    return urlsplit("" if missing(url) else str(url)).netloc or "upstream"


def _auth(rec: Record) -> str:
    auth = (rec.get("tags") or {}).get("auth")
    if not isinstance(auth, dict) or not auth.get("header"):
        return "no credentials"
    scheme = f"{auth['scheme']} " if auth.get("scheme") else ""
    return redact(f"{auth['header']}: {scheme}{auth.get('fingerprint') or ''}".strip())


def hops(ids: Sequence[str], records_by_id: Mapping[str, Record]) -> list[Hop]:
    """A chain drawn as hops: client → (gateway →) upstream, one hop per listener."""
    recs = sorted(
        (records_by_id[i] for i in ids if i in records_by_id), key=lambda r: r.get("started") or 0.0
    )
    by_listener: dict[str, list[Record]] = {}
    for rec in recs:
        by_listener.setdefault(str(rec.get("listener") or "capture"), []).append(rec)
    out: list[Hop] = []
    source = "client"
    for n, (listener, members) in enumerate(by_listener.items()):
        target = listener_target(listener, (members[0].get("request") or {}).get("url"))
        steps = []
        for rec in members:
            req, resp = rec.get("request") or {}, rec.get("response")
            if resp:
                status = str(resp.get("status"))
            else:
                status = str((rec.get("error") or {}).get("kind") or "no response")
            steps.append(
                Step(
                    str(req.get("method") or ""),
                    path_only(req.get("path")),
                    status,
                    status_class(resp.get("status") if resp else None),
                    _auth(rec),
                )
            )
        role = "upstream" if n == len(by_listener) - 1 else "gateway"
        out.append(Hop(source, redact(target), role, redact(listener), steps))
        source = redact(target)
    return out


def _listish(value: Any) -> list[Any]:
    if isinstance(value, list | tuple | np.ndarray):
        return list(value)
    return [] if missing(value) else [value]


def _text(value: Any) -> str:
    return "" if missing(value) else str(value)


def chain_groups(
    diagnoses: pd.DataFrame, records_by_id: Mapping[str, Record], max_examples: int
) -> list[ChainGroup]:
    """Diagnoses folded by what they say; the first examples drawn as hops."""
    if diagnoses.empty:
        return []
    groups: dict[tuple[str, ...], ChainGroup] = {}
    for row in diagnoses.to_dict("records"):
        key = tuple(
            _text(row.get(c))
            for c in ("code", "label", "endpoint", "provider", "summary", "remedy")
        )
        g = groups.get(key)
        if g is None:
            code, label, endpoint, provider, summary, remedy = key
            g = groups[key] = ChainGroup(
                anchor("c", *key),
                code,
                label,
                endpoint or NO_ENDPOINT,
                provider or "unknown",
                redact(summary),
                redact(remedy),
                0,
                0,
                [],
            )
        g.count += 1
        recovered = row.get("recovered") is True or row.get("recovered") is np.True_
        g.recovered += recovered
        if len(g.examples) < max_examples:
            ids = [str(i) for i in _listish(row.get("exchange_ids"))]
            g.examples.append(
                ChainExample(
                    _text(row.get("chain_id")),
                    redact(_text(row.get("title"))),
                    [redact(e) for e in _listish(row.get("evidence"))],
                    hops(ids, records_by_id),
                    recovered,
                )
            )
    order = {c: i for i, c in enumerate(CODES)}
    out = sorted(groups.values(), key=lambda g: (order.get(g.code, len(order)), -g.count))
    for g in out[MAX_CHAIN_GROUPS:]:
        g.shown = False
    return out
