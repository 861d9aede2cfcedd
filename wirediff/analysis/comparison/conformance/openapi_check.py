"""Check answers against OpenAI's OpenAPI document, the first source.

The document is read by `wirediff.analysis.comparison.openapi`. Every answer is held against the
schema its route and status name: JSON bodies, each chat chunk, each Responses stream event by
its `type`, and every error. Errors are 4xx and 5xx bodies, and error bodies or events in a 2xx,
which are one problem, "an error where the answer belongs", plus the error object's own.
Validation is remembered per structure, never run per exchange.
"""

from __future__ import annotations

from wirediff._types import JSON, Event, RecordResponse
from wirediff.analysis.comparison.compare import error_message, short
from wirediff.analysis.comparison.conformance.problems import (
    Problem,
    data_events,
    event_prefix,
    join,
    pointer_path,
    remembered,
)
from wirediff.analysis.comparison.openapi import spec_validator
from wirediff.analysis.comparison.openapi.validator import ANSWER_SCHEMAS, ERROR_SCHEMA, EVENT_UNION
from wirediff.analysis.comparison.shapes import structure
from wirediff.record.tags import is_error_body

__all__ = [
    "body_problems",
    "chunk_problems",
    "error_problems",
    "event_problems",
    "missing_body",
    "schemas_for",
]

SCHEMAS = "#/components/schemas"
DOC_ROUTES: dict[tuple[str, str], tuple[str, str]] = {
    ("POST", "/v1/chat/completions"): ("post", "/chat/completions"),
    ("POST", "/v1/responses"): ("post", "/responses"),
    ("GET", "/v1/responses/{id}"): ("get", "/responses/{response_id}"),
    ("POST", "/v1/responses/compact"): ("post", "/responses/compact"),
    ("GET", "/v1/responses/{id}/input_items"): ("get", "/responses/{response_id}/input_items"),
    ("POST", "/v1/embeddings"): ("post", "/embeddings"),
    ("POST", "/v1/completions"): ("post", "/completions"),
    ("GET", "/v1/models"): ("get", "/models"),
    ("GET", "/v1/models/{id}"): ("get", "/models/{model}"),
}
"""A recorded route (method, wirediff's endpoint template) → its path in the document."""
Check = tuple[str, str, str]
_checked: dict[tuple[str, int], tuple[Check, ...]] = {}


def schemas_for(method: str | None, endpoint: str | None) -> tuple[str, str | None] | None:
    """Return a route's JSON answer schema and SSE event data schema, if the document has it."""
    route = DOC_ROUTES.get((str(method), str(endpoint)))
    return ANSWER_SCHEMAS.get(route) if route else None


def _source() -> str:
    return spec_validator().source


def issues(schema: str, data: JSON) -> tuple[Check, ...]:
    """List `(path, message, pointer)` of each issue, remembered per structure."""

    def compute() -> tuple[Check, ...]:
        found = spec_validator().validate(schema, data)
        return tuple((pointer_path(i.instance, i.message), i.message, i.schema) for i in found)

    return remembered(_checked, (schema, structure(data)), compute)


def _problems(
    checks: tuple[Check, ...], prefix: str = "", position: int | None = None
) -> list[Problem]:
    source = _source()
    return [Problem(join(prefix, p), m, source, ptr, position) for p, m, ptr in checks]


def _misplaced_error(
    doc: JSON, schema: str | None, prefix: str, position: int | None = None
) -> list[Problem]:
    """Report an error in a 2xx answer as one problem, then the error object's own.

    `schema` is the schema that belongs there, if the route has one."""
    where = join(prefix, "error")
    belongs = f"where {schema} belongs" if schema else "in a 2xx answer"
    message = f"an error {belongs}: {error_message(doc)}"
    return [
        Problem(where, message, _source(), f"{SCHEMAS}/{schema or ERROR_SCHEMA}", position),
        *_problems(issues(ERROR_SCHEMA, doc), prefix, position),
    ]


def body_problems(schema: str | None, body: JSON) -> list[Problem]:
    """Check a 2xx JSON body against its route's schema, and an error body on any route."""
    if is_error_body(body):
        return _misplaced_error(body, schema, "")
    return _problems(issues(schema, body)) if schema else []


def missing_body(schema: str, resp: RecordResponse) -> list[Problem]:
    """Report a 2xx without the JSON body its route's schema describes."""
    text, empty = resp.get("text"), resp.get("text") is None and resp.get("b64") is None
    null = isinstance(text, str) and text.strip() == "null"  # JSON, recorded as its text
    what = "no body" if empty else "the JSON body null" if null else "a body that is not JSON"
    return [Problem("body", f"{what} where {schema} belongs", _source(), f"{SCHEMAS}/{schema}")]


def error_problems(resp: RecordResponse) -> list[Problem]:
    """Check a 4xx or 5xx answer against `ErrorResponse`."""
    body = resp.get("body")
    if body is not None:
        return _problems(issues(ERROR_SCHEMA, body))
    text = resp.get("text")
    got = f"text: {short(text)}" if text else "no body"
    return [
        Problem("error", f"not a JSON error object ({got})", _source(), f"{SCHEMAS}/{ERROR_SCHEMA}")
    ]


def chunk_problems(events: list[Event], schema: str) -> list[Problem]:
    """Check each chunk of a chat or completions stream against its schema."""
    out: list[Problem] = []
    for i, data in data_events(events):
        if is_error_body(data):
            out += _misplaced_error(data, schema, "events[error]", i)
        else:
            out += _problems(issues(schema, data), "events[chunk]", i)
    return out


def event_problems(events: list[Event]) -> list[Problem]:
    """Check each Responses stream event against the schema its `type` names."""
    out: list[Problem] = []
    source = _source()
    for i, data in data_events(events):
        typ = data.get("type")
        if not isinstance(typ, str) and is_error_body(data):
            out += _misplaced_error(data, EVENT_UNION, "events[error]", i)
            continue
        label = typ if isinstance(typ, str) else "?"
        for path, message, pointer in issues(EVENT_UNION, data):
            out.append(Problem(event_prefix(label, path), message, source, pointer, i))
    return out
