"""Fold the divergence and conformance rows into the distinct findings the report lists.

Identical findings are counted and their first examples kept; `one_per_problem` makes the
findings of several references about one problem of the same exchanges one. They are grouped by
kind and path, worst severity first, then the most frequent, headers last, and cut to the
report's size budget; `wirediff.reports.examples` lays out their examples."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from wirediff.analysis.comparison.divergences import FINDING_COLUMNS
from wirediff.analysis.comparison.kinds import kind_names, severity_rank
from wirediff.analysis.comparison.pairing import factorize_together, sorted_codes, text_codes
from wirediff.analysis.comparison.pairing import text as text_of
from wirediff.analysis.comparison.sameness import problem_key
from wirediff.reports.formatters import anchor, redact
from wirediff.reports.hops import NO_ENDPOINT

if TYPE_CHECKING:
    from wirediff.reports.examples import View

__all__ = [
    "KINDS",
    "MAX_FINDINGS",
    "Finding",
    "Fold",
    "Folds",
    "KindGroup",
    "Listed",
    "collect_folds",
    "finish_folds",
    "group_findings",
    "kind_order",
    "listed",
    "one_per_problem",
]

KINDS = kind_names()
"""Divergence kinds (contract, DESIGN.md), in the order the report lists them."""
_POSITION = re.compile(r"#\d+|\b\d+ events\b|\b(?:position|at) \d+\b")
"""Event positions: findings that differ only there are the same finding."""
MAX_FINDINGS = 2000
"""Distinct findings listed in the HTML, worst first; the rest are counted there.

All are in summary.json and divergences.csv."""


def map_unique(s: pd.Series, fn: Callable[[str], str]) -> pd.Series:
    """Map `fn` over a column of strings once per distinct value, since findings repeat a lot."""
    unique = s.unique().tolist()
    return s.map(dict(zip(unique, map(fn, unique), strict=True)))


def redact_series(s: pd.Series) -> pd.Series:
    return map_unique(s, redact)


def position_free(text: str) -> str:
    return _POSITION.sub("#n", text)


@dataclass(slots=True)
class Example:
    pair_id: str
    baseline_id: str
    candidate_id: str
    timeline: str | None = None


@dataclass(slots=True)
class Finding:
    """Fold identical findings: same kind, path, backends, endpoint, values and message."""

    anchor: str
    kind: str
    path: str
    label: str
    baseline_label: str
    endpoint: str
    family: str
    severity: str
    message: str
    baseline: str
    candidate: str
    count: int
    examples: list[Example]
    source: str = ""
    schema_pointer: str = ""
    evidence: str = ""
    """For a breaking finding: the SDK's or the server's words (the failing traceback line)."""
    shown: bool = True
    views: list[View] = field(default_factory=list)
    """The first example laid out side by side, when it fits the report's size budget."""
    also: list[Finding] = field(default_factory=list)
    """What other references said of the same problem of the same exchanges."""

    @property
    def sources(self) -> list[str]:
        """List every reference that found it, its own first."""
        return list(dict.fromkeys(f.source for f in (self, *self.also) if f.source))


@dataclass(slots=True)
class PathGroup:
    anchor: str
    kind: str
    path: str
    findings: list[Finding]

    @property
    def count(self) -> int:
        return sum(f.count for f in self.findings)

    @property
    def not_shown(self) -> int:
        return sum(not f.shown for f in self.findings)

    @property
    def visible(self) -> bool:
        return any(f.shown for f in self.findings)


@dataclass(slots=True)
class KindGroup:
    anchor: str
    kind: str
    paths: list[PathGroup]

    @property
    def count(self) -> int:
        return sum(p.count for p in self.paths)

    @property
    def n_findings(self) -> int:
        return sum(len(p.findings) for p in self.paths)

    @property
    def hidden_paths(self) -> list[PathGroup]:
        """List the paths none of whose findings fit in the report's budget."""
        return [p for p in self.paths if not p.visible]


FOLD_COLUMNS = [
    "kind",
    "path",
    "label",
    "baseline_label",
    "endpoint",
    "family",
    "severity",
    "message",
    "baseline",
    "candidate",
    "source",
    "schema_pointer",
]
"""What a folded finding shows: its first occurrence's."""


@dataclass(slots=True)
class Fold:
    """Count identical findings, keeping the first occurrence, its first examples and the evidence.

    The first occurrence is by `first`, its place among all the captures' findings; the evidence
    is the one that sorts first."""

    first: Any
    row: tuple[str, ...]
    """`FOLD_COLUMNS` of the first occurrence."""
    count: int
    examples: list[tuple[Any, str, str, str, Any]]
    """The first examples, as `(order, pair_id, baseline_id, candidate_id, timeline)`.

    `timeline` is the key of the pair's stream alignment, if any: see
    `wirediff.reports.timeline`."""
    evidence: str


Folds = dict[tuple[str, ...], Fold]


@dataclass
class Listed:
    """Hold every finding as the report writes it, as a template and the exchanges it names.

    The columns are `DIVERGENCE_COLUMNS` as text, credentials scrubbed from the values, paths and
    messages, and a missing endpoint written `NO_ENDPOINT`."""

    values: pd.DataFrame
    """`FINDING_COLUMNS` of each template."""
    template: np.ndarray
    candidate: np.ndarray
    """Per finding, the exchange it is about (its pair's candidate)."""
    baseline: np.ndarray
    """Per finding, its pair's baseline; -1 for an exchange's own finding."""
    ids: pa.Array
    labels: np.ndarray
    families: np.ndarray
    endpoints: np.ndarray
    """Per exchange: its id, label, family and endpoint, as text.

    The ids stay Arrow text, each taken when needed: as a million Python strings they would
    take a hundred MB."""

    def __len__(self) -> int:
        return len(self.template)

    def meta(self, at: slice | np.ndarray = slice(None)) -> dict[str, np.ndarray]:
        """Return the `PAIR_META` of these findings."""
        c, b = self.candidate[at], self.baseline[at]
        own = b < 0
        base = np.where(own, c, b)
        ids = self.id_text(c)
        return {
            "pair_id": ids,
            "label": self.labels[c],
            "baseline_label": np.where(own, "", self.labels[b]),
            "baseline_id": np.where(own, "", self.id_text(np.maximum(b, 0))),
            "candidate_id": ids,
            "family": self.families[base],
            "endpoint": self.endpoints[base],
        }

    def id_text(self, at: np.ndarray) -> np.ndarray:
        """Give the ids of the exchanges `at`, as Python strings."""
        return np.asarray(self.ids.take(at).to_numpy(zero_copy_only=False), dtype=object)

    def meta_codes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Number each finding's label, baseline label and endpoint, equal numbers for equal text.

        They are numbered per exchange, not per finding: millions of findings name a few
        thousand exchanges' texts. The numbers are 32 bits, half the memory for millions."""
        c, b = self.candidate, self.baseline
        own = b < 0
        labels = pd.factorize(np.append(self.labels, ""))[0].astype(np.int32)
        endpoints = pd.factorize(self.endpoints)[0].astype(np.int32)
        return labels[c], labels[b], endpoints[np.where(own, c, b)]  # labels[-1] is ""

    def kind_counts(self) -> dict[str, dict[str, int]]:
        """Count the findings of each label by kind.

        Counted as numbers, a label's per exchange and a kind's per template: a value per
        finding would be millions of objects."""
        labels, label_texts = pd.factorize(self.labels, use_na_sentinel=False)
        kinds, kind_texts = pd.factorize(self.values["kind"].to_numpy(), use_na_sentinel=False)
        n = len(kind_texts)
        pair = labels.astype(np.int64)[self.candidate]
        pair *= n
        pair += kinds[self.template]
        counts = np.bincount(pair, minlength=len(label_texts) * n)
        out: dict[str, dict[str, int]] = {}
        for at in np.flatnonzero(counts).tolist():
            label, kind = divmod(at, n)
            out.setdefault(str(label_texts[label]), {})[str(kind_texts[kind])] = int(counts[at])
        return out


def listed(
    rows: pd.DataFrame,
    templates: pd.DataFrame,
    template: np.ndarray,
    candidate: np.ndarray,
    baseline: np.ndarray,
) -> Listed:
    """Build `Listed` from the index `rows`, the findings' templates, and each finding's parts.

    The parts are its template, candidate and baseline, where -1 is none."""
    values = templates.astype(object).where(templates.notna(), "").astype(str)
    for col in ("baseline", "candidate", "message", "path"):
        values[col] = redact_series(values[col])

    def text(name: str) -> np.ndarray:
        codes, texts = text_codes(rows[name])
        return np.asarray(texts[codes], dtype=object)

    endpoints = text("endpoint")
    endpoints[endpoints == ""] = NO_ENDPOINT
    ids = pa.array(text_of(rows["id"]))
    return Listed(
        values, template, candidate, baseline, ids, text("label"), text("family"), endpoints
    )


def collect_folds(found: Listed, max_examples: int, timeline_of: Mapping[str, Any]) -> Folds:
    """Fold identical findings: the same kind, path, backends, endpoint, severity and source.

    Their values and message are the same too; event positions are set aside. `timeline_of` maps
    a pair to its alignment."""
    if not len(found):
        return {}
    v = found.values
    shown = v.assign(
        _b=map_unique(v["baseline"], position_free),
        _c=map_unique(v["candidate"], position_free),
        _m=map_unique(v["message"], position_free),
    )
    same = ["kind", "path", "severity", "source", "_b", "_c", "_m"]
    alike = shown.groupby(same, sort=False, dropna=False).ngroup().to_numpy()
    group, _ = factorize_together(alike.astype(np.int32)[found.template], *found.meta_codes())
    sizes = np.bincount(group)
    said, evidences = sorted_codes(v["evidence"])
    evidence_at = np.full(len(sizes), len(evidences))
    np.minimum.at(evidence_at, group, said[found.template])
    evidence = evidences[evidence_at].tolist()
    # the first findings of each fold, in their order: a stable sort by fold
    by_fold = np.argsort(group, kind="stable")
    starts = np.cumsum(sizes) - sizes
    picked = np.sort(by_fold[np.arange(len(group)) - starts[group[by_fold]] < max_examples])
    out: Folds = {}
    heads: dict[int, tuple[str, ...]] = {}
    meta = found.meta(picked)
    columns = {k: shown[k].tolist() for k in (*FINDING_COLUMNS, "_b", "_c", "_m")}
    for i, at in enumerate(picked.tolist()):
        g = int(group[at])
        pid = meta["pair_id"][i]
        example = (at, pid, meta["baseline_id"][i], meta["candidate_id"][i], timeline_of.get(pid))
        if g in heads:  # picked in order: a fold's first finding comes first
            out[heads[g]].examples.append(example)
            continue
        t = int(found.template[at])
        row = {**{k: meta[k][i] for k in ("label", "baseline_label", "endpoint", "family")}}
        row.update({k: columns[k][t] for k in FINDING_COLUMNS})
        key = tuple(row[k] for k in ("kind", "path", "label", "baseline_label", "endpoint"))
        key += (row["severity"], row["source"], *(columns[k][t] for k in ("_b", "_c", "_m")))
        heads[g] = key
        out[key] = Fold(
            at, tuple(row[k] for k in FOLD_COLUMNS), int(sizes[g]), [example], evidence[g]
        )
    return out


def finish_folds(folds: Folds, timeline_anchor: Mapping[Any, str]) -> list[Finding]:
    """Make one `Finding` per fold, in the order of their first occurrences.

    An example links to its pair's stream alignment when that is drawn, by `timeline_anchor`."""
    out = []
    for g, fold in enumerate(sorted(folds.values(), key=lambda f: f.first)):
        r = dict(zip(FOLD_COLUMNS, fold.row, strict=True))
        examples = [
            Example(pid, bid, cid, timeline_anchor.get(tl) if tl is not None else None)
            for _, pid, bid, cid, tl in fold.examples
        ]
        out.append(
            Finding(
                anchor=anchor("f", r["kind"], r["path"], r["label"], r["endpoint"], g),
                kind=r["kind"],
                path=r["path"],
                label=r["label"],
                baseline_label=r["baseline_label"],
                endpoint=r["endpoint"],
                family=r["family"],
                severity=r["severity"],
                message=r["message"],
                baseline=r["baseline"],
                candidate=r["candidate"],
                count=fold.count,
                examples=examples,
                source=r["source"],
                schema_pointer=r["schema_pointer"],
                evidence=fold.evidence,
            )
        )
    return out


def one_per_problem(findings: Sequence[Finding]) -> list[Finding]:
    """Merge the findings of several references about one problem on the same exchanges into one.

    The references are the baseline diff, the OpenAPI document, the SDK types, Open Responses and
    the grammars. A problem is keyed by `sameness.problem_key` per backend's endpoint, and the
    same exchanges means their examples meet. The worst and most frequent speaks, the others are
    its `also`; they come in the order of their first."""
    by_problem: dict[tuple[str, str, str], list[Finding]] = {}
    for f in findings:
        key = (f.label, f.endpoint, problem_key(f.path, f.evidence))
        by_problem.setdefault(key, []).append(f)
    merged_into: dict[int, Finding] = {}
    for group in by_problem.values():
        heads: list[tuple[Finding, set[str]]] = []
        for f in sorted(group, key=lambda f: (severity_rank(f.severity), -f.count)):
            mine = {e.candidate_id for e in f.examples}
            head = next((h for h, ids in heads if ids & mine), None)
            if head is None:
                heads.append((f, mine))
                continue
            head.also.append(f)
            head.count = max(head.count, f.count)
            head.evidence = head.evidence or f.evidence
            merged_into[id(f)] = head
    return [f for f in findings if id(f) not in merged_into]


def kind_order(kind: str) -> tuple[int, str]:
    """Sort kinds in the registry's order, an unregistered kind last."""
    return (KINDS.index(kind) if kind in KINDS else len(KINDS), kind)


def _order(findings: Iterable[Finding]) -> tuple[int, int]:
    """Sort worst severity first, then the most occurrences."""
    fs = list(findings)
    return (min(severity_rank(f.severity) for f in fs), -sum(f.count for f in fs))


def group_findings(findings: Iterable[Finding]) -> list[KindGroup]:
    """Group findings by kind and path: worst severity first, then the most frequent, headers last.

    The registry's order breaks ties."""
    by_kind: dict[str, dict[str, list[Finding]]] = {}
    for f in findings:
        by_kind.setdefault(f.kind, {}).setdefault(f.path, []).append(f)
    out = []
    for kind, paths_of in by_kind.items():
        paths = [
            PathGroup(
                anchor("p", kind, path),
                kind,
                path,
                sorted(fs, key=lambda f: (severity_rank(f.severity), -f.count)),
            )
            for path, fs in paths_of.items()
        ]
        paths.sort(key=lambda p: (*_order(p.findings), p.path))
        out.append(KindGroup(anchor("k", kind), kind, paths))
    out.sort(
        key=lambda k: (
            k.kind == "header",
            *_order(f for p in k.paths for f in p.findings),
            kind_order(k.kind),
        )
    )
    budget = MAX_FINDINGS
    for k in out:
        for p in k.paths:
            for f in p.findings:
                f.shown = budget > 0
                budget -= 1
    return out
