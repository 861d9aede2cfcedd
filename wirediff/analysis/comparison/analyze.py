"""One call from records to every table the report and the CLI read."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from wirediff._support import paused_gc, read_yaml
from wirediff._types import Record
from wirediff.analysis.comparison.conformance import check_records
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS, divergences
from wirediff.analysis.comparison.frames import events_frame, exchanges_frame
from wirediff.analysis.comparison.noise import drop_ignored
from wirediff.analysis.comparison.pairing import (
    Baseline,
    ContentLinks,
    first_event_ms,
    pair_exchanges,
)
from wirediff.analysis.comparison.severity import judge
from wirediff.analysis.comparison.shapes import known_structures
from wirediff.analysis.comparison.verdicts import route_failure, verdicts
from wirediff.record.store import first_of_each_id

__all__ = [
    "LATENCY_COLUMNS",
    "Analysis",
    "analyze",
    "findings_of",
    "latency_frame",
    "load_ignore",
]

CONFIG_NAME = "wirediff.yaml"
LATENCY_COLUMNS = [
    "label",
    "exchanges",
    "ttfb_ms_median",
    "ttfb_ms_p90",
    "first_event_ms_median",
    "first_event_ms_p90",
    "duration_ms_median",
    "duration_ms_p90",
]
_TIMINGS = ("ttfb_ms", "first_event_ms", "duration_ms")


@dataclass
class Analysis:
    """The analysed captures: records by id and the frames derived from them."""

    records_by_id: dict[str, Record]
    exchanges: pd.DataFrame
    events: pd.DataFrame
    pairs: pd.DataFrame
    divergences: pd.DataFrame
    conformance: pd.DataFrame
    latency: pd.DataFrame
    verdicts: pd.DataFrame
    """Per label, family and transport (`wirediff.analysis.comparison.verdicts`)."""
    unmatched: pd.DataFrame
    """Exchanges of independent captures without a counterpart (`pairing.UNMATCHED_COLUMNS`)."""
    baseline: Baseline


def findings_of(divergences: pd.DataFrame, conformance: pd.DataFrame) -> pd.DataFrame:
    """Divergences and conformance rows in one frame."""
    frames = [f for f in (divergences, conformance) if len(f)]
    if not frames:
        return pd.DataFrame(columns=DIVERGENCE_COLUMNS)
    return pd.concat(frames, ignore_index=True)[DIVERGENCE_COLUMNS]


def latency_frame(exchanges: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Per label: median and 90th percentile of time to first byte, to first event, and
    of the whole exchange (numbers to compare, not divergences)."""
    if exchanges.empty:
        return pd.DataFrame(columns=LATENCY_COLUMNS)
    timed = exchanges[["id", "label", "ttfb_ms", "duration_ms"]].assign(
        first_event_ms=exchanges["id"].map(first_event_ms(events)).astype("float64"),
        ttfb_ms=exchanges["ttfb_ms"].astype("float64"),
        duration_ms=exchanges["duration_ms"].astype("float64"),
    )
    grouped = timed.groupby("label", sort=True, dropna=False)
    out = grouped["id"].count().rename("exchanges").to_frame()
    for col in _TIMINGS:
        out[f"{col}_median"] = grouped[col].median()
        out[f"{col}_p90"] = grouped[col].quantile(0.9)
    return out.reset_index()[LATENCY_COLUMNS]


def analyze(
    records: list[Record],
    *,
    ignore: Sequence[str] = (),
    baseline: str | None = None,
    content: ContentLinks | None = None,
    repeat_noise: Mapping[int, set[str]] | None = None,
    judge_cells: bool = True,
) -> Analysis:
    """Pair, diff, validate and judge a set of captures (the first record of each id:
    `first_of_each_id`); `ignore` patterns drop paths from
    the divergences and the conformance rows alike; `baseline` is the label independent
    captures are compared with (`wirediff.analysis.comparison.pairing`), `content` their
    pairs when `records` are a part of the captures (made over all of them). `repeat_noise`:
    when `records` are a part of the captures (an original with all its replays), the noise
    of repeated requests learned from all of them
    (`wirediff.analysis.comparison.noise.repeated_original_noise`); then the verdicts are
    judged on the merge of all parts, not here (`judge_cells` false).

    The cyclic garbage collector is paused meanwhile: the analysis makes no reference
    cycles worth collecting, only many objects that live until it returns, over which
    repeated full collections would take a tenth of its time."""
    with paused_gc():
        records = first_of_each_id(records)
        records_by_id = {r["id"]: r for r in records}
        exchanges = exchanges_frame(records)
        events = events_frame(records)
        pairing = pair_exchanges(
            exchanges, events, records_by_id, baseline=baseline, content=content
        )
        pairs = pairing.pairs
        with known_structures():  # both look at the same bodies and events
            found = divergences(records_by_id, pairs, ignore=ignore, repeat_noise=repeat_noise)
            checked, checks = check_records(records)
        checked = drop_ignored(checked, ignore)
        found = drop_ignored(
            judge(unserved_left_out(found, records_by_id), pairs, records_by_id, checks), ignore
        )
        return Analysis(
            records_by_id=records_by_id,
            exchanges=exchanges,
            events=events,
            pairs=pairs,
            divergences=found,
            conformance=checked,
            latency=latency_frame(exchanges, events),
            verdicts=(
                verdicts(exchanges, findings_of(found, checked), records_by_id, pairs)
                if judge_cells
                else pd.DataFrame(columns=["label", "role", "family", "transport"])
            ),
            unmatched=pairing.unmatched,
            baseline=pairing.baseline,
        )


def unserved_left_out(found: pd.DataFrame, records_by_id: Mapping[str, Record]) -> pd.DataFrame:
    """The divergences less those from a baseline answer that says "not here" (a route it
    does not serve: `route_failure`): the candidates' answers there have nothing to differ
    from; the baseline's own verdict says the route is missing."""
    if found.empty:
        return found
    bases = found["baseline_id"].drop_duplicates().tolist()
    unserved = [b for b in bases if route_failure(records_by_id.get(b))]
    return found[~found["baseline_id"].isin(unserved)] if unserved else found


def load_ignore(path: str | os.PathLike[str]) -> list[str]:
    """The `ignore:` path patterns of a `wirediff.yaml` (a file, or a directory holding
    one); none when there is no such file. A malformed file is a `ValueError` with a
    one-line reason."""
    p = Path(path)
    if p.is_dir():
        p = p / CONFIG_NAME
    if not p.is_file():
        return []
    config = read_yaml(p)
    if config is None:
        return []
    if not isinstance(config, dict):
        raise ValueError(f"{p}: expected a mapping with an `ignore:` list")
    patterns = config.get("ignore") or []
    if not isinstance(patterns, list) or not all(isinstance(x, str) for x in patterns):
        raise ValueError(f"{p}: `ignore` must be a list of path patterns")
    return list(patterns)
