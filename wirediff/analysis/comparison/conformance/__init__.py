"""Check each answer for conformance without a baseline, against three references and a grammar.

The references are OpenAI's OpenAPI document in `openapi_check`, the openai SDK's types in
`sdk_types`, and the keys only Open Responses requires in `open_responses`; `grammar` holds the
stream grammars. `checks` runs them on one record with the SDK impact harness. Every row names
its `source` and a `schema_pointer` into it; checks are remembered per answer structure, never
run per exchange.
"""

from __future__ import annotations

from wirediff.analysis.comparison.conformance.checks import (
    ConformanceRow,
    RecordCheck,
    record_check,
    record_problems,
)

__all__ = ["ConformanceRow", "RecordCheck", "record_check", "record_problems"]
