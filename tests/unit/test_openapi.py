"""OpenAI's OpenAPI document as the reference: base answers that real OpenAI sends, plus one
change each, with what the document says about them (and where)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from wirediff.analysis.comparison.openapi import Issue, spec_validator
from wirediff.analysis.comparison.openapi.validator import ANSWER_SCHEMAS, ERROR_SCHEMA
from wirediff.analysis.comparison.shapes import (
    BOUNDED_NUMBERS,
    BOUNDED_TEXT,
    FREE_TEXT,
    NAME_PATTERN,
    TEXT_BOUNDS,
)

Change = Callable[[dict[str, Any]], None]
SCHEMAS = "#/components/schemas"


def chat() -> dict[str, Any]:
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": "gpt-4.1-2025-04-14",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello!",
                    "refusal": None,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 19,
            "completion_tokens": 10,
            "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
        "service_tier": "default",
        "system_fingerprint": "fp_44709d6fcb",
    }


def chunk() -> dict[str, Any]:
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "gpt-4o-mini",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
        "usage": None,
    }


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}


def response(status: str = "completed") -> dict[str, Any]:
    done = status == "completed"
    message = {
        "type": "message",
        "id": "msg_67ccd2bf17f0819081ff3bb2cf6508e6",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hi", "annotations": [], "logprobs": []}],
    }
    return {
        "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
        "object": "response",
        "created_at": 1741476542,
        "status": status,
        "completed_at": 1741476543 if done else None,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "model": "gpt-4.1-2025-04-14",
        "output": [message] if done else [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": 36,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 87,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 123,
        },
        "user": None,
        "metadata": {},
        "safety_identifier": None,
        "prompt_cache_key": None,
    }


def created() -> dict[str, Any]:
    return {"type": "response.created", "sequence_number": 0, "response": response("in_progress")}


def at(path: list[Any], value: Any = ...) -> Change:
    """Set (or, with no value, delete) the value at `path`."""

    def change(doc: dict[str, Any]) -> None:
        node: Any = doc
        for p in path[:-1]:
            node = node[p]
        if value is ...:
            del node[path[-1]]
        else:
            node[path[-1]] = value

    return change


def issues_of(schema: str, base: dict[str, Any], change: Change | None) -> list[Issue]:
    doc = copy.deepcopy(base)
    if change is not None:
        change(doc)
    return spec_validator().validate(schema, doc)


def embeddings() -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.1, -0.2]}],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
    }


def completion() -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1589478378,
        "model": "gpt-3.5-turbo-instruct",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"text": "A test", "index": 0, "logprobs": None, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
    }


def model() -> dict[str, Any]:
    return {"id": "gpt-4o-mini", "object": "model", "created": 1721172741, "owned_by": "system"}


def models() -> dict[str, Any]:
    return {"object": "list", "data": [model()]}


def input_items() -> dict[str, Any]:
    item = {
        "type": "message",
        "id": "msg_abc",
        "status": "completed",
        "role": "user",
        "content": [{"type": "input_text", "text": "Tell me a story"}],
    }
    return {"object": "list", "data": [item], "first_id": "msg_abc", "last_id": "msg_abc",
            "has_more": False}  # fmt: skip


def error() -> dict[str, Any]:
    return {
        "error": {
            "message": "Incorrect API key provided",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }


CHAT, CHUNK, RESP = (
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "Response",
)
NO_STRICT = {k: v for k, v in WEATHER.items() if k != "strict"}

ACCEPTED: list[tuple[str, str, Callable[[], dict[str, Any]], Change | None]] = [
    ("chat as OpenAI sends it", CHAT, chat, None),
    ("chat usage without cache_write_tokens", CHAT, chat, None),
    ("chat usage with an extra cache_write_tokens", CHAT, chat,
     at(["usage", "prompt_tokens_details", "cache_write_tokens"], 0)),
    ("a chunk with finish_reason and usage null (nullable: true)", CHUNK, chunk, None),
    ("the include_usage chunk", CHUNK, chunk, at(["choices"], [])),
    ("a Response as OpenAI sends it", RESP, response, None),
    ("a function tool echoed with strict", RESP, response, at(["tools"], [WEATHER])),
    ("reasoning null", RESP, response, at(["reasoning"], None)),
    ("response.created with usage null (a known spec bug)", "ResponseStreamEvent", created, None),
    ("response.created without usage", "ResponseStreamEvent", created, at(["response", "usage"])),
    ("embeddings", "CreateEmbeddingResponse", embeddings, None),
    ("a legacy completion", "CreateCompletionResponse", completion, None),
    ("a model", "Model", model, None),
    ("the model list", "ListModelsResponse", models, None),
    ("a Response's input items", "ResponseItemList", input_items, None),
    ("an error", "ErrorResponse", error, None),
]  # fmt: skip

REJECTED: list[tuple[str, str, Callable[[], dict[str, Any]], Change, str, str]] = [
    ("chat system_fingerprint null", CHAT, chat, at(["system_fingerprint"], None),
     "/system_fingerprint", "CreateChatCompletionResponse/properties/system_fingerprint/type"),
    ("chat prompt_tokens_details null", CHAT, chat, at(["usage", "prompt_tokens_details"], None),
     "/usage/prompt_tokens_details", "CompletionUsage/properties/prompt_tokens_details/type"),
    ("chat message.annotations null", CHAT, chat,
     at(["choices", 0, "message", "annotations"], None), "/choices/0/message/annotations",
     "ChatCompletionResponseMessage/properties/annotations/type"),
    ("a function tool echoed without strict", RESP, response, at(["tools"], [NO_STRICT]),
     "/tools/0", "FunctionTool/required"),
    ("text null on a Response", RESP, response, at(["text"], None), "/text",
     "ResponseTextParam/type"),
    ("output_text without logprobs", RESP, response,
     at(["output", 0, "content", 0, "logprobs"]), "/output/0/content/0",
     "OutputTextContent/required"),
    ("a chunk whose object is wrong", CHUNK, chunk, at(["object"], "chat.completion"),
     "/object", "CreateChatCompletionStreamResponse/properties/object/enum"),
    ("an embedding as a string", "CreateEmbeddingResponse", embeddings,
     at(["data", 0, "embedding"], "AAAA"), "/data/0/embedding", "Embedding/properties/embedding/type"),
    ("a completion without choices", "CreateCompletionResponse", completion, at(["choices"]),
     "", "CreateCompletionResponse/required"),
    ("a model without created (common in compatible servers)", "Model", model, at(["created"]),
     "", "Model/required"),
    ("a model list whose data is not a list", "ListModelsResponse", models, at(["data"], {}),
     "/data", "ListModelsResponse/properties/data/type"),
    ("input items without has_more", "ResponseItemList", input_items, at(["has_more"]),
     "", "ResponseItemList/required"),
    ("an error without param (vLLM's flat style)", "ErrorResponse", error,
     at(["error", "param"]), "/error", "Error/required"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "schema", "base", "change"), ACCEPTED, ids=[a[0] for a in ACCEPTED]
)
def test_the_document_accepts(
    name: str, schema: str, base: Callable[[], dict[str, Any]], change: Change | None
) -> None:
    assert issues_of(schema, base(), change) == []


@pytest.mark.parametrize(
    ("name", "schema", "base", "change", "instance", "rule"), REJECTED, ids=[r[0] for r in REJECTED]
)
def test_the_document_rejects_at_a_pointer(
    name: str,
    schema: str,
    base: Callable[[], dict[str, Any]],
    change: Change,
    instance: str,
    rule: str,
) -> None:
    assert issues_of(schema, base(), None) == []
    found = issues_of(schema, base(), change)
    assert [(i.instance, i.schema) for i in found] == [(instance, f"{SCHEMAS}/{rule}")]


def test_a_union_reports_the_branch_the_answer_meant() -> None:
    delta = {
        "type": "response.output_text.delta",
        "sequence_number": 4,
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": "Hi",
    }
    found = spec_validator().validate("ResponseStreamEvent", delta)
    assert [(i.instance, i.schema) for i in found] == [
        ("", f"{SCHEMAS}/ResponseTextDeltaEvent/required")
    ]
    assert "'logprobs' is a required property" in found[0].message


def test_an_unknown_event_type_is_named() -> None:
    found = spec_validator().validate_event({"type": "response.foo", "sequence_number": 1})
    assert [(i.instance, i.message) for i in found] == [
        ("/type", "unknown Responses stream event type 'response.foo'")
    ]


def disagreements(doc: dict[str, Any]) -> list[str]:
    """Where `ANSWER_SCHEMAS` disagrees with the document's own `paths` (a new version)."""
    problems = []
    for (method, path), (body, stream) in ANSWER_SCHEMAS.items():
        op = doc["paths"].get(path, {}).get(method)
        if op is None:
            problems.append(f"{method.upper()} {path}: not in the document")
            continue
        content = op.get("responses", {}).get("200", {}).get("content", {})
        for media, want in (("application/json", body), ("text/event-stream", stream)):
            ref = content.get(media, {}).get("schema", {}).get("$ref", "")
            got = ref.rsplit("/", 1)[-1] or None
            if got is not None and got != want:
                problems.append(f"{method.upper()} {path} {media}: {got} != {want}")
    return problems


def test_the_answer_map_agrees_with_the_documents_paths() -> None:
    v = spec_validator()
    assert disagreements(v.doc) == []
    assert v.source == "openai-openapi 2.3.0"
    assert {"response.created", "response.completed", "error"} <= set(v.event_schemas)
    assert len(ANSWER_SCHEMAS) >= 9


def test_every_override_carries_evidence_and_changes_a_verdict() -> None:
    """Each known spec bug is patched for a reason: without it the document rejects null."""
    from wirediff.analysis.comparison.openapi.document import load_document
    from wirediff.analysis.comparison.openapi.validator import SpecValidator

    v = spec_validator()
    assert v.overrides and all(len(o.evidence) > 40 for o in v.overrides)
    bare = SpecValidator(load_document(), [])
    assert bare.validate("ResponseStreamEvent", created()) != []
    assert v.validate("ResponseStreamEvent", created()) == []


NUMBER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def _bounds(schemas: dict[str, Any]) -> dict[str, list[tuple[str, Any]]]:
    """Each property an answer can hold, with the bounds on its value the document sets
    anywhere below the answer schemas."""
    found: dict[str, list[tuple[str, Any]]] = {}
    seen: set[tuple[str, str | None]] = set()

    def walk(node: Any, prop: str | None) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, prop)
            return
        if not isinstance(node, dict):
            return
        if isinstance(ref := node.get("$ref"), str) and (ref, prop) not in seen:
            seen.add((ref, prop))
            walk(schemas.get(ref.rsplit("/", 1)[-1]), prop)
        for word in (*NUMBER_BOUNDS, "minLength", "maxLength", "pattern"):
            if word in node and prop is not None:
                found.setdefault(prop, []).append((word, node[word]))
        for word, value in node.items():
            if word == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    walk(sub, name)
            elif word in ("items", "allOf", "anyOf", "oneOf", "prefixItems"):
                walk(value, prop)
            elif word == "additionalProperties":
                walk(value, None)

    for answer, event in [*ANSWER_SCHEMAS.values(), (ERROR_SCHEMA, None)]:
        for name in filter(None, (answer, event)):
            walk(schemas[name], None)
    return found


def test_structures_keep_every_value_the_document_bounds() -> None:
    """Verdicts are remembered per structure, and a structure drops numbers and free text:
    each bounded number and each bounded free text of an answer must be kept (to its value,
    its length's bound, its pattern) or the first verdict would stand for the others."""
    bounds = _bounds(spec_validator().doc["components"]["schemas"])
    numbers = {p for p, b in bounds.items() if any(w in NUMBER_BOUNDS for w, _ in b)}
    texts = {p for p, b in bounds.items() if p in FREE_TEXT}
    assert numbers == BOUNDED_NUMBERS and texts == BOUNDED_TEXT
    lengths = {v for p in texts for w, v in bounds[p] if w in ("minLength", "maxLength")}
    assert {n for n in lengths if n > 1} <= set(TEXT_BOUNDS)
    patterns = {(p, v) for p in texts for w, v in bounds[p] if w == "pattern"}
    assert patterns == {("name", NAME_PATTERN.pattern)}
