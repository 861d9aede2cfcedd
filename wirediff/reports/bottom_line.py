"""Say in one sentence per candidate whether it can replace the baseline, or what stops it.

The report, `check` and the demo open with it:

    ollama can replace openai for chat.completions and responses, with 6 deviations no
    client notices.
    lmstudio cannot replace openai: chat.completions breaks: … ; responses is not
    implemented (200 with an error body).

It is made from the drop-in verdicts of `wirediff.analysis.comparison.verdicts` alone, their
headlines and their counts of problems, so every command that judges says the same.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import pandas as pd

from wirediff._support import clip
from wirediff.analysis.comparison.verdicts import as_the_baseline

__all__ = ["bottom_line", "cell_name"]

DROP_IN = ("compatible", "compatible with deviations")
"""Verdicts under which a candidate can replace the baseline."""
HEADLINE = 200
"""Characters of one family's headline kept in a sentence."""


def _names(items: Sequence[str]) -> str:
    """List names in words: `a`, `a and b`, `a, b and c`."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def cell_name(family: str, transport: str) -> str:
    """Name a verdict's cell: its family, and its transport when that is not HTTP."""
    return family if transport == "http" else f"{family} ({transport})"


def _family(row: Mapping[Hashable, Any]) -> str:
    return cell_name(str(row["family"]), str(row["transport"]))


def _deviations(rows: Sequence[Mapping[Hashable, Any]]) -> str:
    n = sum(int(r["deviations"]) for r in rows)
    return f", with {n} deviation{'s' if n != 1 else ''} no client notices" if n else ""


def _shortened(headline: str) -> str:
    """Clip a headline to `HEADLINE` characters, closing the code span and brackets the cut opens."""
    text = clip(headline, HEADLINE)
    if text == headline:
        return text
    in_code = text.count("`") % 2 == 1
    outside = text[: text.rfind("`")] if in_code else text  # the brackets of the open code, its own
    depth = outside.count("(") - outside.count(")")
    return text + ("`" if in_code else "") + ")" * max(depth, 0)


def bottom_line(verdicts: pd.DataFrame) -> list[str]:
    """Write one sentence per candidate label of `verdicts`, the rows of `verdict_frame`, in order.

    There are none when nothing was compared."""
    rows = verdicts.to_dict("records")
    baselines = list(dict.fromkeys(str(r["label"]) for r in rows if r["role"] == "baseline"))
    if not baselines:
        return []
    base = _names(baselines)
    alike = as_the_baseline(verdicts).tolist()
    out = []
    for label in dict.fromkeys(str(r["label"]) for r in rows if r["role"] == "candidate"):
        mine = [(r, same) for r, same in zip(rows, alike, strict=True) if r["label"] == label]
        good = [r for r, _ in mine if r["verdict"] in DROP_IN]
        bad = [r for r, same in mine if r["verdict"] not in DROP_IN and not same]
        unserved = [_family(r) for r, same in mine if same]
        neither = f"; neither serves {_names(unserved)}" if unserved else ""
        if not bad and not good:
            out.append(f"Neither {label} nor {base} serves {_names(unserved)}.")
            continue
        if not bad:
            families = _names([_family(r) for r in good])
            out.append(f"{label} can replace {base} for {families}{_deviations(good)}{neither}.")
            continue
        stops = "; ".join(
            f"{_family(r)} {_shortened(str(r['headline']) or str(r['verdict'])).rstrip('.')}"
            for r in bad
        )
        rest = f"; it can for {_names([_family(r) for r in good])}" if good else ""
        out.append(f"{label} cannot replace {base}: {stops}{rest}{_deviations(good)}{neither}.")
    return out
