"""Define divergences: how a candidate backend's answer differs on the wire from the baseline's.

Each record is reduced to what it shows by `observe`, pairs are compared kind by kind by
`compare`, `noise` drops noise and ignored paths, and what remains is a finding: one row per
finding per pair, in `DIVERGENCE_COLUMNS`. `wirediff.analysis.comparison.severity` gives
severities afterwards, because they depend on what the SDK makes of both answers.
"""

from __future__ import annotations

from wirediff.analysis.comparison.pairing import PAIR_COLUMNS

__all__ = ["BASELINE_SOURCE", "DIVERGENCE_COLUMNS", "FINDING_COLUMNS", "PAIR_META"]

PAIR_META = PAIR_COLUMNS[: PAIR_COLUMNS.index("endpoint") + 1]
"""The pair a finding belongs to."""
FINDING_COLUMNS = [
    "kind",
    "path",
    "baseline",
    "candidate",
    "severity",
    "source",
    "schema_pointer",
    "evidence",
    "message",
]
"""A finding: what differs or breaks a rule where, how much it matters, and by what reference.

`severity` says how much it matters. `source` names the reference: the baseline's answer, the
OpenAPI document, the SDK…; `schema_pointer` is a JSON pointer into it. For a breaking
finding, `evidence` holds the SDK's or the server's own words."""
DIVERGENCE_COLUMNS = PAIR_META + FINDING_COLUMNS
BASELINE_SOURCE = "baseline"
"""The `source` of a divergence: the baseline's answer to the same request."""
