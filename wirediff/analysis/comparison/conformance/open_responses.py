"""Check what only the Open Responses specification requires of a Response, the third source.

OpenAI's document requires fewer keys of a Response than OpenAI sends; the Open Responses
document's `ResponseResource` requires every key OpenAI sends, possibly null. Its copy comes from
a pinned distribution: `llm_comply/specs/openresponses.json` of `llm-comply`, MIT, Open Responses
2026-04-24. Only the keys it adds to the OpenAI document's required ones are checked here, and
cited as `open-responses <version>`: a key both require is the OpenAPI check's to report.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import jsonschema

from wirediff._types import JSON, Event
from wirediff.analysis.comparison.conformance.problems import Problem, data_events, event_prefix
from wirediff.analysis.comparison.openapi import spec_validator

__all__ = [
    "event_problems",
    "is_websocket_error",
    "only_open_responses",
    "open_responses_source",
    "response_problems",
    "websocket_error_problems",
]

DOCUMENT = ("llm_comply.specs", "openresponses.json")
SCHEMA = "ResponseResource"
POINTER = f"#/components/schemas/{SCHEMA}/required"
WEBSOCKET_ERROR = "WebSocketErrorEvent"
"""The error frame of the Responses WebSocket mode, which has no `sequence_number`.

It reads `{"type": "error", "status": 400, "error": {"type", "code", "message", "param"}}`."""
MESSAGE = "required key missing (Open Responses)"


@functools.cache
def _document() -> dict[str, Any]:
    package, name = DOCUMENT
    doc: dict[str, Any] = json.loads(resources.files(package).joinpath(name).read_text("utf-8"))
    return doc


def open_responses_source() -> str:
    """Name the source by the document's own version, as in `open-responses 2026-04-24`."""
    return f"open-responses {_document()['info']['version']}"


@functools.cache
def only_open_responses() -> tuple[str, ...]:
    """List the keys `ResponseResource.required` adds to those OpenAI's `Response` requires.

    They come in the Open Responses document's order."""
    required = _document()["components"]["schemas"][SCHEMA]["required"]
    openai = spec_validator().required_keys("Response")
    return tuple(k for k in required if k not in openai)


@functools.cache
def _phases() -> tuple[str, ...]:
    """List the values an output message's `phase` may take per `Message.phase`; null is not one."""
    phase = _document()["components"]["schemas"]["Message"]["properties"]["phase"]
    return tuple(phase["enum"])


def response_problems(
    response: JSON, prefix: str = "", position: int | None = None
) -> list[Problem]:
    """Find the Open-Responses-only keys a Response object lacks, and a `phase` it does not allow.

    An output message's `phase` must be one of the values Open Responses allows: OpenAI's
    document allows null there, Open Responses does not."""
    if not isinstance(response, dict) or response.get("object") != "response":
        return []
    out = [
        Problem(f"{prefix}{key}", MESSAGE, open_responses_source(), POINTER, position)
        for key in only_open_responses()
        if key not in response
    ]
    output = response.get("output")
    wrong = [
        item["phase"]
        for item in (output if isinstance(output, list) else ())
        if isinstance(item, dict)
        and item.get("type") == "message"
        and "phase" in item
        and item["phase"] not in _phases()
    ]
    if wrong:  # one problem for the path, as for the other keys
        out.append(
            Problem(
                f"{prefix}output[].phase",
                f"{wrong[0]!r} is not one of {list(_phases())} (Open Responses)",
                open_responses_source(),
                "#/components/schemas/Message/properties/phase/enum",
                position,
            )
        )
    return out


def event_problems(events: list[Event]) -> list[Problem]:
    """Check the same for the Response that `response.created`, `.completed` and the like carry."""
    out: list[Problem] = []
    for i, data in data_events(events):
        if isinstance(data.get("response"), dict):
            prefix = event_prefix(str(data.get("type")), "response") + "."
            out += response_problems(data["response"], prefix, i)
    return out


def is_websocket_error(data: Any) -> bool:
    """Tell an error frame as the WebSocket mode sends it: `type` error, the error nested."""
    return (
        isinstance(data, dict)
        and data.get("type") == "error"
        and isinstance(data.get("error"), dict)
    )


@functools.cache
def _websocket_error_validator() -> jsonschema.protocols.Validator:
    schema = _document()["components"]["schemas"][WEBSOCKET_ERROR]
    return jsonschema.Draft202012Validator(schema)


def websocket_error_problems(data: JSON, position: int | None = None) -> list[Problem]:
    """Check a WebSocket error frame against Open Responses' `WebSocketErrorEvent`.

    The SSE error event has another schema."""
    out = []
    for err in _websocket_error_validator().iter_errors(data):
        path = ".".join(str(p) for p in err.absolute_path)
        pointer = "/".join(str(p) for p in err.absolute_schema_path)
        out.append(
            Problem(
                event_prefix("error", path),
                err.message,
                open_responses_source(),
                f"#/components/schemas/{WEBSOCKET_ERROR}/{pointer}",
                position,
            )
        )
    return out
