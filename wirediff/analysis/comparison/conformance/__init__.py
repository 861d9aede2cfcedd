"""Conformance without a baseline: each answer against three references — OpenAI's OpenAPI
document (`openapi_check`), the openai SDK's types (`sdk_types`), the keys only Open Responses
requires (`open_responses`) — and the stream grammars (`grammar`); `checks` runs them per
record with the SDK impact harness and builds the frame. Every row names its `source` and a
`schema_pointer` into it; checks are remembered per answer structure, never run per exchange.
"""

from __future__ import annotations

from wirediff.analysis.comparison.conformance.checks import (
    CONFORMANCE_COLUMNS,
    RecordCheck,
    check_records,
    conformance,
    record_problems,
)

__all__ = ["CONFORMANCE_COLUMNS", "RecordCheck", "check_records", "conformance", "record_problems"]
