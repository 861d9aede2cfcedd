"""Pairing: each replay record against the original it re-sent (`replay_of`).

A session replayed to several targets gives one row per (original, target) replay, so
every target label is compared with the same baseline.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["PAIR_COLUMNS", "first_event_ms", "pairs_frame"]

PAIR_COLUMNS = [
    "pair_id",
    "label",
    "baseline_label",
    "baseline_id",
    "candidate_id",
    "family",
    "endpoint",
    "method",
    "stream",
    "baseline_status",
    "candidate_status",
    "baseline_ttfb_ms",
    "candidate_ttfb_ms",
    "baseline_duration_ms",
    "candidate_duration_ms",
    "baseline_first_event_ms",
    "candidate_first_event_ms",
]

_SIDE_COLUMNS = ["id", "label", "status", "ttfb_ms", "duration_ms", "first_event_ms"]
_REQUEST_COLUMNS = ["family", "endpoint", "method", "stream"]


def first_event_ms(events: pd.DataFrame) -> pd.Series:
    """Time of each exchange's first SSE event, indexed by exchange id."""
    if events.empty:
        return pd.Series(dtype="float64", name="first_event_ms")
    return events.groupby("id", sort=False)["t_ms"].min().rename("first_event_ms")


def pairs_frame(exchanges: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """One row per replay with its original; the request columns come from the original."""
    ex = exchanges.drop_duplicates("id")
    ex = ex.assign(first_event_ms=ex["id"].map(first_event_ms(events)).astype("float64"))
    replays = ex.loc[ex["replay_of"].notna(), ["id", "replay_of"]]
    candidate = ex[_SIDE_COLUMNS].add_prefix("candidate_")
    baseline = ex[_SIDE_COLUMNS + _REQUEST_COLUMNS].rename(
        columns={c: f"baseline_{c}" for c in _SIDE_COLUMNS}
    )
    pairs = replays.merge(candidate, left_on="id", right_on="candidate_id").merge(
        baseline, left_on="replay_of", right_on="baseline_id"
    )
    pairs = pairs.rename(columns={"id": "pair_id", "candidate_label": "label"})
    for side in ("baseline", "candidate"):
        pairs[f"{side}_status"] = pairs[f"{side}_status"].astype("Int64")
        for col in ("ttfb_ms", "duration_ms", "first_event_ms"):
            pairs[f"{side}_{col}"] = pairs[f"{side}_{col}"].astype("float64")
    return pairs[PAIR_COLUMNS].reset_index(drop=True)
