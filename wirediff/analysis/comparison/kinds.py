"""List the divergence kinds and severities, which are contracts, in contract order.

`wirediff check`'s choices and the report's kind order come from them; `summary.schema.json`'s
enums, the README's table and the kinds the comparison code can produce are tested against them
in tests/unit/test_kinds.py.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KINDS", "SEVERITIES", "Kind", "kind_names", "severity_rank"]


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    compared: bool = True
    """Found by comparing a candidate with its baseline (else on one answer alone)."""


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
        Kind("header"),
        Kind("client"),
        Kind("conformance", compared=False),
    )
}
"""The divergence kinds, by name.

`client` extends the contract: the real openai SDK raises or loses data on the answer. It is
found on one answer alone and between a candidate and its baseline."""

SEVERITIES = ("breaking", "deviation", "cosmetic")
"""The severities, worst first.

`breaking`: the client raises, gets wrong data or loses what it asked for, as the SDK impact
harness measures. `deviation`: the spec, the Open Responses requirements or a stream grammar
is violated and the SDK tolerates it. `cosmetic`: headers, extra keys, metadata, any value
the spec allows."""


def severity_rank(severity: str) -> int:
    """Rank a severity: 0 for `breaking`, 1 `deviation`, 2 `cosmetic`, 3 anything else."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def kind_names(*, compared_only: bool = False) -> tuple[str, ...]:
    """Name the kinds in contract order.

    `compared_only` leaves out `conformance`, which needs no baseline."""
    return tuple(k.name for k in KINDS.values() if k.compared or not compared_only)
