"""Decide drop-in verdicts: can this backend replace the baseline for this traffic, and why not.

Verdicts are per endpoint family, and per transport where a family has several. `compatible`
means nothing above cosmetic; then `compatible with deviations`; `breaking` means any breaking
finding, one endpoint of the family not implemented while others work, or nothing in the cell
succeeded; `unsupported` means nothing in the cell succeeded and every failure is route-level:
404, 405 or 501 not about a model, an error in a 2xx, or a refused WebSocket upgrade.

Each verdict carries its top reasons, worst and most frequent first, headers last, in the
server's or the SDK's words, and its headline, which is what a one-sentence summary says of it.
Findings are counted as problems: the findings of every reference about one field, event or
client loss are one, as `wirediff.analysis.comparison.sameness` decides, counted once per
exchange. The baseline is judged too, by its conformance alone: every comparison inherits its
flaws.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wirediff._support import STOPPED_KINDS, error_kind, response_status, statuses_2xx
from wirediff._types import Record
from wirediff.analysis.comparison.breaks import server_words
from wirediff.analysis.comparison.kinds import SEVERITIES, severity_rank
from wirediff.analysis.comparison.pairing import sorted_codes
from wirediff.analysis.comparison.sameness import problem_key, without_ids

__all__ = [
    "FAMILIES",
    "ROLES",
    "STOPPED",
    "VERDICTS",
    "VERDICT_COLUMNS",
    "Cell",
    "Findings",
    "answer_texts",
    "as_the_baseline",
    "exchange_outcomes",
    "roles_of",
    "route_failure",
    "verdict_cells",
    "verdict_frame",
]

VERDICTS = ("compatible", "compatible with deviations", "breaking", "unsupported")
"""The drop-in verdicts, best to worst: a contract."""
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
    "headline",
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
STOPPED = "stopped"
"""The outcome of an exchange our own stop cut, of `STOPPED_KINDS`.

Like a skipped step, it says nothing about the server and no verdict counts it."""
RANKS = {s: severity_rank(s) for s in SEVERITIES}
UNSUPPORTED = "unsupported"
ROUTE_STATUSES = frozenset({404, 405, 501})
REASON_BLOCK = 1 << 18
"""Findings a cell's reasons are summed up from at a time, about."""
_POSITION = re.compile(r" \((?:event #\d+|\d+ events, first #\d+)\)")


def roles_of(labels: set[str], baseline: set[str], candidate: set[str]) -> dict[str, str]:
    """Give each label its role, ordered by role, then by label.

    `baseline` is for labels compared with: replayed from, or the baseline of independent
    captures. `candidate` is for labels compared: replayed to, or paired by content. Every other
    label is a `capture`."""
    out = {
        label: "baseline" if label in baseline else "candidate" if label in candidate else "capture"
        for label in labels
    }
    return dict(sorted(out.items(), key=lambda kv: (ROLES.index(kv[1]), kv[0])))


def route_failure(record: Record | None) -> bool:
    """Tell whether the answer says "not here".

    That is a 404, 405 or 501 not about a model; an error where a 2xx answer belongs, with
    nothing else in it; or a WebSocket upgrade refused."""
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
    """Name the outcome of each exchange: `skipped`, `stopped`, `unsupported`, a severity, or `ok`.

    The columns read are its answer's `error_kind`, `status`, `soft_error` and `route_failure`.
    `unsupported` is a route-level failure; else the outcome is the worst severity of its
    findings, from `worst`, their least rank, where -1 is none; else `ok`."""
    status = pd.to_numeric(exchanges["status"], errors="coerce")
    route = status.isin(list(ROUTE_STATUSES | {426})).to_numpy()
    soft = exchanges["soft_error"].eq(True).fillna(False).to_numpy(dtype=bool)
    unsupported = (soft | route) & exchanges["route_failure"].to_numpy(dtype=bool)
    named = np.array([*SEVERITIES, "ok"], dtype=object)
    out = named[np.where(worst >= 0, worst, len(SEVERITIES))]
    out[unsupported] = UNSUPPORTED
    out[exchanges["error_kind"].eq(SKIPPED).fillna(False).to_numpy(dtype=bool)] = SKIPPED
    out[exchanges["error_kind"].isin(STOPPED_KINDS).to_numpy(dtype=bool)] = STOPPED
    return out


@dataclass(slots=True)
class Answer:
    """Hold one method and endpoint in a cell: its first answer, and how all its exchanges went."""

    first: Any
    """Order key of its first exchange (its position in the captures)."""
    answered: str
    """The first answer: `404: the server's words`, or the failure when none came."""
    not_implemented: str
    status: str
    """The first answer's status, in short: `404`, `200 with an error body`, `timeout`."""
    route_failure: bool = True
    """Every exchange failed route-level (all)."""
    original_ok: bool = False
    """Some exchange replays an original that did not fail route-level (any)."""


@dataclass(slots=True)
class Reason:
    """Hold one problem in a cell: the findings of every reference about it.

    A problem is keyed by `sameness.problem_key`."""

    n: int
    """Exchanges it is found on."""
    rank: int
    """Its worst finding's severity rank."""
    text: str
    """The evidence or message of its worst findings that sorts first: one, whatever the order."""
    first: Any


@dataclass(slots=True)
class Cell:
    """Count what a verdict is made of for one label and family, or endpoint."""

    exchanges: int = 0
    route_failure: bool = True
    succeeded: bool = False
    answers: dict[tuple[str, str], Answer] = field(default_factory=dict)
    reasons: dict[tuple[bool, str], Reason] = field(default_factory=dict)
    """The cell's problems, by whether they are a header's and by `sameness.problem_key`."""

    @property
    def counts(self) -> list[int]:
        """Count the problems by severity, worst first."""
        out = [0] * len(SEVERITIES)
        for reason in self.reasons.values():
            if reason.rank < len(SEVERITIES):
                out[reason.rank] += 1
        return out


Cells = dict[tuple[Hashable, ...], Cell]


@dataclass
class Findings:
    """Hold findings as verdict cells read them: per finding its exchange and its fact.

    A fact is a row of `facts`: `severity`, `kind`, `path`, `evidence` and `text`, the evidence,
    else the message, ids left out, with any `assumed_note`. Millions of findings share a few
    hundred facts, so only numbers are held per finding."""

    row: np.ndarray
    fact: np.ndarray
    facts: pd.DataFrame

    def __len__(self) -> int:
        return len(self.row)


def answer_texts(record: Record) -> tuple[str, str, str]:
    """Put an answer in a verdict's words, in a not-implemented reason's, and as a short status.

    The first reads like `404: the server's words`, the last like `404` or `200 with an error
    body`."""
    status = response_status(record)
    shown = f"{status or error_kind(record) or 'no answer'}"
    if record["tags"].get("soft_error"):
        shown = f"{shown} with an error body"
    words = without_ids(server_words(record))
    return (
        shown + (f": {words}" if words else ""),
        shown + (f": {words})" if words else ")"),
        shown,
    )


def verdict_cells(
    exchanges: pd.DataFrame, findings: Findings, by: Sequence[str] = ("family", "transport")
) -> Cells:
    """Build the cells `verdict_frame` judges, per label and `by`.

    `exchanges` has one row each, in the captures' order: `label`, the `by` columns, `method`,
    `endpoint`, `status`, `soft_error`, `outcome` from `exchange_outcomes`; `answered`,
    `not_implemented` and `answer_status` from its answer's `answer_texts`; and `original_ok`,
    true when it was compared with an original that was sent and did not fail route-level.
    `findings` come in their order. A problem, by `problem_key`, counts once per exchange."""
    kept = ~np.isin(exchanges["outcome"].to_numpy(dtype=object), [SKIPPED, STOPPED])
    if not kept.any():
        return {}
    keys = ["label", *by]
    ex = exchanges.loc[kept, list(dict.fromkeys([*keys, "method", "endpoint", "status"]))]
    status = pd.to_numeric(ex["status"], errors="coerce")
    ex = ex.assign(
        answered=exchanges["answered"].to_numpy()[kept],
        not_implemented=exchanges["not_implemented"].to_numpy()[kept],
        answer_status=exchanges["answer_status"].to_numpy()[kept],
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
    firsts = routes[["_place", "answered", "not_implemented", "answer_status"]].first()
    for (at, method, endpoint), first, answered, missing, shown, route, original in zip(
        firsts.index.tolist(),
        firsts["_place"].tolist(),
        firsts["answered"].tolist(),
        firsts["not_implemented"].tolist(),
        firsts["answer_status"].tolist(),
        routes["failing"].all().tolist(),
        routes["original_ok"].any().tolist(),
        strict=True,
    ):
        cells[at].answers[(method, endpoint)] = Answer(
            first, answered, missing, shown, route, original
        )
    if len(findings):
        cell_at = np.full(len(exchanges), -1, dtype=np.int64)
        cell_at[kept] = ex["_cell"].to_numpy()
        for at, header, key, reason in _reasons(findings, cell_at):
            cells[at].reasons[(header, key)] = reason
    return dict(zip(named, cells, strict=True))


def _reasons(findings: Findings, cell_at: np.ndarray) -> Iterator[tuple[int, bool, str, Reason]]:
    """Sum up the findings of each cell per problem: `(cell, header, problem_key, Reason)`.

    A problem's words are those of its worst findings that sort first; it counts the exchanges
    it is found on. Strings are read once per fact; the millions of findings are numbers."""
    facts = findings.facts
    said, texts = sorted_codes(facts["text"])
    said += 1  # a missing text, -1, sorts first
    base = len(texts) + 1
    rank = np.array([RANKS.get(s, len(SEVERITIES)) for s in facts["severity"].tolist()])
    # the first finding of a problem in the order of severity, words and place: the least of
    # one number that sorts alike, below 8 * texts * findings
    sort_key = (rank * base + said).astype(np.int64)
    numbers: dict[tuple[bool, str], int] = {}
    problem = np.array(
        [
            numbers.setdefault((k == "header", problem_key(str(p), str(e))), len(numbers))
            for k, p, e in zip(
                *(facts[c].tolist() for c in ("kind", "path", "evidence")), strict=True
            )
        ],
        dtype=np.int64,
    )
    problem_keys = list(numbers)
    row, fact, n = findings.row, findings.fact, len(findings)
    parts = []
    # in blocks of exchanges, so that what is held per finding is held for a block at a time
    step = max(1, len(cell_at) * REASON_BLOCK // max(n, 1))
    for lo in range(0, len(cell_at), step):
        at = np.flatnonzero((row >= lo) & (row < lo + step))
        cell = cell_at[row[at]]
        at, cell = at[cell >= 0], cell[cell >= 0]
        block = pd.DataFrame(
            {
                "key": cell.astype(np.int64) * len(problem_keys) + problem[fact[at]],
                "best": sort_key[fact[at]] * n + at,
                "first": at,
                "exchanges": row[at],
            }
        ).groupby("key", sort=False)
        parts.append(block.agg({"best": "min", "first": "min", "exchanges": "nunique"}))
    if not parts:
        return
    # an exchange is in one block: its problems' counts add up
    found = (
        pd.concat(parts).groupby(level=0).agg({"best": "min", "first": "min", "exchanges": "sum"})
    )
    for key, best, first, exchanges in found.sort_values("best").itertuples(name=None):
        cell_of, problem_of = divmod(int(key), len(problem_keys))
        is_header, words = problem_keys[problem_of]
        worst, text = divmod(int(best) // n, base)
        reason = Reason(int(exchanges), worst, texts[text - 1], int(first))
        yield cell_of, bool(is_header), words, reason


def _top_reasons(cell: Cell) -> list[tuple[int, str, int]]:
    """List one line per problem with its severity rank and the exchanges it is found on.

    They come worst and most frequent first, headers last; a line is the evidence, the SDK's or
    the server's words, where there is some."""
    top = sorted(cell.reasons.items(), key=lambda kv: (kv[1].rank, kv[0][0], -kv[1].n, kv[1].first))
    out: list[tuple[int, str, int]] = []
    for _, reason in top:
        line = _POSITION.sub("", str(reason.text))
        if all(not r.startswith(line) for _, r, _ in out):
            out.append((reason.rank, line, reason.n))
        if len(out) == MAX_REASONS:
            break
    return out


def _verdict(cell: Cell, role: str) -> tuple[str, list[str], str]:
    """Decide a cell's verdict, its reasons and its headline.

    The headline is what follows the family's name in a sentence, such as `is not implemented
    (404)` or `breaks: …`, or nothing when it is compatible."""
    answers = sorted(cell.answers.items())
    if cell.route_failure:
        reasons = [f"{m} {e}: not here ({a.answered})" for (m, e), a in answers]
        statuses = ", ".join(dict.fromkeys(a.status for _, a in answers))
        return UNSUPPORTED, reasons[:MAX_REASONS], f"is not implemented ({statuses})"
    missing, unserved, headline = [], [], ""
    if role == "candidate":
        gone = [((m, e), a) for (m, e), a in answers if a.route_failure and a.original_ok]
        missing = [f"{m} {e}: not implemented ({a.not_implemented}" for (m, e), a in gone]
        if gone:
            headline = "lacks " + ", ".join(f"{m} {e} ({a.status})" for (m, e), a in gone)
    elif role == "baseline":  # a route of the API it does not serve, while others work
        unserved = [f"{m} {e}: not here ({a.answered})" for (m, e), a in answers if a.route_failure]
    if not cell.succeeded:
        missing = [f"{m} {e}: failed ({a.answered})" for (m, e), a in answers] + missing
        statuses = ", ".join(dict.fromkeys(a.status for _, a in answers))
        headline = f"fails on every call ({statuses})"
    counts = cell.counts
    top = _top_reasons(cell)
    if not headline and counts[0]:
        headline = "breaks: " + next(text for rank, text, _ in top if rank == 0)
    verdict = (
        "breaking"
        if missing or counts[0]
        else "compatible with deviations"
        if counts[1] or unserved
        else "compatible"
    )
    lines = [f"{text} (x{n})" if n > 1 else text for _, text, n in top]
    return verdict, (missing + unserved + lines)[:MAX_REASONS], headline


def verdict_frame(
    cells: Cells, role_of: Mapping[str, str], by: Sequence[str] = ("family", "transport")
) -> pd.DataFrame:
    """Judge each cell, with its reasons and counts, baseline first."""
    columns = ["label", *by, "role", *VERDICT_COLUMNS[4:]]
    if not cells:
        return pd.DataFrame(columns=["label", "role", *by, *VERDICT_COLUMNS[4:]])
    rows = []
    for key, cell in cells.items():
        role = role_of.get(str(key[0]), "capture")
        verdict, reasons, headline = _verdict(cell, role)
        rows.append((*key, role, verdict, reasons, *cell.counts, cell.exchanges, headline))
    out = pd.DataFrame.from_records(rows, columns=columns)
    out["_role"] = out["role"].map(ROLES.index)
    order = ["_role", "label", *by]
    if "family" in by:
        out["_family"] = out["family"].map(lambda f: FAMILIES.index(f) if f in FAMILIES else 99)
        order = ["_role", "label", "_family", *by]
    out = out.sort_values(order, kind="stable").drop(columns=["_role", "_family"], errors="ignore")
    return out[["label", "role", *by, *VERDICT_COLUMNS[4:]]].reset_index(drop=True)


def as_the_baseline(verdicts: pd.DataFrame) -> np.ndarray:
    """Mark the candidates' `unsupported` cells that do as the baseline's `unsupported` cell does.

    No breaking problem sets them apart from it: no reason the candidate cannot replace the
    baseline there, so the gate does not fail the verdict and the bottom line says neither
    serves it."""
    rows = verdicts[["role", "family", "transport", "verdict", "breaking"]].itertuples(index=False)
    table = list(rows)
    unserved = {(f, t) for role, f, t, v, _ in table if role == "baseline" and v == UNSUPPORTED}
    return np.array(
        [
            role == "candidate" and v == UNSUPPORTED and not breaking and (f, t) in unserved
            for role, f, t, v, breaking in table
        ],
        dtype=bool,
    )
