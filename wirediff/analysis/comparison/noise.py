"""Noise and ignore patterns: what is not reported.

Noise control follows Diffy: whatever differs between two answers that *should* be the
same — two replays of one original to the same label, a replay to the baseline's own
label, or repeated originals of one request — is noise and dropped from every pair of
that original. Ignore patterns (`wirediff.yaml`) drop paths the user names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from wirediff._types import Record
from wirediff.analysis.comparison.compare import Finding, compare
from wirediff.analysis.comparison.observe import Observed, observe
from wirediff.analysis.comparison.shapes import ancestors
from wirediff.record.keys import request_digest, request_key

__all__ = [
    "drop_ignored",
    "glob_regex",
    "group_noise",
    "group_sample_noise",
    "is_noise",
    "noise_among",
    "repeated_original_noise",
    "request_groups",
]

NOISE_SAMPLES = 8
"""How many repeats of one answer are compared to learn its noise (Diffy samples too)."""


def is_noise(path: str, noise: set[str] | frozenset[str]) -> bool:
    return bool(noise) and (path in noise or any(a in noise for a in ancestors(path)))


def noise_among(observed: Sequence[Observed]) -> set[str]:
    """Paths that differ between answers that should be the same (the first vs a sample)."""
    paths: set[str] = set()
    first = observed[0]
    for other in observed[1 : 1 + NOISE_SAMPLES]:
        paths.update(f.path for f in compare(first, other))
        paths.update(f.path for f in compare(other, first))
    return paths


def request_groups(records_by_id: Mapping[str, Record], ids: Iterable[str]) -> list[list[str]]:
    """The originals `ids` (in order) grouped by `request_key`: repeats of one request."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for rid in ids:
        rec = records_by_id.get(rid)
        if rec is not None:
            groups.setdefault(request_key(rec), []).append(rid)
    return list(groups.values())


def group_sample_noise(sample: Sequence[Record]) -> set[str]:
    """The noise of one request's repeats, learned from its first `1 + NOISE_SAMPLES`."""
    return noise_among([observe(r) for r in sample[: 1 + NOISE_SAMPLES]])


def repeated_original_noise(
    records_by_id: Mapping[str, Record],
    ids: Iterable[str],
    known: Mapping[int, set[str]] | None = None,
) -> dict[str, set[str]]:
    """Noise learned from originals that repeat one request: per original id. With
    `known` (by `request_digest`: learned beforehand from each request's first repeats,
    which may lie elsewhere), it is looked up instead."""
    noise: dict[str, set[str]] = {}
    if known is not None:
        for rid in ids:
            rec = records_by_id.get(rid)
            paths = known.get(request_digest(rec)) if rec is not None and known else None
            if paths:
                noise[rid] = paths
        return noise
    for members in request_groups(records_by_id, ids):
        if len(members) < 2:
            continue
        paths = group_sample_noise([records_by_id[m] for m in members])
        if paths:
            for m in members:
                noise[m] = paths
    return noise


def glob_regex(patterns: Sequence[str]) -> re.Pattern[str] | None:
    """`usage.*` → matches `usage` and everything under it; `*` spans dots and brackets."""
    parts = []
    for pat in patterns:
        rx = ".*".join(re.escape(piece) for piece in pat.split("*"))
        if pat.endswith(".*"):
            rx = f"{rx}|{re.escape(pat[:-2])}"
        parts.append(f"(?:{rx})")
    return re.compile("|".join(parts)) if parts else None


_EVENT_PREFIX = re.compile(r"^events\[[^\]]*\]\.")


def drop_ignored(frame: pd.DataFrame, ignore: Sequence[str]) -> pd.DataFrame:
    """Remove rows whose path matches an ignore pattern, with or without its event prefix."""
    rx = glob_regex(ignore)
    if rx is None or frame.empty:
        return frame
    paths = frame["path"].astype(str)
    bare = paths.str.replace(_EVENT_PREFIX, "", regex=True)
    hit = paths.str.fullmatch(rx) | bare.str.fullmatch(rx)
    return frame.loc[~hit.astype(bool)].reset_index(drop=True)


def group_noise(
    cands: dict[int, Observed], found: dict[int, list[Finding]], labels: list[str], base_label: str
) -> tuple[set[str], dict[str, set[str]]]:
    """Noise for one original: from replays to its own label (for every label) and from
    several replays to the same label (for that label)."""
    per_label: dict[str, list[int]] = {}
    for p in cands:
        per_label.setdefault(labels[p], []).append(p)
    everywhere: set[str] = set()
    by_label: dict[str, set[str]] = {}
    for label, ps in per_label.items():
        if len(ps) > 1:
            by_label[label] = noise_among([cands[p] for p in ps])
        if label == base_label:
            everywhere.update(f.path for p in ps for f in found[p])
            everywhere |= by_label.get(label, set())
    return everywhere, by_label
