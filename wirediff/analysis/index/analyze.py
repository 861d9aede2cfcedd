"""The analysis of the index: pairs, noise, divergences and conformance rows, and the
diagnoses of failing chains.

Every check runs once per distinct reading of an answer (conformance) or per distinct
pair of readings and noise (divergences, their severities, the pair's client rows), and
per distinct failing chain (diagnoses); the rows are fanned back to the exchanges and
pairs that share them. A finding is a row of `Analysis.findings` (its exchange, its pair,
its template), in the order a report lists them; `Analysis.divergences` and
`Analysis.conformance` write them out in full (`DIVERGENCE_COLUMNS`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from wirediff._support import STOPPED_IN_FLIGHT, paused_gc
from wirediff._types import Record
from wirediff.analysis.comparison.assumed import assumed_note
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS, FINDING_COLUMNS
from wirediff.analysis.comparison.kinds import SEVERITIES, severity_rank
from wirediff.analysis.comparison.noise import glob_regex, ignored, pair_noise
from wirediff.analysis.comparison.pairing import Baseline, pair_exchanges, text
from wirediff.analysis.comparison.reading import Reading, pair_findings
from wirediff.analysis.comparison.sameness import without_ids
from wirediff.analysis.comparison.verdicts import (
    RANKS,
    exchange_outcomes,
    roles_of,
    verdict_cells,
    verdict_frame,
)
from wirediff.analysis.comparison.verdicts import Cells as VerdictCells
from wirediff.analysis.diagnosis.chains import chain_rows
from wirediff.analysis.diagnosis.evidence import evidence_key, evidence_record
from wirediff.analysis.diagnosis.explain import (
    Backends,
    diagnose_chains,
    diagnosis_frame,
    served_by,
)
from wirediff.analysis.index.kept import kept_rows
from wirediff.analysis.index.row import Reader, index_frame
from wirediff.record.lines import BATCH_LINES

__all__ = [
    "Analysis",
    "Diagnosed",
    "GateCounts",
    "Index",
    "analyse",
    "analyze",
    "diagnose",
    "diagnose_index",
]

GateCounts = dict[tuple[str, str, str], tuple[int, frozenset[str]]]
"""Per (label, family, transport): the worst severity rank of its findings, and their kinds."""
DIVERGENCE, CLIENT, CONFORMANCE = 0, 1, 2
"""A finding's group: a pair's divergence, a pair's `client` row, an exchange's own row."""


@dataclass
class Index:
    """The captures' exchanges, one row each (`INDEX_COLUMNS`, rows numbered from 0 in
    load order), what the checks made of their answers by reading, the evidence of the
    failing ones, and how to read a few records again (`read`: the records at rows)."""

    rows: pd.DataFrame
    readings: dict[int, Reading]
    evidence: dict[int, Record]
    read: Callable[[Sequence[int]], list[Record]]

    @classmethod
    def of(cls, records: Sequence[Record]) -> Index:
        """The index of records held in memory."""
        reader = Reader()
        rows: list[tuple[Any, ...]] = []
        with paused_gc():
            for start in range(0, len(records), BATCH_LINES):
                rows += reader.rows(records[start : start + BATCH_LINES])
        readings, evidence = reader.take()
        frame = index_frame(rows)
        at = kept_rows(frame)
        kept = [records[i] for i in at.tolist()]

        def read(at_rows: Sequence[int]) -> list[Record]:
            return [kept[i] for i in at_rows]

        return cls(frame.iloc[at].reset_index(drop=True), readings, evidence, read)

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class Analysis:
    """The analysed captures: their pairs, and every finding, one row each in order
    (`row`: the exchange it is about; `pair`: its pair, -1 for an exchange's own;
    `template`: its values, a row of `templates`; `group`: `DIVERGENCE`, `CLIENT` or
    `CONFORMANCE`)."""

    index: Index
    baseline: Baseline
    pairs: pd.DataFrame
    """`c`, `b` (the rows of candidate and baseline), `pairing`, `place`, `sent`."""
    unmatched: pd.DataFrame
    findings: pd.DataFrame
    templates: pd.DataFrame
    """`FINDING_COLUMNS`, one row per distinct finding."""

    @property
    def exchanges(self) -> pd.DataFrame:
        return self.index.rows

    @functools.cached_property
    def divergences(self) -> pd.DataFrame:
        """The pairs' findings (`DIVERGENCE_COLUMNS`): divergences, then `client` rows."""
        return self.frame(self.findings["group"].to_numpy() != CONFORMANCE)

    @functools.cached_property
    def conformance(self) -> pd.DataFrame:
        """The exchanges' own findings (`DIVERGENCE_COLUMNS`)."""
        return self.frame(self.findings["group"].to_numpy() == CONFORMANCE)

    def frame(self, which: np.ndarray | None = None) -> pd.DataFrame:
        """These findings written out in full (`DIVERGENCE_COLUMNS`; all by default)."""
        found = self.findings if which is None else self.findings[which]
        rows = self.index.rows
        pair = found["pair"].to_numpy()
        own = pair < 0
        row = found["row"].to_numpy()
        base = (
            np.where(own, row, self.pairs["b"].to_numpy()[np.maximum(pair, 0)])
            if len(self.pairs)
            else row
        )
        ids, labels = rows["id"].to_numpy(dtype=object), rows["label"].to_numpy(dtype=object)
        out = pd.DataFrame(
            {
                "pair_id": ids[row],
                "label": labels[row],
                "baseline_label": np.where(own, "", labels[base]),
                "baseline_id": np.where(own, "", ids[base]),
                "candidate_id": ids[row],
                "family": rows["family"].to_numpy(dtype=object)[base],
                "endpoint": rows["endpoint"].to_numpy(dtype=object)[base],
            }
        )
        values = self.templates.iloc[found["template"].to_numpy()].reset_index(drop=True)
        return pd.concat([out, values], axis=1)[DIVERGENCE_COLUMNS]

    @functools.cached_property
    def worst(self) -> np.ndarray:
        """Per exchange, the least severity rank of its findings (-1: none)."""
        out = np.full(len(self.index), len(SEVERITIES), dtype=np.int64)
        ranks = self.templates["severity"].map(RANKS).fillna(len(SEVERITIES)).astype(int)
        np.minimum.at(
            out,
            self.findings["row"].to_numpy(),
            ranks.to_numpy()[self.findings["template"].to_numpy()],
        )
        return np.where(out < len(SEVERITIES), out, -1)

    def answers(self, name: str) -> np.ndarray:
        """Per exchange, a field of its answer's reading."""
        readings = self.index.readings
        keys = self.index.rows["reading"]
        codes, uniques = pd.factorize(keys)
        values = np.empty(len(uniques), dtype=object)  # tuples stay whole, not a 2-d array
        values[:] = [getattr(readings[k], name) for k in uniques.tolist()]
        return values[codes]

    @functools.cached_property
    def outcomes(self) -> np.ndarray:
        """Per exchange: `exchange_outcomes`."""
        rows = self.index.rows
        frame = rows[["error_kind", "status", "soft_error"]].assign(
            route_failure=self.answers("route_failure").astype(bool)
        )
        return exchange_outcomes(frame, self.worst)

    def roles(self) -> dict[str, str]:
        """Each label's role (`roles_of`)."""
        rows = self.index.rows
        labels = set(text(rows["label"]).unique().tolist())
        return roles_of(labels, *self.pair_labels())

    def pair_labels(self) -> tuple[set[str], set[str]]:
        """The labels of the pairs' baselines, and of their candidates."""
        labels = self.index.rows["label"]
        base = labels.iloc[self.pairs["b"].to_numpy()].dropna().astype(str)
        cand = labels.iloc[self.pairs["c"].to_numpy()].dropna().astype(str)
        return set(base), set(cand)

    def cells(
        self,
        by: Sequence[str] = ("family", "transport"),
        *,
        endpoint: str = "(none)",
        said: Callable[[str], str] | None = None,
    ) -> VerdictCells:
        """The verdict cells (`verdict_cells`) per label and `by`; `endpoint`: a missing
        endpoint's name; `said`: how a finding's message and path read (as they are, by
        default)."""
        rows = self.index.rows
        ok = self.outcomes != "unsupported"
        ok &= self.outcomes != "skipped"
        base_ok = np.zeros(len(rows), dtype=bool)
        b = self.pairs["b"].to_numpy()
        base_ok[self.pairs["c"].to_numpy()] = ok[b]
        exchanges = pd.DataFrame(
            {
                "label": text(rows["label"]),
                "family": rows["family"].astype("str").fillna("other"),
                "transport": rows["transport"].astype("str").fillna("http"),
                "method": text(rows["method"]),
                "endpoint": rows["endpoint"].astype("str").fillna(endpoint),
                "status": rows["status"],
                "soft_error": rows["soft_error"],
                "outcome": self.outcomes,
                "answered": self.answers("answered"),
                "not_implemented": self.answers("not_implemented"),
                "answer_status": self.answers("status"),
                "original_ok": base_ok,
            }
        )
        return verdict_cells(exchanges, self.cell_findings(said), by)

    def cell_findings(self, said: Callable[[str], str] | None = None) -> pd.DataFrame:
        """The findings as verdict cells read them: `row`, `severity`, `kind`, `path`,
        `evidence`, `text` (the evidence, else the message, ids left out, with its
        `assumed_note`)."""
        t = self.templates
        path = t["path"] if said is None else t["path"].map(said)
        message = t["message"] if said is None else t["message"].map(said)
        words = [
            without_ids(str(w))
            for w in np.where(t["evidence"] != "", t["evidence"], message).tolist()
        ]
        rows = self.findings["row"].to_numpy()
        template = self.findings["template"].to_numpy()
        standin = self.answers("standin")[rows]
        pairs = pd.DataFrame({"t": template, "s": standin})
        codes, uniques = pd.factorize(pd.MultiIndex.from_frame(pairs))
        noted = np.array(
            [
                words[tk] + assumed_note(str(sk), str(path.iat[tk]), words[tk])
                for tk, sk in uniques.tolist()
            ],
            dtype=object,
        )
        return pd.DataFrame(
            {
                "row": rows,
                "severity": t["severity"].to_numpy()[template],
                "kind": t["kind"].to_numpy()[template],
                "path": path.to_numpy()[template],
                "evidence": t["evidence"].to_numpy()[template],
                "text": noted[codes],
            }
        )

    def gate(self) -> GateCounts:
        """What `wirediff check` gates on: per label, family and transport of the exchange
        a finding is about, its worst severity rank and the kinds found; none about an
        exchange the capture's stop cut."""
        rows, t = self.index.rows, self.templates
        at, template = self.findings["row"].to_numpy(), self.findings["template"].to_numpy()
        judged = rows["error_kind"].to_numpy(dtype=object)[at] != STOPPED_IN_FLIGHT
        at, template = at[judged], template[judged]
        frame = pd.DataFrame(
            {
                "label": text(rows["label"]).to_numpy()[at],
                "family": rows["family"].astype("str").fillna("other").to_numpy()[at],
                "transport": rows["transport"].astype("str").fillna("http").to_numpy()[at],
                "kind": t["kind"].to_numpy()[template],
                "rank": t["severity"].map(severity_rank).to_numpy()[template],
            }
        )
        out: GateCounts = {}
        keys = ["label", "family", "transport"]
        for (label, family, transport), cell in frame.groupby(keys, sort=False):
            key = (str(label), str(family), str(transport))
            out[key] = (int(cell["rank"].min()), frozenset(cell["kind"].tolist()))
        return out

    @functools.cached_property
    def verdicts(self) -> pd.DataFrame:
        """One drop-in verdict per label, family and transport, baseline first."""
        return verdict_frame(self.cells(), self.roles())


def analyse(index: Index, *, ignore: Sequence[str] = (), baseline: str | None = None) -> Analysis:
    """Pair, diff, validate and judge the exchanges of an index. `ignore`: path patterns
    left out of the divergences and the conformance rows alike; `baseline`: the label
    independent captures are compared with (`pair_exchanges`)."""
    rows = index.rows
    pairing = pair_exchanges(rows, baseline=baseline)
    pairs = pairing.pairs
    # a replay step left unsent, or either side cut by the capture's stop, is not compared
    said = ~np.isin(rows["error_kind"].to_numpy(dtype=object), ["skipped", STOPPED_IN_FLIGHT])
    pairs["sent"] = said[pairs["c"].to_numpy()] & said[pairs["b"].to_numpy()]
    templates = _Templates(glob_regex(ignore))
    found = [
        _pair_findings(index, pairs, templates),
        _own_findings(index, templates),
    ]
    findings = pd.concat([f for f in found if len(f)] or found[:1], ignore_index=True)
    order = np.lexsort(
        tuple(findings[c].to_numpy() for c in ("ordinal", "second", "first", "group"))
    )
    findings = findings.iloc[order][["row", "pair", "template", "group"]].reset_index(drop=True)
    return Analysis(index, pairing.baseline, pairs, pairing.unmatched, findings, templates.frame())


class _Templates:
    """Distinct finding rows, numbered; those at an ignored path left out (None)."""

    def __init__(self, ignore: Any) -> None:
        self.ignore = ignore
        self.numbers: dict[tuple[str, ...], int | None] = {}
        self.rows: list[tuple[str, ...]] = []

    def numbered(self, found: Sequence[tuple[str, ...]]) -> list[int]:
        out = []
        for values in found:
            number = self.numbers.get(values, -1)
            if number == -1:
                kept = not ignored(pd.Series([values[1]]), self.ignore)[0]
                number = self.numbers[values] = len(self.rows) if kept else None
                if kept:
                    self.rows.append(values)
            if number is not None:
                out.append(number)
        return out

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame.from_records(self.rows, columns=FINDING_COLUMNS).astype(object)


_FOUND = ["row", "pair", "template", "group", "first", "second", "ordinal"]


def _fanned(codes: np.ndarray, lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, ...]:
    """For items with these key codes, one entry per template of their key's list: the
    item, the template and its place in the list."""
    lengths = np.array([len(x) for x in lists], dtype=np.int64)
    flat = np.array([t for x in lists for t in x], dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    n = lengths[codes]
    item = np.repeat(np.arange(len(codes)), n)
    ordinal = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    return item, flat[np.repeat(starts[codes], n) + ordinal], ordinal


def _pair_findings(index: Index, pairs: pd.DataFrame, templates: _Templates) -> pd.DataFrame:
    """The findings of the pairs whose candidate was sent, by distinct pair of readings
    and noise: divergences in the order of each original's first pair, then `client`
    rows in the pairs' order."""
    sent = np.flatnonzero(pairs["sent"].to_numpy())
    if not len(sent):
        return pd.DataFrame(columns=_FOUND, dtype=np.int64)
    rows = index.rows
    c, b = pairs["c"].to_numpy()[sent], pairs["b"].to_numpy()[sent]
    reading = rows["reading"].to_numpy()
    part = pd.DataFrame(
        {
            "b": reading[b],
            "c": reading[c],
            "bid": b,
            "label": text(rows["label"]).to_numpy()[c],
            "baseline_label": text(rows["label"]).to_numpy()[b],
            "request": rows["request_digest"].to_numpy()[b],
        }
    )
    observed = {k: r.observed for k, r in index.readings.items()}
    noise, sets = pair_noise(part, observed)
    keyed = pd.MultiIndex.from_arrays([part["b"], part["c"], noise])
    codes, uniques = pd.factorize(keyed)
    divergences, clients = [], []
    for bk, ck, n in uniques.tolist():
        found, said = pair_findings(index.readings[bk], index.readings[ck], sets[n])
        divergences.append(templates.numbered(found))
        clients.append(templates.numbered(said))
    place = pairs["place"].to_numpy()[sent]
    first = pd.Series(place).groupby(b).transform("min").to_numpy()
    out = []
    for group, lists in ((DIVERGENCE, divergences), (CLIENT, clients)):
        item, template, ordinal = _fanned(codes, lists)
        out.append(
            pd.DataFrame(
                {
                    "row": c[item],
                    "pair": sent[item],
                    "template": template,
                    "group": group,
                    "first": first[item] if group == DIVERGENCE else place[item],
                    "second": place[item] if group == DIVERGENCE else 0,
                    "ordinal": ordinal,
                }
            )
        )
    return pd.concat(out, ignore_index=True)


def _own_findings(index: Index, templates: _Templates) -> pd.DataFrame:
    """Each exchange's conformance and `client` rows, by distinct reading."""
    codes, uniques = pd.factorize(index.rows["reading"])
    lists = [templates.numbered(index.readings[k].rows) for k in uniques.tolist()]
    item, template, ordinal = _fanned(codes, lists)
    return pd.DataFrame(
        {
            "row": item,
            "pair": -1,
            "template": template,
            "group": CONFORMANCE,
            "first": item,
            "second": 0,
            "ordinal": ordinal,
        }
    )


def analyze(
    records: Sequence[Record], *, ignore: Sequence[str] = (), baseline: str | None = None
) -> Analysis:
    """`analyse` the records held in memory (the first record of each id; replay attempts
    tried again left out)."""
    return analyse(Index.of(records), ignore=ignore, baseline=baseline)


@dataclass
class Diagnosed:
    """The diagnoses of the failing chains (`DIAGNOSIS_COLUMNS`) and the evidence records
    of their exchanges by id (what the report draws a chain from)."""

    frame: pd.DataFrame
    evidence: dict[str, Record]


def diagnose_index(index: Index) -> Diagnosed:
    """One row per (failing chain, diagnosis code), chains diagnosed once per distinct
    sequence of evidence (`diagnose_chains`)."""
    rows = index.rows
    chains = chain_rows(rows, failing_only=True)
    if not chains:
        return Diagnosed(diagnosis_frame([]), {})
    member_ids = list(dict.fromkeys(i for chain in chains for i in chain[1]))
    at = pd.Index(rows["id"]).get_indexer(member_ids)
    keys = rows["evidence"].to_numpy()[at]
    read = [row for row, key in zip(at.tolist(), keys.tolist(), strict=True) if not key]
    evidence: dict[str, tuple[int, Record]] = {}
    for rid, key in zip(member_ids, keys.tolist(), strict=True):
        if key:
            evidence[rid] = (key, {**index.evidence[key], "id": rid})
    for rec in index.read(read):
        seen = evidence_record(rec, ok=True)
        evidence[rec["id"]] = (evidence_key(seen), seen)
    backends = Backends(rows, index.read)
    found = diagnose_chains(chains, evidence.__getitem__, served_by(rows), backends)
    return Diagnosed(diagnosis_frame(found), {rid: rec for rid, (_, rec) in evidence.items()})


def diagnose(records: Sequence[Record]) -> pd.DataFrame:
    """The diagnoses of the records held in memory (`DIAGNOSIS_COLUMNS`)."""
    return diagnose_index(Index.of(records)).frame
