"""Check answers against the official openai SDK's own types, the second source.

The types are read through pydantic `TypeAdapter`s. They are lenient: they allow extra keys and
make many fields the spec requires optional. But they also know fields the spec snapshot does
not, such as `cache_write_tokens`, and they are what apps read. Each problem names the type and
field as its pointer, as in
`openai.types.responses.response_usage.InputTokensDetails#/cache_write_tokens`.
"""

from __future__ import annotations

import re
import typing
from functools import cache
from typing import Any, Literal

from openai.types import Completion, CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter, ValidationError

from wirediff._types import JSON, Event
from wirediff.analysis.comparison.conformance.problems import (
    Problem,
    data_events,
    event_prefix,
    join,
    remembered,
)
from wirediff.analysis.comparison.impact import SDK_SOURCE
from wirediff.analysis.comparison.shapes import structure
from wirediff.record.tags import is_error_body

__all__ = [
    "body_model",
    "body_problems",
    "chunk_problems",
    "event_problems",
    "loc_path",
    "prune_union_errors",
    "validate",
]

Check = tuple[str, str, str]
"""A problem an SDK type finds: `(path inside the checked value, message, pointer)`."""
_checked: dict[tuple[Any, int], tuple[Check, ...]] = {}


class ModelList(BaseModel):
    """Type `GET /v1/models`, which the SDK pages over without a model of its own."""

    object: Literal["list"]
    data: list[Model]


@cache
def adapter(model: Any) -> TypeAdapter[Any]:
    """Build one TypeAdapter per type for the life of the process: building them is the cost."""
    return TypeAdapter(model)


@cache
def response_event_types() -> dict[str, Any]:
    """Map each `type` literal to its event model.

    The SDK's union carries its discriminator in openai's own metadata, which pydantic does not
    see, so this dispatches instead of trying all ~50 members."""
    union = typing.get_args(ResponseStreamEvent)[0]
    out: dict[str, Any] = {}
    for member in typing.get_args(union):
        for literal in typing.get_args(member.model_fields["type"].annotation):
            out[literal] = member
    return out


ROUTES: dict[tuple[str | None, str | None], Any] = {
    ("POST", "/v1/chat/completions"): ChatCompletion,
    ("GET", "/v1/chat/completions/{id}"): ChatCompletion,
    ("POST", "/v1/responses"): Response,
    ("GET", "/v1/responses/{id}"): Response,
    ("POST", "/v1/responses/{id}/cancel"): Response,
    ("GET", "/v1/models"): ModelList,
    ("GET", "/v1/models/{id}"): Model,
    ("POST", "/v1/completions"): Completion,
    ("POST", "/v1/embeddings"): CreateEmbeddingResponse,
}
"""The SDK type a JSON answer to each route parses as."""


def body_model(endpoint: str | None, method: str | None) -> Any:
    return ROUTES.get((method, endpoint))


_FIELD = re.compile(r"[a-z_][a-z0-9_]*")


def _is_union_tag(segment: object) -> bool:
    """Tell a union member's name, which pydantic puts in an error's location inside a union."""
    return isinstance(segment, str) and not _FIELD.fullmatch(segment)


def prune_union_errors(errors: list[dict[str, Any]], depth: int = 0) -> list[dict[str, Any]]:
    """Keep the errors of the union member the input meant, the one whose `type` literal matched.

    The complaints of every member it was never meant to be are dropped."""
    plain: list[dict[str, Any]] = []
    unions: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
    for err in errors:
        loc = err["loc"]
        k = next((i for i in range(depth, len(loc)) if _is_union_tag(loc[i])), None)
        if k is None:
            plain.append(err)
        else:
            unions.setdefault(tuple(loc[:k]), {}).setdefault(loc[k], []).append(err)
    for point, branches in unions.items():
        k = len(point)
        viable = {tag: errs for tag, errs in branches.items() if not _rejects(errs, k)}
        if viable:
            errs = min(viable.values(), key=len)
            plain += prune_union_errors(
                [{**e, "loc": e["loc"][:k] + e["loc"][k + 1 :]} for e in errs], k
            )
        else:
            plain.append({"loc": point, "msg": _no_member_message(branches)})
    return plain


def _rejects(errs: list[dict[str, Any]], k: int) -> bool:
    """Tell whether a member rejects the input outright: a wrong kind of value or `type`."""
    for err in errs:
        rest = err["loc"][k + 1 :]
        if not rest or (rest == ("type",) and err.get("type") == "literal_error"):
            return True
    return False


def _no_member_message(branches: dict[str, list[dict[str, Any]]]) -> str:
    expected = sorted(
        {
            str(err.get("ctx", {}).get("expected"))
            for errs in branches.values()
            for err in errs
            if err.get("type") == "literal_error" and err["loc"][-1] == "type"
        }
    )
    if expected:
        return f"`type` is none of {', '.join(expected)}"
    return f"matches none of the allowed forms ({', '.join(sorted(branches))})"


def loc_path(loc: typing.Sequence[Any]) -> str:
    """Turn a pydantic location into a path: `("choices", 0, "message")` → `choices[].message`."""
    path = ""
    for seg in loc:
        if isinstance(seg, int):
            path += "[]"
        else:
            path = f"{path}.{seg}" if path else str(seg)
    return path


def _pointer(model: Any, loc: typing.Sequence[Any]) -> str:
    fields = "/".join(str(seg) for seg in loc if not isinstance(seg, int))
    return f"{model.__module__}.{model.__qualname__}#/{fields}"


def validate(model: Any, data: JSON) -> list[Check]:
    """List the SDK type's complaints about `data`, one per distinct path."""
    try:
        adapter(model).validate_python(data)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
        return [
            (loc_path(err["loc"]), f"{err['msg']} ({model.__name__})", _pointer(model, err["loc"]))
            for err in prune_union_errors([dict(err) for err in errors])
        ]
    return []


def checked(model: Any, data: JSON) -> tuple[Check, ...]:
    """Call `validate`, remembered per structure.

    The same structure always gets the same verdict, and the bodies and events of one kind repeat
    a few structures."""
    return remembered(_checked, (model, structure(data)), lambda: tuple(validate(model, data)))


def _problems(
    checks: typing.Iterable[Check], prefix: str = "", position: int | None = None
) -> list[Problem]:
    return [Problem(join(prefix, p), m, SDK_SOURCE, ptr, position) for p, m, ptr in checks]


def body_problems(model: Any, body: JSON) -> list[Problem]:
    return _problems(checked(model, body))


def chunk_problems(events: list[Event], model: Any = ChatCompletionChunk) -> list[Problem]:
    """Check each chunk of a chat or completions stream against the SDK's chunk type."""
    out: list[Problem] = []
    for i, data in data_events(events):
        if not is_error_body(data):
            out += _problems(checked(model, data), "events[chunk]", i)
    return out


def event_problems(events: list[Event]) -> list[Problem]:
    """Check each typed Responses event against the SDK type its `type` names.

    An unknown type is the OpenAPI check's to report."""
    types = response_event_types()
    out: list[Problem] = []
    for i, data in data_events(events):
        typ = data.get("type")
        model = types.get(typ) if isinstance(typ, str) else None
        if model is None:
            continue
        for path, message, pointer in checked(model, data):
            out.append(Problem(event_prefix(str(typ), path), message, SDK_SOURCE, pointer, i))
    return out
