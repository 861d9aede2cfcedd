"""Drop noise and ignored paths, which are not reported.

Noise control follows Diffy: whatever differs between two answers that *should* be the same is
noise and dropped from every pair of that original. Such answers are two replays of one original
to the same label, a replay to the baseline's own label, or repeated originals of one request.
Ignore patterns from `wirediff.yaml` drop paths the user names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from wirediff.analysis.comparison.compare import Finding, compare
from wirediff.analysis.comparison.observe import Observed
from wirediff.analysis.comparison.shapes import ancestors

__all__ = [
    "glob_regex",
    "group_noise",
    "ignored",
    "is_noise",
    "noise_among",
    "pair_noise",
]

NOISE_SAMPLES = 8
"""How many repeats of one answer are compared to learn its noise (Diffy samples too)."""


def is_noise(path: str, noise: set[str] | frozenset[str]) -> bool:
    return bool(noise) and (path in noise or any(a in noise for a in ancestors(path)))


def noise_among(observed: Sequence[Observed]) -> set[str]:
    """Find the paths that differ between answers that should be the same.

    The first answer is compared with a sample of the others."""
    paths: set[str] = set()
    first = observed[0]
    for other in observed[1 : 1 + NOISE_SAMPLES]:
        paths.update(f.path for f in compare(first, other))
        paths.update(f.path for f in compare(other, first))
    return paths


def glob_regex(patterns: Sequence[str]) -> re.Pattern[str] | None:
    """Compile ignore patterns: `usage.*` matches `usage` and everything under it.

    `*` spans dots and brackets."""
    parts = []
    for pat in patterns:
        rx = ".*".join(re.escape(piece) for piece in pat.split("*"))
        if pat.endswith(".*"):
            rx = f"{rx}|{re.escape(pat[:-2])}"
        parts.append(f"(?:{rx})")
    return re.compile("|".join(parts)) if parts else None


_EVENT_PREFIX = re.compile(r"^events\[[^\]]*\]\.")


def ignored(paths: pd.Series, rx: re.Pattern[str] | None) -> np.ndarray:
    """Tell whether each path matches the ignore patterns, with or without its event prefix.

    The patterns are compiled by `glob_regex`."""
    if rx is None or paths.empty:
        return np.zeros(len(paths), dtype=bool)
    paths = paths.astype(str)
    bare = paths.str.replace(_EVENT_PREFIX, "", regex=True)
    return (paths.str.fullmatch(rx) | bare.str.fullmatch(rx)).to_numpy(dtype=bool)


def group_noise(
    cands: dict[int, Observed], found: dict[int, list[Finding]], labels: list[str], base_label: str
) -> tuple[set[str], dict[str, set[str]]]:
    """Learn the noise of one original from its replays.

    Replays to its own label give noise for every label; several replays to the same label give
    noise for that label."""
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


def pair_noise(
    pairs: pd.DataFrame, observed: Mapping[int, Observed]
) -> tuple[np.ndarray, list[frozenset[str]]]:
    """Number the noise of each pair into a list of noise sets, where 0 is none.

    Each row of `pairs` has `b` and `c`, the readings of its baseline's and its candidate's
    answers; `bid`, its original; `label`, `baseline_label`; and `request`, its original's
    request digest; in the order the analysis meets them. Noise comes from replays to the
    baseline's own label and several replays to one label, by `group_noise`, and from originals
    that repeat one request: what differs among the first `1 + NOISE_SAMPLES` of them, for each,
    by `noise_among`."""
    sets: list[frozenset[str]] = [frozenset()]
    out = np.zeros(len(pairs), dtype=np.int64)
    if not len(pairs):
        return out, sets
    repeats = _repeat_noise(pairs, observed)
    dup = pairs.duplicated(["bid", "label"], keep=False).to_numpy()
    own = (pairs["label"] == pairs["baseline_label"]).to_numpy(dtype=bool)
    noisy = set(pairs["bid"].to_numpy()[dup | own].tolist()) | set(repeats)
    if not noisy:
        return out, sets
    at = np.flatnonzero(pairs["bid"].isin(list(noisy)).to_numpy())
    found: dict[tuple[int, int], list[Finding]] = {}
    numbered: dict[frozenset[str], int] = {sets[0]: 0}
    for _, group in pairs.iloc[at].assign(_at=at).groupby("bid", sort=False):
        b = int(group["b"].to_numpy()[0])
        c_keys, labels = group["c"].tolist(), group["label"].tolist()
        for k in c_keys:
            if (b, k) not in found:
                found[(b, k)] = compare(observed[b], observed[k])
        cands = {p: observed[k] for p, k in enumerate(c_keys)}
        mine = {p: found[(b, k)] for p, k in enumerate(c_keys)}
        baseline_label = str(group["baseline_label"].to_numpy()[0])
        everywhere, by_label = group_noise(cands, mine, labels, baseline_label)
        everywhere |= repeats.get(int(group["bid"].to_numpy()[0]), set())
        for where, label in zip(group["_at"].tolist(), labels, strict=True):
            noise = frozenset(everywhere | by_label.get(label, set()))
            number = numbered.get(noise)
            if number is None:
                number = numbered[noise] = len(sets)
                sets.append(noise)
            out[where] = number
    return out, sets


def _repeat_noise(pairs: pd.DataFrame, observed: Mapping[int, Observed]) -> dict[int, set[str]]:
    """Learn, per original that repeats another's request, the noise of that request's repeats.

    It is learned from the first `1 + NOISE_SAMPLES` originals of the pairs, in their order."""
    firsts = pairs.drop_duplicates("bid")
    repeated = firsts[firsts.duplicated("request", keep=False)]
    out: dict[int, set[str]] = {}
    learned: dict[tuple[int, ...], set[str]] = {}
    for _, group in repeated.groupby("request", sort=False):
        sample = tuple(group["b"].tolist()[: 1 + NOISE_SAMPLES])
        if sample not in learned:
            learned[sample] = noise_among([observed[k] for k in sample])
        if learned[sample]:
            out.update(dict.fromkeys(group["bid"].tolist(), learned[sample]))
    return out
