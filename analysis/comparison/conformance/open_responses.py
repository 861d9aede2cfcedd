"""The third source: what only the Open Responses specification requires of a Response.

OpenAI's document requires fewer keys of a Response than OpenAI sends; the Open Responses
schema (`ResponseResource`, openresponses/openresponses `schema/components/schemas/
ResponseResource.json`) requires every key OpenAI sends, possibly null. Only the keys it adds
to the OpenAI document's `required` are checked here, and cited as `open-responses`: a key
both require is the OpenAPI check's to report.
"""

from __future__ import annotations

from wirediff._types import JSON, Event
from wirediff.analysis.comparison.conformance.problems import OPEN_RESPONSES, Problem, event_prefix
from wirediff.analysis.comparison.observe import DONE

__all__ = ["ONLY_OPEN_RESPONSES", "event_problems", "response_problems"]

ONLY_OPEN_RESPONSES = (
    "status",
    "completed_at",
    "previous_response_id",
    "truncation",
    "text",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "reasoning",
    "user",
    "usage",
    "max_output_tokens",
    "max_tool_calls",
    "store",
    "background",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
)
"""`ResponseResource.required` less the OpenAI document's `Response` required keys."""
POINTER = "#/components/schemas/ResponseResource/required"
MESSAGE = "required key missing (Open Responses)"


def response_problems(
    response: JSON, prefix: str = "", position: int | None = None
) -> list[Problem]:
    """The Open-Responses-only keys a Response object lacks."""
    if not isinstance(response, dict) or response.get("object") != "response":
        return []
    return [
        Problem(f"{prefix}{key}", MESSAGE, OPEN_RESPONSES, POINTER, position)
        for key in ONLY_OPEN_RESPONSES
        if key not in response
    ]


def event_problems(events: list[Event]) -> list[Problem]:
    """The same for the Response that `response.created`, `.completed` and the like carry."""
    out: list[Problem] = []
    for i, ev in enumerate(events):
        data = ev.get("data")
        if ev.get("partial") or data == DONE or not isinstance(data, dict):
            continue
        if isinstance(data.get("response"), dict):
            prefix = event_prefix(str(data.get("type")), "response") + "."
            out += response_problems(data["response"], prefix, i)
    return out
