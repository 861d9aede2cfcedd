"""Divergences: how a candidate backend's answer differs on the wire from the baseline's.

Each record is reduced to what it shows (`observe`), pairs are compared kind by kind
(`compare`), noise and ignored paths are dropped (`noise`), and what remains becomes the
divergence frame: one row per finding per pair, in `DIVERGENCE_COLUMNS`. Severities are
given afterwards (`wirediff.analysis.comparison.severity`): they depend on what the SDK makes
of both answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from wirediff._support import says_of_server
from wirediff._types import Record
from wirediff.analysis.comparison.compare import Finding, compare
from wirediff.analysis.comparison.noise import (
    drop_ignored,
    group_noise,
    is_noise,
    repeated_original_noise,
)
from wirediff.analysis.comparison.observe import observe
from wirediff.analysis.comparison.pairing import PAIR_COLUMNS

__all__ = ["BASELINE_SOURCE", "DIVERGENCE_COLUMNS", "FINDING_COLUMNS", "PAIR_META", "divergences"]

PAIR_META = PAIR_COLUMNS[: PAIR_COLUMNS.index("endpoint") + 1]
"""The pair a finding belongs to."""
FINDING_COLUMNS = [
    "kind",
    "path",
    "baseline",
    "candidate",
    "severity",
    "source",
    "schema_pointer",
    "evidence",
    "message",
]
"""A finding: what differs (or breaks a rule) where, how much it matters (`severity`), by what
reference (`source`: the baseline's answer, the OpenAPI document, the SDK…, with a JSON
pointer into it), and for a breaking one the SDK's or the server's own words (`evidence`)."""
DIVERGENCE_COLUMNS = PAIR_META + FINDING_COLUMNS
BASELINE_SOURCE = "baseline"
"""The `source` of a divergence: the baseline's answer to the same request."""


def divergences(
    records_by_id: dict[str, Record],
    pairs: pd.DataFrame,
    *,
    ignore: Sequence[str] = (),
    repeat_noise: Mapping[int, set[str]] | None = None,
) -> pd.DataFrame:
    """One row per finding per pair, noise and ignored paths removed.

    Replay steps recorded as skipped (never sent: what they build on failed) are not
    compared; the failure they follow is the finding. Nor are pairs of which one side was
    cut by the capture's stop (`STOPPED_IN_FLIGHT`). `repeat_noise`: the noise of
    repeated requests, learned beforehand (`wirediff.analysis.comparison.noise`), when
    these pairs are a part of the captures.
    """
    sent = [
        says_of_server(records_by_id[b]) and says_of_server(records_by_id[c])
        for b, c in zip(pairs["baseline_id"].tolist(), pairs["candidate_id"].tolist(), strict=True)
    ]
    pairs = pairs.loc[sent] if not all(sent) else pairs
    if pairs.empty:
        return pd.DataFrame(columns=DIVERGENCE_COLUMNS)
    base_ids = pairs["baseline_id"].tolist()
    cand_ids = pairs["candidate_id"].tolist()
    labels = pairs["label"].tolist()
    base_labels = pairs["baseline_label"].tolist()
    groups: dict[str, list[int]] = {}
    for pos, bid in enumerate(base_ids):
        groups.setdefault(bid, []).append(pos)
    noise_of = repeated_original_noise(records_by_id, groups, repeat_noise)

    positions: list[int] = []
    findings: list[Finding] = []
    for bid, members in groups.items():
        base = records_by_id.get(bid)
        if base is None:
            continue
        observed_base = observe(base)
        cands = {
            p: observe(records_by_id[cand_ids[p]]) for p in members if cand_ids[p] in records_by_id
        }
        found = {p: compare(observed_base, obs) for p, obs in cands.items()}
        noise, by_label = group_noise(cands, found, labels, base_labels[members[0]])
        noise |= noise_of.get(bid, set())
        for p, fs in found.items():
            label_noise = noise | by_label.get(labels[p], set())
            for f in fs:
                if not is_noise(f.path, label_noise):
                    positions.append(p)
                    findings.append(f)
    return _frame(pairs, positions, findings, ignore)


def _frame(
    pairs: pd.DataFrame, positions: list[int], findings: list[Finding], ignore: Sequence[str]
) -> pd.DataFrame:
    if not findings:
        return pd.DataFrame(columns=DIVERGENCE_COLUMNS)
    meta = pairs[PAIR_META].iloc[positions].reset_index(drop=True)
    # Remembered comparisons hand out the same findings again: build each one's row once.
    rows: dict[int, int] = {}
    distinct: list[Finding] = []
    which = []
    for f in findings:
        row = rows.get(id(f))
        if row is None:
            row = rows[id(f)] = len(distinct)
            distinct.append(f)
        which.append(row)
    found = pd.DataFrame.from_records(
        [
            (f.kind, f.path, f.baseline, f.candidate, "", BASELINE_SOURCE, "", "", f.message)
            for f in distinct
        ],
        columns=FINDING_COLUMNS,
    )
    found = found.take(which).reset_index(drop=True)
    frame = pd.concat([meta, found], axis=1)
    return drop_ignored(frame, ignore)[DIVERGENCE_COLUMNS]
