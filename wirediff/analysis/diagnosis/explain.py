"""Diagnose why a chain of exchanges failed, with the evidence, the provider and the fix.

Each failing chain's exchanges are viewed by `view` and classified by `rules`; `provider` names
the provider and `remedies` fills in the prose, kept as data beside the profiles. The codes are a
contract: see `CODES`. There is one row per chain and code; a chain may carry several.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from wirediff._support import statuses_2xx
from wirediff._types import Record
from wirediff.analysis.diagnosis.chains import CHAIN_COLUMNS
from wirediff.analysis.diagnosis.evidence import EvidenceById
from wirediff.analysis.diagnosis.provider import Provider, identify
from wirediff.analysis.diagnosis.remedies import Facts, remedy, summary
from wirediff.analysis.diagnosis.rules import Finding, chain_findings, exchange_findings
from wirediff.analysis.diagnosis.subject import Served
from wirediff.analysis.diagnosis.view import ExchangeView, view

__all__ = [
    "BACKEND_SCAN",
    "CODES",
    "DIAGNOSIS_COLUMNS",
    "Backends",
    "answered_prefixes",
    "backend_key",
    "count_line",
    "diagnose_chain",
    "diagnose_chains",
    "diagnosis_frame",
    "format_chains",
    "models_listed",
    "served_by",
]

CODES = (
    "endpoint_not_implemented",
    "soft_error_200",
    "method_not_allowed",
    "redirect_method_change",
    "auth_missing",
    "auth_rejected",
    "auth_dropped_by_hop",
    "path_prefix",
    "model_not_found",
    "stream_not_honoured",
    "stream_truncated",
    "stream_error_event",
    "upstream_unreachable",
    "upstream_tls",
    "server_error",
    "request_rejected",
    "previous_response_not_found",
    "websocket_not_supported",
    "answer_unreadable",
    "capture_stopped",
)
"""The contract codes of DESIGN.md "Diagnosis codes", in its order; then two more.

`answer_unreadable`: a 2xx answer that must be JSON holds what its clients cannot read, so
a failing answer the contract's codes leave out gets one too. `capture_stopped`: the capture
stopped while the exchange was in flight, no fault of the server."""
BACKEND_SCAN = 50
"""Exchanges of a backend read for a mark of its provider when a chain carries none."""

DIAGNOSIS_COLUMNS = [
    "chain_id",
    "code",
    "exchange_ids",
    "label",
    "endpoint",
    "provider",
    "summary",
    "evidence",
    "remedy",
    "recovered",
    "title",
]
"""The columns of a chain's diagnosis: its code, where, the evidence and the remedy.

`recovered`: the chain ended in success all the same, a retry or fallback having worked
around it. `title`: the chain's one-line story."""


def served_by(exchanges: pd.DataFrame) -> Served:
    """Collect what each backend label showed it serves.

    That is the model ids a captured `GET /v1/models` listed, from the index's `models` as JSON,
    and the prefixes under which a call of a known family succeeded."""
    listed = exchanges.loc[exchanges["models"].notna(), ["label", "models"]]
    models: dict[str, set[str]] = {}
    for label, ids in zip(listed["label"].tolist(), listed["models"].tolist(), strict=True):
        models.setdefault(str(label), set()).update(json.loads(ids))
    return Served(models, answered_prefixes(exchanges))


def answered_prefixes(exchanges: pd.DataFrame) -> dict[str, set[str]]:
    """Collect the API prefixes under which each backend label answered a known family's call well.

    The columns read are `label`, `family`, `prefix`, `status` and `soft_error`."""
    ok = (
        statuses_2xx(exchanges["status"].astype("float64").to_numpy())
        & ~exchanges["soft_error"].fillna(False).astype(bool).to_numpy()
    )
    ok &= (exchanges["family"] != "other").to_numpy(dtype=bool)
    pairs = exchanges.loc[ok, ["label", "prefix"]].astype(str).drop_duplicates()
    out: dict[str, set[str]] = {}
    for label, prefix in zip(pairs["label"], pairs["prefix"], strict=True):
        out.setdefault(label, set()).add(prefix)
    return out


def models_listed(record: Record) -> set[str] | None:
    """Read the model ids a `/v1/models` answer lists; None when it lists none."""
    resp = record.get("response")
    body = resp["body"] if resp is not None else None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return {str(m["id"]) for m in data if isinstance(m, dict) and "id" in m}


def _merge(findings: list[Finding], order: list[str]) -> list[Finding]:
    by_code: dict[str, Finding] = {}
    for f in findings:
        if f.code not in by_code:
            by_code[f.code] = Finding(f.code, list(f.ids), list(f.evidence), dict(f.facts))
            continue
        m = by_code[f.code]
        m.ids.extend(i for i in f.ids if i not in m.ids)
        m.evidence.extend(e for e in f.evidence if e not in m.evidence)
    rank = {i: n for n, i in enumerate(order)}
    for m in by_code.values():
        m.ids.sort(key=rank.__getitem__)
    return [by_code[c] for c in CODES if c in by_code]


def backend_key(label: Any, listener: Any) -> tuple[str | None, str | None]:
    """Key a backend by its label and listener, each a string or None.

    A missing one reads as None from a record and as NaN from a frame, and both must name the
    same backend."""
    return (
        label if isinstance(label, str) else None,
        listener if isinstance(listener, str) else None,
    )


class Backends:
    """Name the provider of each backend from its first `BACKEND_SCAN` exchanges.

    This serves when a failing chain carries no mark of its provider. Each backend, by label and
    listener, is identified once, and its records are read when first needed through `read`,
    which returns the records at these rows."""

    def __init__(
        self, exchanges: pd.DataFrame, read: Callable[[Sequence[int]], Sequence[Record]]
    ) -> None:
        self.read = read
        heads = exchanges[["label", "listener"]].reset_index(drop=True)
        groups: dict[Any, Any] = heads.groupby(
            list(heads), dropna=False, sort=False, observed=True
        ).indices
        self.rows: dict[tuple[Any, Any], list[int]] = {}
        for (label, listener), at in groups.items():
            self.rows.setdefault(backend_key(label, listener), []).extend(
                at[:BACKEND_SCAN].tolist()
            )
        for key, rows in self.rows.items():  # a label that is no text is one with a missing one
            self.rows[key] = sorted(rows)[:BACKEND_SCAN]
        self.known: dict[tuple[Any, Any], Provider] = {}

    def provider(self, x: ExchangeView) -> Provider:
        key = backend_key(x.label, x.rec.get("listener"))
        if key not in self.known:
            others = (view(r) for r in self.read(self.rows.get(key, [])))
            self.known[key] = identify([], others)
        return self.known[key]


def _provider(xs: list[ExchangeView], backends: Backends | None) -> Provider:
    """Identify a chain's provider by its own marks first, then its backends', innermost first."""
    found = identify(xs)
    if found.known or backends is None:
        return found
    for x in reversed(xs):
        other = backends.provider(x)
        if other.known:
            return other
    return found


def diagnose_chain(
    chain: Mapping[str, Any],
    records_by_id: Mapping[str, Record],
    served: Served,
    backends: Backends | None = None,
) -> list[dict[str, Any]]:
    """Diagnose one chain, a `chain_rows` row by `CHAIN_COLUMNS`; a healthy chain gets no rows."""
    order: list[str] = list(chain["exchange_ids"])
    xs = {i: view(records_by_id[i]) for i in order}
    links = [(str(k), str(a), str(b)) for k, a, b in chain["links"]]
    found, explained = chain_findings(xs, order, links, str(chain["final_id"]))
    for i in order:
        if not xs[i].ok:
            drop = explained.get(i, set())
            found.extend(f for f in exchange_findings(xs[i], served) if f.code not in drop)
    if not found:
        return []
    provider = _provider([xs[i] for i in order], backends)
    rows = []
    for f in _merge(found, order):
        facts = Facts({**f.facts, "server": provider.display})
        rows.append(
            {
                "chain_id": chain["chain_id"],
                "code": f.code,
                "exchange_ids": f.ids,
                "label": chain["label"],
                "endpoint": xs[f.ids[0]].endpoint,
                "provider": provider.name,
                "summary": summary(f.code, facts),
                "evidence": f.evidence + [e for e in provider.evidence if e not in f.evidence],
                "remedy": remedy(f.code, provider.profile, facts),
                "recovered": bool(chain["ok"]),
                "title": chain["title"],
            }
        )
    return rows


def diagnose_chains(
    chains: Sequence[tuple[Any, ...]],
    evidence: EvidenceById,
    served: Served,
    backends: Backends,
) -> pd.DataFrame:
    """Diagnose failing chains, the rows of `chain_rows`, each distinct chain once.

    Chains whose exchanges read the same, with the same links, ending and title, get the same
    rows, their own ids put in. `evidence` gives an exchange's evidence key and record, by id."""
    done: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    # a list per column: a dict per row would be hundreds of bytes for each of a million rows
    columns: dict[str, list[Any]] = {c: [] for c in DIAGNOSIS_COLUMNS}
    for row in chains:
        chain = dict(zip(CHAIN_COLUMNS, row, strict=True))
        ids: list[str] = list(chain["exchange_ids"])
        at = {rid: n for n, rid in enumerate(ids)}
        key = (
            tuple(evidence.key(rid) for rid in ids),
            tuple((kind, at[a], at[b]) for kind, a, b in chain["links"]),
            at[chain["final_id"]],
            bool(chain["ok"]),
            chain["title"],
        )
        found = done.get(key)
        if found is None:
            records = {rid: evidence[rid] for rid in ids}
            found = done[key] = [
                {**r, "exchange_ids": [at[i] for i in r["exchange_ids"]]}
                for r in diagnose_chain(chain, records, served, backends)
            ]
        for r in found:
            own = {
                "chain_id": chain["chain_id"],
                "exchange_ids": [ids[n] for n in r["exchange_ids"]],
            }
            for c, values in columns.items():
                values.append(own[c] if c in own else r[c])
    return diagnosis_frame(columns)


def diagnosis_frame(columns: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """Frame diagnoses, given as a list per column of `DIAGNOSIS_COLUMNS`, as `diagnose` does.

    A column not given is empty."""
    return pd.DataFrame(
        {
            c: pd.Series(columns.get(c, []), dtype=bool if c == "recovered" else object)
            for c in DIAGNOSIS_COLUMNS
        }
    )


def count_line(diagnoses: int, chains: int, distinct: int | None = None) -> str:
    """Count diagnoses and chains in words, as in `1 diagnosis in 1 chain`.

    With `distinct`, it reads like `8 diagnoses in 5 chains, 2 distinct`."""
    line = f"{diagnoses} {'diagnosis' if diagnoses == 1 else 'diagnoses'} in {chains} "
    line += "chain" if chains == 1 else "chains"
    return line + (f", {distinct} distinct" if distinct is not None and distinct < chains else "")


def format_chains(df: pd.DataFrame) -> list[str]:
    """Write the terminal lines of `wirediff diagnose` for these chains, without its count."""
    lines: list[str] = []
    for chain_id, group in df.groupby("chain_id", sort=False):
        first = group.iloc[0]
        state = "recovered" if first["recovered"] else "failed"
        provider = first["provider"]
        who = f", provider {provider}" if isinstance(provider, str) and provider else ""
        lines.append(f"{chain_id} [{first['label']}] {state}{who}")
        lines.append(f"  {first['title']}")
        for row in group.to_dict("records"):
            lines.append(f"  {row['code']}: {row['summary']}")
            lines.extend(f"    · {e}" for e in row["evidence"])
            lines.append(f"    fix: {row['remedy']}")
        lines.append("")
    return lines
