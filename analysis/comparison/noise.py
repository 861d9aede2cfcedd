"""Noise and ignore patterns: what is not reported.

Noise control follows Diffy: whatever differs between two answers that *should* be the
same — two replays of one original to the same label, a replay to the baseline's own
label, or repeated originals of one request — is noise and dropped from every pair of
that original. Ignore patterns (`wirediff.yaml`) drop paths the user names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from wirediff._types import Record
from wirediff.analysis.comparison.compare import Finding, compare
from wirediff.analysis.comparison.observe import Observed, observe
from wirediff.analysis.comparison.shapes import ancestors

__all__ = [
    "drop_ignored",
    "glob_regex",
    "group_noise",
    "is_noise",
    "noise_among",
    "repeated_original_noise",
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


def request_key(record: Record) -> tuple[Any, ...]:
    """What makes two originals repeats of one request (and comparable answers)."""
    req, resp = record["request"], record["response"]
    return (
        record.get("label"),
        req.get("method"),
        req.get("path"),
        json.dumps(req.get("body"), sort_keys=True),
        resp["status"] if resp is not None else None,
    )


def repeated_original_noise(
    records_by_id: dict[str, Record], ids: Iterable[str]
) -> dict[str, set[str]]:
    """Noise learned from originals that repeat one request: per original id."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for rid in ids:
        rec = records_by_id.get(rid)
        if rec is not None:
            groups.setdefault(request_key(rec), []).append(rid)
    noise: dict[str, set[str]] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        sample = [observe(records_by_id[m]) for m in members[: 1 + NOISE_SAMPLES]]
        paths = noise_among(sample)
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
