"""Grade the probe: its records go through the analysis with no baseline.

It checks conformance to the OpenAPI document, the SDK types and Open Responses, the stream
grammars, severity by client impact, and the diagnoses of what failed.

Kept to this one module so that a change in how severity is measured is taken up here alone.
It uses the in-memory analysis (`analyze`, `diagnose_index`): a probe is a few dozen exchanges.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from wirediff._types import Record
from wirediff.analysis.index.analyze import Analysis, Diagnosed, analyze, diagnose_index

__all__ = ["Graded", "grade"]

COUNTED = ("breaking", "deviation")
"""Severities a feature's status reads (cosmetic findings are shown, never counted)."""


@dataclass
class Graded:
    """Hold the analysed probe: every finding and diagnosis, looked up by exchange."""

    analysis: Analysis
    findings: pd.DataFrame
    """Conformance and client findings (`DIVERGENCE_COLUMNS`), one per problem per exchange."""
    diagnosed: Diagnosed

    @property
    def diagnoses(self) -> pd.DataFrame:
        """Return the diagnoses in `DIAGNOSIS_COLUMNS`, one per failing chain and code."""
        return self.diagnosed.frame

    def findings_for(self, ids: Iterable[str], sources: Sequence[str] = ()) -> list[dict[str, str]]:
        """Return the breaking and deviating findings of these exchanges, worst first.

        When `sources` is given, only those of `sources`."""
        want = set(ids)
        f = self.findings
        rows = f[f["candidate_id"].isin(want) & f["severity"].isin(COUNTED)]
        if sources:
            rows = rows[rows["source"].isin(list(sources))]
        rows = rows.assign(_rank=rows["severity"].map(COUNTED.index)).sort_values(
            "_rank", kind="stable"
        )
        return [
            {str(k): str(v) for k, v in r.items() if k != "_rank"} for r in rows.to_dict("records")
        ]

    def codes_for(self, ids: Iterable[str]) -> list[str]:
        """Return the codes of the diagnoses that name any of these exchanges."""
        want = set(ids)
        return [
            str(code)
            for code, exchange_ids in zip(
                self.diagnoses["code"], self.diagnoses["exchange_ids"], strict=True
            )
            if want & set(exchange_ids)
        ]


def grade(records: list[Record]) -> Graded:
    """Grade the probe's records, whose one label is the server probed."""
    analysis = analyze(records)
    return Graded(analysis, analysis.frame(), diagnose_index(analysis.index))
