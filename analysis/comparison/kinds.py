"""The registry of divergence kinds (a contract), in contract order.

`wirediff check`'s choices and defaults and the report's kind order come from it;
`summary.schema.json`'s enum, the README's table and the kinds the comparison code can
produce are tested against it (tests/unit/test_kinds.py).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KINDS", "Kind", "kind_names"]


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    fails_check: bool = True
    """Whether `wirediff check` fails on this kind unless `--fail-on` says otherwise."""


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("status"),
        Kind("soft_error"),
        Kind("error_shape"),
        Kind("transport"),
        Kind("schema_missing"),
        Kind("schema_extra"),
        Kind("schema_type"),
        Kind("enum"),
        Kind("event_missing"),
        Kind("event_extra"),
        Kind("event_order"),
        Kind("event_terminal"),
        Kind("event_sequence"),
        Kind("header", fails_check=False),
        Kind("conformance", fails_check=False),
    )
}


def kind_names(*, compared_only: bool = False) -> tuple[str, ...]:
    """The kinds in contract order; `compared_only` leaves out `conformance` (no baseline)."""
    return tuple(k for k in KINDS if not (compared_only and k == "conformance"))
