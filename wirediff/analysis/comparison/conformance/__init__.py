"""Conformance without a baseline: each answer against three references — OpenAI's OpenAPI
document (`openapi_check`), the openai SDK's types (`sdk_types`), the keys only Open Responses
requires (`open_responses`) — and the stream grammars (`grammar`); `checks` runs them on
one record with the SDK impact harness. Every row names its `source` and a
`schema_pointer` into it; checks are remembered per answer structure, never run per exchange.
"""

from __future__ import annotations

from wirediff.analysis.comparison.conformance.checks import (
    ConformanceRow,
    RecordCheck,
    record_check,
    record_problems,
)

__all__ = ["ConformanceRow", "RecordCheck", "record_check", "record_problems"]
