"""Lay out the side-by-side examples of the findings list within the report's size budget.

Each breaking finding and each deviation lays out its first example and names the others, the
same finding on other exchanges, by pair id; a cosmetic finding's values say all there is to say.
A view laid out before, character for character, is not repeated but links to the first: such is
the same baseline answer with the same line highlighted, under findings for several candidates.
The budget counts examples and the bytes of their views, so the report stays small whatever the
traffic and the size of its bodies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from markupsafe import Markup

from wirediff._types import Record
from wirediff.reports.findings import Finding, KindGroup
from wirediff.reports.formatters import anchor, wire

__all__ = ["LAID_OUT", "MAX_LAID_OUT", "MAX_VIEW_BYTES", "View", "lay_out"]

MAX_LAID_OUT = 400
"""Examples laid out side by side in the whole HTML; later ones are named by pair id."""
MAX_VIEW_BYTES = 2_000_000
"""Characters of laid-out views in the whole HTML.

With `findings.MAX_FINDINGS` this bounds the report's size, whatever the bodies."""
LAID_OUT = frozenset({"breaking", "deviation"})
"""The severities whose examples are laid out."""


@dataclass(slots=True)
class View:
    """Hold one side of a laid-out example: its lines, or a link to the same view shown earlier."""

    caption: str
    record_id: str
    anchor: str
    markup: Markup | None
    """None: the identical view is laid out under another finding (`anchor` is that view's)."""
    referenced: bool = False
    """Another finding links here (so this view carries its anchor)."""


def _shown(kinds: Iterable[KindGroup]) -> Iterable[Finding]:
    """Yield the shown findings in the order the report lists them."""
    for k in kinds:
        for p in k.paths:
            yield from (f for f in p.findings if f.shown)


def lay_out(kinds: Iterable[KindGroup], records_by_id: Mapping[str, Record]) -> None:
    """Set `views` on the findings whose first example fits the budget."""
    first: dict[str, View] = {}
    examples, size = MAX_LAID_OUT, MAX_VIEW_BYTES
    for f in _shown(kinds):
        if f.severity not in LAID_OUT or not f.examples or examples <= 0 or size <= 0:
            continue
        e = f.examples[0]
        examples -= 1
        sides = [(f.baseline_label, e.baseline_id)] if e.baseline_id else []
        for caption, rid in [*sides, (f.label, e.candidate_id)]:
            markup = wire(records_by_id.get(rid), f.path, f.kind)
            seen = first.get(markup)
            if seen is not None:
                seen.referenced = True
                f.views.append(View(caption, rid, seen.anchor, None))
                continue
            view = first[markup] = View(caption, rid, anchor("v", f.anchor, rid), markup)
            size -= len(markup)
            f.views.append(view)
