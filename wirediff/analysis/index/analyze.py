"""Analyse the index: pairs, noise, divergences, conformance and diagnoses.

Every check runs once per distinct reading of an answer for conformance, once per distinct
pair of readings and noise for divergences, their severities and the pair's client rows, and
once per distinct failing chain for diagnoses; the rows are fanned back to the exchanges and
pairs that share them. A finding is a row of `Analysis.findings`, with its exchange, its pair
and its template, in the order a report lists them; `Analysis.divergences` and
`Analysis.conformance` write them out in full as `DIVERGENCE_COLUMNS`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from wirediff._support import NOT_COMPARED, STOPPED_KINDS, paused_gc
from wirediff._types import Record
from wirediff.analysis.comparison.assumed import assumed_note
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS, FINDING_COLUMNS
from wirediff.analysis.comparison.kinds import SEVERITIES, severity_rank
from wirediff.analysis.comparison.noise import glob_regex, ignored, pair_noise
from wirediff.analysis.comparison.pairing import (
    Baseline,
    factorize_together,
    index_in,
    pair_exchanges,
    text,
)
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
from wirediff.analysis.comparison.verdicts import Findings as CellFindings
from wirediff.analysis.diagnosis.chains import chain_rows
from wirediff.analysis.diagnosis.evidence import EvidenceById
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
    "diagnose_index",
]

GateCounts = dict[tuple[str, str, str], tuple[int, frozenset[str]]]
"""Per (label, family, transport): the worst severity rank of its findings, and their kinds."""
DIVERGENCE, CLIENT, CONFORMANCE = 0, 1, 2
"""A finding's group: a pair's divergence, a pair's `client` row, an exchange's own row."""


@dataclass
class Index:
    """Hold the captures' exchanges, one row each, and what the checks made of their answers.

    Rows follow `INDEX_COLUMNS`, numbered from 0 in load order. Beside them: the readings of the
    answers, the evidence of the failing exchanges, and `read`, which reads the records at given
    rows again."""

    rows: pd.DataFrame
    readings: dict[int, Reading]
    evidence: dict[int, bytes]
    read: Callable[[Sequence[int]], list[Record]]

    @classmethod
    def of(cls, records: Sequence[Record]) -> Index:
        """Build the index of records held in memory."""
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
    """Hold the analysed captures: their pairs, and every finding as one row, in order.

    A finding's `row` is the exchange it is about, `pair` its pair or -1 for an exchange's own,
    `template` a row of `templates` with its values, and `group` one of `DIVERGENCE`, `CLIENT`
    or `CONFORMANCE`."""

    index: Index
    baseline: Baseline
    pairs: pd.DataFrame
    """Each pair: `c` and `b`, the candidate's and baseline's rows; `pairing`, `place`, `sent`."""
    unmatched: pd.DataFrame
    findings: pd.DataFrame
    templates: pd.DataFrame
    """`FINDING_COLUMNS`, one row per distinct finding."""

    @property
    def exchanges(self) -> pd.DataFrame:
        return self.index.rows

    @functools.cached_property
    def divergences(self) -> pd.DataFrame:
        """Write out the pairs' findings, divergences then `client` rows, as `DIVERGENCE_COLUMNS`."""
        return self.frame(self.findings["group"].to_numpy() != CONFORMANCE)

    @functools.cached_property
    def conformance(self) -> pd.DataFrame:
        """Write out the exchanges' own findings as `DIVERGENCE_COLUMNS`."""
        return self.frame(self.findings["group"].to_numpy() == CONFORMANCE)

    def frame(self, which: np.ndarray | None = None) -> pd.DataFrame:
        """Write these findings out in full as `DIVERGENCE_COLUMNS`; all of them by default."""
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
        """Give per exchange the least severity rank of its findings, or -1 for none."""
        out = np.full(len(self.index), len(SEVERITIES), dtype=np.int64)
        ranks = self.templates["severity"].map(RANKS).fillna(len(SEVERITIES)).astype(int)
        np.minimum.at(
            out,
            self.findings["row"].to_numpy(),
            ranks.to_numpy()[self.findings["template"].to_numpy()],
        )
        return np.where(out < len(SEVERITIES), out, -1)

    def answers(self, name: str) -> np.ndarray:
        """Give per exchange one field of its answer's reading."""
        readings = self.index.readings
        keys = self.index.rows["reading"]
        codes, uniques = pd.factorize(keys)
        values = np.empty(len(uniques), dtype=object)  # tuples stay whole, not a 2-d array
        values[:] = [getattr(readings[k], name) for k in uniques.tolist()]
        return values[codes]

    @functools.cached_property
    def outcomes(self) -> np.ndarray:
        """Give per exchange its outcome, as `exchange_outcomes` says."""
        rows = self.index.rows
        frame = rows[["error_kind", "status", "soft_error"]].assign(
            route_failure=self.answers("route_failure").astype(bool)
        )
        return exchange_outcomes(frame, self.worst)

    def roles(self) -> dict[str, str]:
        """Give each label's role, as `roles_of` says."""
        rows = self.index.rows
        labels = set(text(rows["label"]).unique().tolist())
        return roles_of(labels, *self.pair_labels())

    def pair_labels(self) -> tuple[set[str], set[str]]:
        """Give the labels of the pairs' baselines and of their candidates."""
        labels = self.index.rows["label"]

        def of(side: str) -> set[str]:
            return {str(v) for v in labels.iloc[self.pairs[side].to_numpy()].dropna().unique()}

        return of("b"), of("c")

    def cells(
        self,
        by: Sequence[str] = ("family", "transport"),
        *,
        endpoint: str = "(none)",
        said: Callable[[str], str] | None = None,
    ) -> VerdictCells:
        """Count the verdict cells per label and `by`, with `verdict_cells`.

        `endpoint` names a missing endpoint; `said` says how a finding's message and path read, as
        they are by default."""
        rows = self.index.rows
        ok = self.outcomes != "unsupported"
        ok &= self.outcomes != "skipped"
        base_ok = np.zeros(len(rows), dtype=bool)
        b = self.pairs["b"].to_numpy()
        base_ok[self.pairs["c"].to_numpy()] = ok[b]
        exchanges = pd.DataFrame(
            {
                "label": _named(rows["label"], ""),
                "family": _named(rows["family"], "other"),
                "transport": _named(rows["transport"], "http"),
                "method": _named(rows["method"], ""),
                "endpoint": _named(rows["endpoint"], endpoint),
                "status": rows["status"],
                "soft_error": rows["soft_error"],
                # objects as they are: pandas would copy text into a column of its own,
                # and each read of it would make a new string per exchange
                "outcome": pd.Series(self.outcomes, dtype=object),
                "answered": pd.Series(self.answers("answered"), dtype=object),
                "not_implemented": pd.Series(self.answers("not_implemented"), dtype=object),
                "answer_status": pd.Series(self.answers("status"), dtype=object),
                "original_ok": base_ok,
            }
        )
        return verdict_cells(exchanges, self.cell_findings(said), by)

    def cell_findings(self, said: Callable[[str], str] | None = None) -> CellFindings:
        """Give the findings as verdict cells read them, a fact per template and stand-in.

        `said` says how a finding's message and path read, as they are by default."""
        t = self.templates
        path = t["path"] if said is None else t["path"].map(said)
        message = t["message"] if said is None else t["message"].map(said)
        words = [
            without_ids(str(w))
            for w in np.where(t["evidence"] != "", t["evidence"], message).tolist()
        ]
        rows = self.findings["row"].to_numpy()
        standin, standins = pd.factorize(self.answers("standin"), use_na_sentinel=False)
        key = self.findings["template"].to_numpy(dtype=np.int64) * len(standins) + standin[rows]
        # numbered through a table of every template and stand-in, not a hash table per finding
        seen = np.zeros(len(t) * len(standins), dtype=bool)
        seen[key] = True
        fact = (np.cumsum(seen, dtype=np.int32) - 1)[key]
        facts = [divmod(int(k), len(standins)) for k in np.flatnonzero(seen).tolist()]
        columns = {c: t[c].tolist() for c in ("severity", "kind", "evidence")}
        paths = path.tolist()
        frame = pd.DataFrame(
            [
                (
                    columns["severity"][tk],
                    columns["kind"][tk],
                    paths[tk],
                    columns["evidence"][tk],
                    words[tk] + assumed_note(str(standins[sk]), str(paths[tk]), words[tk]),
                )
                for tk, sk in facts
            ],
            columns=["severity", "kind", "path", "evidence", "text"],
            dtype=object,
        )
        return CellFindings(rows, fact, frame)

    def gate(self) -> GateCounts:
        """Give what `wirediff check` gates on.

        Per label, family and transport of the exchange a finding is about: its worst severity rank
        and the kinds found. Exchanges our own stop cut count for none."""
        rows, t = self.index.rows, self.templates
        at, template = self.findings["row"].to_numpy(), self.findings["template"].to_numpy()
        judged = ~np.isin(rows["error_kind"].to_numpy(dtype=object)[at], STOPPED_KINDS)
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
        """Give one drop-in verdict per label, family and transport, baseline first."""
        return verdict_frame(self.cells(), self.roles())


def analyse(index: Index, *, ignore: Sequence[str] = (), baseline: str | None = None) -> Analysis:
    """Pair, diff, validate and judge the exchanges of an index.

    `ignore` holds path patterns left out of the divergences and the conformance rows alike;
    `baseline` is the label independent captures are compared with (`pair_exchanges`)."""
    rows = index.rows
    pairing = pair_exchanges(rows, baseline=baseline)
    pairs = pairing.pairs
    # a replay step left unsent, or either side cut by our own stop, is not compared
    said = ~np.isin(rows["error_kind"].to_numpy(dtype=object), NOT_COMPARED)
    pairs["sent"] = said[pairs["c"].to_numpy()] & said[pairs["b"].to_numpy()]
    templates = _Templates(glob_regex(ignore))
    found = [*_pair_findings(index, pairs, templates), _own_findings(index, templates)]
    column = {c: np.concatenate([f[c] for f in found]) for c in _FOUND}
    del found
    keys = [column.pop(c) for c in ("ordinal", "second", "first")]
    order = np.lexsort((*keys, column["group"]))
    del keys
    findings = pd.DataFrame({c: column.pop(c)[order] for c in ("row", "pair", "template", "group")})
    return Analysis(index, pairing.baseline, pairs, pairing.unmatched, findings, templates.frame())


def _named(column: pd.Series, missing: str) -> pd.Series:
    """Read a column of the index as categories of text, a missing value `missing`.

    Grouping a million exchanges by categories works on their codes, not on their strings."""
    values = column
    if not isinstance(values.dtype, pd.CategoricalDtype):
        values = values.astype("str").astype("category")
    if values.hasnans:
        if missing not in values.cat.categories:
            values = values.cat.add_categories([missing])
        values = values.fillna(missing)
    return values


class _Templates:
    """Number distinct finding rows, giving None to those at an ignored path."""

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
Found = dict[str, np.ndarray]
"""Findings as columns of `_FOUND`, in 32 bits: one row per finding, millions of them."""
_AT = np.int32


def _fanned(codes: np.ndarray, lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, ...]:
    """Expand items with these key codes to one entry per template of their key's list.

    Each entry holds the item, the template and its place in the list."""
    lengths = np.array([len(x) for x in lists], dtype=_AT)
    flat = np.array([t for x in lists for t in x], dtype=_AT)
    starts = np.cumsum(lengths, dtype=np.int64) - lengths
    n = lengths[codes]
    item = np.repeat(np.arange(len(codes), dtype=_AT), n)
    ordinal = np.arange(int(n.sum()), dtype=_AT)
    ordinal -= np.repeat((np.cumsum(n, dtype=np.int64) - n).astype(_AT), n)
    return item, flat[np.repeat(starts[codes], n) + ordinal], ordinal


def _found(**columns: Any) -> Found:
    """Give findings' columns in 32 bits, a number repeated where one is given."""
    n = max(len(v) for v in columns.values() if isinstance(v, np.ndarray))
    return {
        c: np.asarray(v, dtype=_AT) if isinstance(v, np.ndarray) else np.full(n, v, dtype=_AT)
        for c, v in columns.items()
    }


def _pair_findings(index: Index, pairs: pd.DataFrame, templates: _Templates) -> list[Found]:
    """Find what the pairs whose candidate was sent say, once per distinct pair and noise.

    Divergences come in the order of each original's first pair, then `client` rows in the
    pairs' order."""
    sent = np.flatnonzero(pairs["sent"].to_numpy())
    if not len(sent):
        return []
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
    codes, uniques = factorize_together(part["b"], part["c"], pd.Series(noise))
    divergences, clients = [], []
    for bk, ck, n in uniques:
        found, said = pair_findings(index.readings[bk], index.readings[ck], sets[n])
        divergences.append(templates.numbered(found))
        clients.append(templates.numbered(said))
    place = pairs["place"].to_numpy()[sent].astype(_AT)
    first = pd.Series(place).groupby(b).transform("min").to_numpy().astype(_AT)
    c, sent = c.astype(_AT), sent.astype(_AT)
    out = []
    for group, lists in ((DIVERGENCE, divergences), (CLIENT, clients)):
        item, template, ordinal = _fanned(codes, lists)
        out.append(
            _found(
                row=c[item],
                pair=sent[item],
                template=template,
                group=group,
                first=first[item] if group == DIVERGENCE else place[item],
                second=place[item] if group == DIVERGENCE else 0,
                ordinal=ordinal,
            )
        )
    return out


def _own_findings(index: Index, templates: _Templates) -> Found:
    """Give each exchange's conformance and `client` rows, once per distinct reading."""
    codes, uniques = pd.factorize(index.rows["reading"])
    lists = [templates.numbered(index.readings[k].rows) for k in uniques.tolist()]
    item, template, ordinal = _fanned(codes, lists)
    return _found(
        row=item,
        pair=-1,
        template=template,
        group=CONFORMANCE,
        first=item,
        second=0,
        ordinal=ordinal,
    )


def analyze(
    records: Sequence[Record], *, ignore: Sequence[str] = (), baseline: str | None = None
) -> Analysis:
    """Analyse records held in memory with `analyse`.

    The first record of each id is kept, and replay attempts tried again are left out."""
    return analyse(Index.of(records), ignore=ignore, baseline=baseline)


@dataclass
class Diagnosed:
    """Hold the diagnoses of the failing chains and the evidence records of their exchanges.

    The diagnoses follow `DIAGNOSIS_COLUMNS`; the evidence records, by id, are what the report
    draws a chain from."""

    frame: pd.DataFrame
    evidence: EvidenceById


def diagnose_index(index: Index) -> Diagnosed:
    """Diagnose the failing chains: one row per chain and diagnosis code.

    Chains are diagnosed once per distinct sequence of evidence (`diagnose_chains`)."""
    rows = index.rows
    chains = chain_rows(rows, failing_only=True)
    if not chains:
        return Diagnosed(diagnosis_frame({}), EvidenceById({}, {}))
    member_ids = list(dict.fromkeys(i for chain in chains for i in chain[1]))
    at = index_in(pd.Series(member_ids, dtype=object), rows["id"])
    keys = rows["evidence"].to_numpy()[at]
    read = [row for row, key in zip(at.tolist(), keys.tolist(), strict=True) if not key]
    kept = {rid: key for rid, key in zip(member_ids, keys.tolist(), strict=True) if key}
    evidence = EvidenceById(kept, index.evidence)
    for rec in index.read(read):
        evidence.add(rec)
    backends = Backends(rows, index.read)
    frame = diagnose_chains(chains, evidence, served_by(rows), backends)
    return Diagnosed(frame, evidence)
