"""Judge a check's candidates against its baseline, by the rules of `wirediff check`.

The engine scans the captures, each argument its own scope, into one index; here the baseline's
label is chosen, the candidates are refused where they cannot be judged, and the analysis gives
the verdicts and counts the gate reads."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from wirediff.analysis.comparison.pairing import CONTENT, REPLAY, text, unreplayed
from wirediff.analysis.comparison.verdicts import verdict_frame
from wirediff.analysis.index.analyze import GateCounts, analyse
from wirediff.engine.run import Run
from wirediff.errors import UsageError
from wirediff.record.store import log as store_log

__all__ = ["CheckResult", "judge"]


@dataclass
class CheckResult:
    verdicts: pd.DataFrame
    gate: GateCounts
    baseline: int
    """Exchanges of the baseline's label in the baseline capture."""
    label: str
    """The baseline's label."""
    replayed: dict[str, int]
    """Per candidate label: its replays paired with their originals."""
    by_content: dict[str, int]
    """Per candidate label: its originals paired by content with the baseline's."""
    unmatched: pd.DataFrame
    """Exchanges without a counterpart (`UNMATCHED_COLUMNS`): of independent captures, and the
    baseline's a replayed-to candidate has no replay of (`unreplayed`)."""


def judge(
    run: Run,
    baseline: str,
    candidates: Sequence[str],
    label: str | None = None,
    *,
    ignore: Sequence[str] = (),
) -> CheckResult:
    """Judge the candidates against the baseline and give what the gate reads.

    The baseline's `label` is by default that of most of its originals; `ignore` holds path
    patterns left out of the findings, as `report`'s. Without candidates, the baseline's
    other labels are the candidates, as in a dataset exported from several captures. A
    candidate none of whose exchanges pairs with one of the captures, by replay or by
    content, is a usage error."""
    index, scope = run.scan([baseline, *candidates], scoped=True)
    rows = index.rows
    mine = rows[scope == 0]
    labels = text(mine["label"])
    originals = Counter(labels[mine["replay_of"].isna().to_numpy()].tolist())
    if not originals:
        raise UsageError(f"{baseline}: no original exchange to compare with (only replays)")
    base_label = originals.most_common(1)[0][0]
    if label is not None:
        known = list(pd.unique(labels))
        if label not in known:
            raise UsageError(
                f"--baseline {label}: {baseline} has no exchange of that label "
                f"(labels: {', '.join(known)})"
            )
        base_label = label
    same = (text(rows["label"]) == base_label).to_numpy() & (scope > 0)
    if same.any():
        path = candidates[int(scope[same][0]) - 1]
        raise UsageError(
            f"{path}: its exchanges carry the baseline's label, {base_label}; check "
            "compares labels: capture or replay the candidate with a label of its own (--label NAME)"
        )
    analysis = analyse(index, ignore=ignore, baseline=base_label)
    pairs = analysis.pairs
    paired = set(scope[pairs["c"].to_numpy()].tolist())
    if not candidates and not len(pairs):
        raise UsageError(
            f"{baseline}: no exchange of another label pairs with its baseline ({base_label}); "
            "name the candidates' captures after it"
        )
    stray = set(pd.unique(text(rows["label"]))) - {base_label} - analysis.pair_labels()[1]
    if not candidates and stray:  # in a file of their own, a usage error
        store_log.warning(
            f"{baseline}: {', '.join(sorted(stray))}: no exchange pairs with the baseline "
            f"({base_label}); not compared"
        )
    present = set(scope.tolist())
    for n, path in enumerate(candidates, 1):
        if n not in present:  # each record's id was read before, in an earlier input
            raise UsageError(
                f"{path}: every exchange repeats one read before, by its id, as when a "
                f"dataset holds this capture: give each once (`wirediff check {baseline}` "
                "alone gates the other labels it holds)"
            )
        if n not in paired:
            raise UsageError(
                f"{path}: no exchange pairs with {baseline} ({base_label}): none replays "
                "it and none asks what it asks (capture the same app, or `wirediff replay` it)"
            )
    sent = pairs["sent"].to_numpy(dtype=bool)
    how = pairs["pairing"].astype(str).to_numpy()[sent]
    by_label = text(rows["label"]).to_numpy()[pairs["c"].to_numpy()]
    cut = sorted(set(by_label.tolist()) - set(by_label[sent].tolist()))
    if cut:  # judged by nothing, it would pass the gate
        raise UsageError(
            f"{cut[0]}: every exchange paired with the baseline was cut by a stop (a "
            "replay's Ctrl-C, or the capture's), so none can be judged: resume the replay "
            "with the same command, or capture again"
        )
    content = Counter(by_label[sent][how == CONTENT].tolist())
    replayed = Counter(by_label[sent][how == REPLAY].tolist())
    replays = (pairs["pairing"] == REPLAY).to_numpy()
    missing = unreplayed(rows, pairs["c"].to_numpy()[replays], pairs["b"].to_numpy()[replays],
                         base_label)  # fmt: skip
    for name, n in Counter(missing["label"]).items():
        store_log.warning(
            f"{name}: {n:,} of the baseline's calls {'has' if n == 1 else 'have'} no replay to "
            "it, so not judged: a replay stopped or filtered, or a shadow's mirrors dropped"
        )
    unmatched = analysis.unmatched
    if len(missing):  # a label both replayed and captured may name a call twice
        unmatched = pd.concat([unmatched, missing], ignore_index=True)
        unmatched = unmatched.drop_duplicates(["label", "side", "id"], ignore_index=True)
    return CheckResult(
        verdict_frame(analysis.cells(), analysis.roles()),
        analysis.gate(),
        int((labels == base_label).sum()),
        base_label,
        dict(sorted(replayed.items())),
        dict(sorted(content.items())),
        unmatched,
    )
