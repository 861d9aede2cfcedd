"""Drop-in verdicts: can this backend replace the baseline for this traffic, per endpoint
family (and transport, where a family has several), and why not.

`compatible` (nothing above cosmetic), `compatible with deviations`, `breaking` (any breaking
finding, one endpoint of the family not implemented while others work, or nothing in the cell
succeeded), `unsupported`
(nothing in the cell succeeded and every failure is route-level: 404/405/501 not about a
model, an error in a 2xx, a refused WebSocket upgrade). Each verdict carries its top reasons,
worst and most frequent first, headers last, in the server's or the SDK's words. The
baseline is judged too, by its conformance alone: every comparison inherits its flaws.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wirediff._support import error_kind, response_status, statuses_2xx
from wirediff._types import Record
from wirediff.analysis.comparison.breaks import server_words
from wirediff.analysis.comparison.kinds import SEVERITIES, severity_rank

__all__ = [
    "FAMILIES",
    "ROLES",
    "VERDICTS",
    "VERDICT_COLUMNS",
    "Cell",
    "answer_texts",
    "exchange_outcomes",
    "roles_of",
    "route_failure",
    "verdict_cells",
    "verdict_frame",
]

VERDICTS = ("compatible", "compatible with deviations", "breaking", "unsupported")
"""Best to worst (a contract)."""
VERDICT_COLUMNS = [
    "label",
    "role",
    "family",
    "transport",
    "verdict",
    "reasons",
    "breaking",
    "deviations",
    "cosmetic",
    "exchanges",
]
ROLES = ("baseline", "candidate", "capture")
FAMILIES = (
    "chat.completions",
    "responses",
    "completions",
    "models",
    "embeddings",
    "files",
    "audio",
    "images",
    "moderations",
    "batches",
    "realtime",
    "other",
)
"""The order families are listed in."""
MAX_REASONS = 3
SKIPPED = "skipped"
RANKS = {s: severity_rank(s) for s in SEVERITIES}
UNSUPPORTED = "unsupported"
ROUTE_STATUSES = frozenset({404, 405, 501})
_POSITION = re.compile(r" \((?:event #\d+|\d+ events, first #\d+)\)")


def roles_of(labels: set[str], baseline: set[str], candidate: set[str]) -> dict[str, str]:
    """Each label's role: `baseline` for labels compared with (replayed from, or the
    baseline of independent captures), `candidate` for labels compared (replayed to, or
    paired by content), else `capture`; in that order, then by label."""
    out = {
        label: "baseline" if label in baseline else "candidate" if label in candidate else "capture"
        for label in labels
    }
    return dict(sorted(out.items(), key=lambda kv: (ROLES.index(kv[1]), kv[0])))


def route_failure(record: Record | None) -> bool:
    """The answer says "not here": 404/405/501 not about a model, an error where a 2xx
    answer belongs (nothing else in it), or a WebSocket upgrade refused."""
    resp = record["response"] if record is not None else None
    if record is None or resp is None:
        return False
    status = resp["status"]
    tags = record["tags"]
    upgrade = (tags.get("transport") == "websocket") or any(
        str(k).lower() == "upgrade" for k, _ in record["request"].get("headers") or ()
    )
    if upgrade and isinstance(status, int) and status != 101 and status < 500:
        return True
    if status in ROUTE_STATUSES:
        return "model" not in server_words(record).lower()
    if tags.get("soft_error"):
        events = resp.get("events") or []
        return not any(
            isinstance(ev.get("data"), dict) and "error" not in ev["data"] for ev in events
        )
    return False


def exchange_outcomes(exchanges: pd.DataFrame, worst: np.ndarray) -> np.ndarray:
    """Per exchange (`error_kind`, `status`, `soft_error`, `route_failure`: its answer's):
    `skipped`, `unsupported` (a route-level failure), else the worst severity of its
    findings (`worst`: their least rank, -1 for none), or `ok`."""
    status = pd.to_numeric(exchanges["status"], errors="coerce")
    route = status.isin(list(ROUTE_STATUSES | {426})).to_numpy()
    soft = exchanges["soft_error"].eq(True).fillna(False).to_numpy(dtype=bool)
    unsupported = (soft | route) & exchanges["route_failure"].to_numpy(dtype=bool)
    named = np.array([*SEVERITIES, "ok"], dtype=object)
    out = named[np.where(worst >= 0, worst, len(SEVERITIES))]
    out[unsupported] = UNSUPPORTED
    out[exchanges["error_kind"].eq(SKIPPED).fillna(False).to_numpy(dtype=bool)] = SKIPPED
    return out


@dataclass(slots=True)
class Answer:
    """One method and endpoint in a cell: its first answer, and how all its exchanges went."""

    first: Any
    """Order key of its first exchange (its position in the captures)."""
    answered: str
    """The first answer: `404: the server's words`, or the failure when none came."""
    not_implemented: str
    route_failure: bool = True
    """Every exchange failed route-level (all)."""
    original_ok: bool = False
    """Some exchange replays an original that did not fail route-level (any)."""

    def merge(self, other: Answer) -> None:
        if other.first < self.first:
            self.first, self.answered = other.first, other.answered
            self.not_implemented = other.not_implemented
        self.route_failure &= other.route_failure
        self.original_ok |= other.original_ok


@dataclass(slots=True)
class Reason:
    """Findings of one severity, kind and path in a cell."""

    n: int
    text: str
    """The evidence (or message) that sorts first: one, whatever the order."""
    first: Any

    def merge(self, other: Reason) -> None:
        self.n += other.n
        self.text = min(self.text, other.text)
        self.first = min(self.first, other.first)


@dataclass(slots=True)
class Cell:
    """What a verdict is made of, for one label and family (or endpoint): counts and firsts,
    so that cells of several parts of the captures merge into the cell of the whole."""

    exchanges: int = 0
    route_failure: bool = True
    succeeded: bool = False
    counts: list[int] = field(default_factory=lambda: [0] * len(SEVERITIES))
    answers: dict[tuple[str, str], Answer] = field(default_factory=dict)
    reasons: dict[tuple[float, bool, str, str], Reason] = field(default_factory=dict)

    def merge(self, other: Cell) -> None:
        self.exchanges += other.exchanges
        self.route_failure &= other.route_failure
        self.succeeded |= other.succeeded
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        for key, answer in other.answers.items():
            mine = self.answers.get(key)
            if mine is None:
                self.answers[key] = answer
            else:
                mine.merge(answer)
        for rkey, reason in other.reasons.items():
            have = self.reasons.get(rkey)
            if have is None:
                self.reasons[rkey] = reason
            else:
                have.merge(reason)


Cells = dict[tuple[Hashable, ...], Cell]


def answer_texts(record: Record) -> tuple[str, str]:
    """An answer in a verdict's words (`404: the server's words`), and what a
    not-implemented reason says of it."""
    status = response_status(record)
    shown = status or error_kind(record) or "no answer"
    words = server_words(record)
    return (
        f"{shown}" + (f": {words}" if words else ""),
        f"{status}" + (f": {words})" if words else ")"),
    )


def verdict_cells(
    exchanges: pd.DataFrame, findings: pd.DataFrame, by: Sequence[str] = ("family", "transport")
) -> Cells:
    """The cells `verdict_frame` judges, per label and `by`. `exchanges`, one row each in
    the captures' order: `label`, the `by` columns, `method`, `endpoint`, `status`,
    `soft_error`, `outcome` (`exchange_outcomes`), `answered` and `not_implemented` (its
    answer's `answer_texts`), `original_ok` (it was compared with an original that was sent
    and did not fail route-level). `findings`, in their order: `row` (the exchange's),
    `severity`, `kind`, `path`, `text` (the evidence, else the message, with any
    `assumed_note`)."""
    kept = exchanges["outcome"].to_numpy() != SKIPPED
    if not kept.any():
        return {}
    keys = ["label", *by]
    ex = exchanges.loc[kept, list(dict.fromkeys([*keys, "method", "endpoint", "status"]))]
    status = pd.to_numeric(ex["status"], errors="coerce")
    ex = ex.assign(
        answered=exchanges["answered"].to_numpy()[kept],
        not_implemented=exchanges["not_implemented"].to_numpy()[kept],
        original_ok=exchanges["original_ok"].to_numpy(dtype=bool)[kept],
        failing=exchanges["outcome"].to_numpy()[kept] == UNSUPPORTED,
        succeeded=(statuses_2xx(status) | (status == 101)).fillna(False).to_numpy(dtype=bool)
        & ~exchanges["soft_error"].eq(True).fillna(False).to_numpy(dtype=bool)[kept],
        _cell=exchanges.loc[kept, keys].groupby(keys, sort=False, dropna=False).ngroup(),
    )
    grouped = ex.groupby("_cell", sort=True)
    named = grouped[keys].first().itertuples(index=False, name=None)
    cells = [
        Cell(exchanges=n, route_failure=route, succeeded=ok)
        for n, route, ok in zip(
            grouped.size().tolist(),
            grouped["failing"].all().tolist(),
            grouped["succeeded"].any().tolist(),
            strict=True,
        )
    ]
    routes = ex.assign(_place=np.flatnonzero(kept)).groupby(
        ["_cell", "method", "endpoint"], sort=False, dropna=False, observed=True
    )
    firsts = routes[["_place", "answered", "not_implemented"]].first()
    for (at, method, endpoint), first, answered, missing, route, original in zip(
        firsts.index.tolist(),
        firsts["_place"].tolist(),
        firsts["answered"].tolist(),
        firsts["not_implemented"].tolist(),
        routes["failing"].all().tolist(),
        routes["original_ok"].any().tolist(),
        strict=True,
    ):
        cells[at].answers[(method, endpoint)] = Answer(first, answered, missing, route, original)
    if len(findings):
        cell_at = np.full(len(exchanges), -1, dtype=np.int64)
        cell_at[kept] = ex["_cell"].to_numpy()
        mine = findings.assign(
            _cell=cell_at[findings["row"].to_numpy()],
            _rank=findings["severity"].map(RANKS).fillna(len(SEVERITIES)).astype(int),
            _order=np.arange(len(findings)),
        )
        mine = mine[mine["_cell"].to_numpy() >= 0]
        counted = mine[mine["_rank"].to_numpy() < len(SEVERITIES)]
        for (at, rank), n in counted.groupby(["_cell", "_rank"]).size().items():
            cells[at].counts[rank] += int(n)
        reasons = mine.groupby(["_cell", "_rank", "kind", "path"], sort=False, observed=True)
        texts = reasons["text"].unique()
        for (at, rank, kind, path), n, first, said in zip(
            texts.index.tolist(),
            reasons.size().tolist(),
            reasons["_order"].min().tolist(),
            texts.tolist(),
            strict=True,
        ):
            key = (float(rank), kind == "header", kind, path)
            cells[at].reasons[key] = Reason(int(n), min(said), first)
    return dict(zip(named, cells, strict=True))


def _finding_reasons(cell: Cell) -> list[str]:
    """One line per (severity, kind, path), worst and most frequent first, headers last;
    the evidence (the SDK's or the server's words) where there is some."""
    top = sorted(cell.reasons.items(), key=lambda kv: (kv[0][0], kv[0][1], -kv[1].n, kv[1].first))
    out: list[str] = []
    for _, reason in top:
        line = _POSITION.sub("", str(reason.text))
        if all(not r.startswith(line) for r in out):
            out.append(f"{line} (x{reason.n})" if reason.n > 1 else line)
        if len(out) == MAX_REASONS:
            break
    return out


def _verdict(cell: Cell, role: str) -> tuple[str, list[str]]:
    answers = sorted(cell.answers.items())
    if cell.route_failure:
        reasons = [f"{m} {e}: not here ({a.answered})" for (m, e), a in answers]
        return UNSUPPORTED, reasons[:MAX_REASONS]
    missing, unserved = [], []
    if role == "candidate":
        missing = [
            f"{m} {e}: not implemented ({a.not_implemented}"
            for (m, e), a in answers
            if a.route_failure and a.original_ok
        ]
    elif role == "baseline":  # a route of the API it does not serve, while others work
        unserved = [f"{m} {e}: not here ({a.answered})" for (m, e), a in answers if a.route_failure]
    if not cell.succeeded:
        missing = [f"{m} {e}: failed ({a.answered})" for (m, e), a in answers] + missing
    verdict = (
        "breaking"
        if missing or cell.counts[0]
        else "compatible with deviations"
        if cell.counts[1] or unserved
        else "compatible"
    )
    return verdict, (missing + unserved + _finding_reasons(cell))[:MAX_REASONS]


def verdict_frame(
    cells: Cells, role_of: Mapping[str, str], by: Sequence[str] = ("family", "transport")
) -> pd.DataFrame:
    """One verdict per cell, with its reasons and counts, baseline first."""
    columns = ["label", *by, "role", *VERDICT_COLUMNS[4:]]
    if not cells:
        return pd.DataFrame(columns=["label", "role", *by, *VERDICT_COLUMNS[4:]])
    rows = []
    for key, cell in cells.items():
        role = role_of.get(str(key[0]), "capture")
        verdict, reasons = _verdict(cell, role)
        rows.append((*key, role, verdict, reasons, *cell.counts, cell.exchanges))
    out = pd.DataFrame.from_records(rows, columns=columns)
    out["_role"] = out["role"].map(ROLES.index)
    order = ["_role", "label", *by]
    if "family" in by:
        out["_family"] = out["family"].map(lambda f: FAMILIES.index(f) if f in FAMILIES else 99)
        order = ["_role", "label", "_family", *by]
    out = out.sort_values(order, kind="stable").drop(columns=["_role", "_family"], errors="ignore")
    return out[["label", "role", *by, *VERDICT_COLUMNS[4:]]].reset_index(drop=True)
