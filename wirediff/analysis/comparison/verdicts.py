"""Drop-in verdicts: can this backend replace the baseline for this traffic, per endpoint
family (and transport, where a family has several), and why not.

`compatible` (nothing above cosmetic), `compatible with deviations`, `breaking` (any breaking
finding, one endpoint of the family not implemented while others work, or nothing in the cell
succeeded), `unsupported`
(nothing in the cell succeeded and every failure is route-level: 404/405/501 not about a
model, an error in a 2xx, a refused WebSocket upgrade). Each verdict carries its top reasons,
worst and most frequent first, headers last, in the server's or the SDK's words, and its
headline (what a one-sentence summary says of it). Findings are counted as problems: the
findings of every reference about one field, event or client loss are one
(`wirediff.analysis.comparison.sameness`), counted once per exchange. The
baseline is judged too, by its conformance alone: every comparison inherits its flaws.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from wirediff._support import STOPPED_IN_FLIGHT, error_kind, response_status, statuses_2xx
from wirediff._types import Record
from wirediff.analysis.comparison.assumed import assumed_note
from wirediff.analysis.comparison.breaks import server_words
from wirediff.analysis.comparison.kinds import SEVERITIES, severity_rank
from wirediff.analysis.comparison.sameness import problem_key, without_ids

__all__ = [
    "FAMILIES",
    "ROLES",
    "STOPPED",
    "VERDICTS",
    "VERDICT_COLUMNS",
    "Cell",
    "exchange_outcomes",
    "roles",
    "roles_of",
    "route_failure",
    "verdict_cells",
    "verdict_frame",
    "verdicts",
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
"""The outcome of an exchange the capture's stop cut (`STOPPED_IN_FLIGHT`): like a skipped
step, it says nothing about the server and no verdict counts it."""
RANKS = {s: severity_rank(s) for s in SEVERITIES}
UNSUPPORTED = "unsupported"
ROUTE_STATUSES = frozenset({404, 405, 501})
_POSITION = re.compile(r" \((?:event #\d+|\d+ events, first #\d+)\)")


def roles(exchanges: pd.DataFrame, pairs: pd.DataFrame) -> dict[str, str]:
    """`baseline` for labels compared with (replayed from, or the baseline of independent
    captures), `candidate` for labels compared (replayed to, or paired by content), else
    `capture`; in that order, then by label."""
    base = set(pairs["baseline_label"].dropna().astype(str)) if len(pairs) else set()
    cand = set(pairs["label"].dropna().astype(str)) if len(pairs) else set()
    return roles_of(set(exchanges["label"].fillna("").astype(str).unique()), base, cand)


def roles_of(labels: set[str], baseline: set[str], candidate: set[str]) -> dict[str, str]:
    """`roles` from the labels of the exchanges, of the baselines and of the candidates."""
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


def _route_status(status: Any) -> bool:
    """A status that may say "not here" (a frame's missing status is `pd.NA`: not one)."""
    return isinstance(status, int) and (status in ROUTE_STATUSES or status == 426)


def exchange_outcomes(
    exchanges: pd.DataFrame, findings: pd.DataFrame, records_by_id: Mapping[str, Record]
) -> list[str]:
    """Per exchange: `skipped`, `stopped`, `unsupported` (a route-level failure), else
    the worst severity of its findings, or `ok`."""
    worst: dict[Any, int] = {}
    if len(findings):
        ranks = findings["severity"].map(RANKS).fillna(len(SEVERITIES))
        worst = ranks.groupby(findings["candidate_id"].to_numpy()).min().astype(int).to_dict()
    out = []
    for rid, kind, status, soft in zip(
        exchanges["id"].tolist(),
        exchanges["error_kind"].tolist(),
        exchanges["status"].tolist(),
        exchanges["soft_error"].tolist(),
        strict=True,
    ):
        if kind == SKIPPED:
            out.append(SKIPPED)
        elif kind == STOPPED_IN_FLIGHT:
            out.append(STOPPED)
        elif (soft is True or _route_status(status)) and route_failure(records_by_id.get(rid)):
            out.append(UNSUPPORTED)
        elif rid in worst:
            out.append(SEVERITIES[worst[rid]])
        else:
            out.append("ok")
    return out


@dataclass(slots=True)
class Answer:
    """One method and endpoint in a cell: its first answer, and how all its exchanges went."""

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

    def merge(self, other: Answer) -> None:
        if other.first < self.first:
            self.first, self.answered = other.first, other.answered
            self.not_implemented, self.status = other.not_implemented, other.status
        self.route_failure &= other.route_failure
        self.original_ok |= other.original_ok


@dataclass(slots=True)
class Reason:
    """One problem in a cell (`sameness.problem_key`): the findings of every reference
    about it."""

    n: int
    """Exchanges it is found on."""
    rank: int
    """Its worst finding's severity rank."""
    text: str
    """The evidence (or message) of its worst findings that sorts first: one, whatever the
    order."""
    first: Any

    def merge(self, other: Reason) -> None:
        self.n += other.n
        if (other.rank, other.text) < (self.rank, self.text):
            self.rank, self.text = other.rank, other.text
        self.first = min(self.first, other.first)


@dataclass(slots=True)
class Cell:
    """What a verdict is made of, for one label and family (or endpoint): counts and firsts,
    so that cells of several parts of the captures merge into the cell of the whole."""

    exchanges: int = 0
    route_failure: bool = True
    succeeded: bool = False
    answers: dict[tuple[str, str], Answer] = field(default_factory=dict)
    reasons: dict[tuple[bool, str], Reason] = field(default_factory=dict)
    """By (a header's, `sameness.problem_key`): an exchange's findings all lie in one part of
    the captures, so the parts' counts of exchanges add up."""

    @property
    def counts(self) -> list[int]:
        """Problems by severity, worst first."""
        out = [0] * len(SEVERITIES)
        for reason in self.reasons.values():
            if reason.rank < len(SEVERITIES):
                out[reason.rank] += 1
        return out

    def merge(self, other: Cell) -> None:
        self.exchanges += other.exchanges
        self.route_failure &= other.route_failure
        self.succeeded |= other.succeeded
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


def _answer_text(record: Record | None) -> tuple[str, str, str]:
    """`Answer.answered` (`404: words`), what a not-implemented reason says of it, and
    `Answer.status`."""
    if record is None:
        return "no answer", "None)", "no answer"
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
    exchanges: pd.DataFrame,
    findings: pd.DataFrame,
    records_by_id: Mapping[str, Record],
    by: Sequence[str] = ("family", "transport"),
    *,
    positions: Sequence[Any] | None = None,
    finding_order: Sequence[Any] | None = None,
    outcomes: Sequence[str] | None = None,
    pairs: pd.DataFrame | None = None,
) -> Cells:
    """The cells of `verdicts` for these exchanges and their findings. `positions` and
    `finding_order` place the rows among all the captures' (by default: as they come),
    so that the first answer and the order of reasons come out as for the whole; `pairs`
    (`pair_exchanges`) say which exchange each candidate's was compared with."""
    if exchanges.empty:
        return {}
    ex = exchanges.assign(
        label=exchanges["label"].fillna("").astype(str),
        family=exchanges["family"].fillna("other").astype(str),
        endpoint=exchanges["endpoint"].fillna("(none)").astype(str),
        transport=exchanges["transport"].fillna("http").astype(str),
        method=exchanges["method"].fillna("").astype(str),
    )
    pos = list(range(len(ex))) if positions is None else list(positions)
    if outcomes is None:
        outcomes = exchange_outcomes(ex, findings, records_by_id)
    kept = [o not in (SKIPPED, STOPPED) for o in outcomes]
    status = pd.to_numeric(ex["status"], errors="coerce")
    succeeded = (
        (statuses_2xx(status) | (status == 101)).fillna(False).astype(bool)
        & ~ex["soft_error"].eq(True)
    ).tolist()
    failing = [o == UNSUPPORTED for o in outcomes]
    ids = ex["id"].tolist()
    baseline_ok = {rid for rid, k, f in zip(ids, kept, failing, strict=True) if k and not f}
    baseline_of = (
        dict(zip(pairs["candidate_id"].tolist(), pairs["baseline_id"].tolist(), strict=True))
        if pairs is not None and len(pairs)
        else {}
    )
    keys = list(zip(*(ex[c].tolist() for c in ("label", *by)), strict=True))
    cells: Cells = {}
    place: dict[Any, list[Cell]] = {}
    columns = (ids, ex["method"].tolist(), ex["endpoint"].tolist())
    for i, (rid, method, endpoint) in enumerate(zip(*columns, strict=True)):
        if not kept[i]:
            continue
        cell = cells.get(keys[i])
        if cell is None:
            cell = cells[keys[i]] = Cell()
        place.setdefault(rid, []).append(cell)
        cell.exchanges += 1
        cell.route_failure &= failing[i]
        cell.succeeded |= succeeded[i]
        answer = cell.answers.get((method, endpoint))
        if answer is None:
            answer = cell.answers[(method, endpoint)] = Answer(
                pos[i], *_answer_text(records_by_id.get(rid))
            )
        answer.route_failure &= failing[i]
        answer.original_ok |= baseline_of.get(rid) in baseline_ok
    if len(findings):
        order = list(range(len(findings))) if finding_order is None else finding_order
        rows = zip(
            findings["candidate_id"].tolist(),
            findings["severity"].tolist(),
            findings["kind"].tolist(),
            findings["path"].tolist(),
            findings["evidence"].tolist(),
            findings["message"].tolist(),
            order,
            strict=True,
        )
        seen: set[tuple[int, tuple[bool, str], Any]] = set()
        for cid, severity, kind, path, evidence, message, first in rows:
            text = without_ids(evidence if evidence != "" else message)
            text += assumed_note(records_by_id.get(cid), path, text)
            rank = RANKS.get(severity, len(SEVERITIES))
            key = (kind == "header", problem_key(path, evidence))
            for cell in place.get(cid, ()):
                new = (id(cell), key, cid) not in seen
                seen.add((id(cell), key, cid))
                reason = cell.reasons.get(key)
                if reason is None:
                    cell.reasons[key] = Reason(1, rank, text, first)
                    continue
                reason.n += new
                if (rank, text) < (reason.rank, reason.text):
                    reason.rank, reason.text = rank, text
    return cells


def _top_reasons(cell: Cell) -> list[tuple[int, str, int]]:
    """One line per problem with its severity rank and the exchanges it is found on, worst
    and most frequent first, headers last; the evidence (the SDK's or the server's words)
    where there is some."""
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
    """The verdict, its reasons and its headline: what follows the family's name in a
    sentence (`is not implemented (404)`, `breaks: …`), or nothing when it is compatible."""
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
    """One verdict per cell, with its reasons and counts, baseline first."""
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


def verdicts(
    exchanges: pd.DataFrame,
    findings: pd.DataFrame,
    records_by_id: Mapping[str, Record],
    pairs: pd.DataFrame,
    by: Sequence[str] = ("family", "transport"),
) -> pd.DataFrame:
    """One verdict per label and `by` (family and transport; or endpoint, for the report's
    matrix), with its reasons and counts, baseline first."""
    cells = verdict_cells(exchanges, findings, records_by_id, by, pairs=pairs)
    return verdict_frame(cells, roles(exchanges, pairs), by)
