"""The registry of divergence kinds (a contract): `check`'s choices, the report's filters and
the README's table all derive from it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KINDS", "Kind", "kind_names"]


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    found_when: str
    fails_check: bool = True
    """Whether `wirediff check` fails on this kind unless `--fail-on` says otherwise."""


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("status", "status codes differ"),
        Kind("soft_error", "a 2xx carries an error body or an error event"),
        Kind("error_shape", "an error that is not OpenAI's `Error` object"),
        Kind("transport", "SSE asked, JSON received; another media type; no response"),
        Kind("schema_missing", "a path the baseline's body has is missing"),
        Kind("schema_extra", "a path the baseline's body lacks is present"),
        Kind("schema_type", "a path has another JSON type (arguments: string vs object)"),
        Kind("enum", "a constant field differs (object, type, role, status, finish_reason)"),
        Kind("event_missing", "an SSE event type the baseline sends is missing"),
        Kind("event_extra", "an SSE event type the baseline does not send"),
        Kind("event_order", "SSE event types in another order"),
        Kind("event_terminal", "no `[DONE]` / `response.completed`"),
        Kind("event_sequence", "`sequence_number` missing or not 0, 1, 2, …"),
        Kind("header", "content type parameters, request ids, rate-limit headers", False),
        Kind("conformance", "the spec, the SDK types or a stream grammar reject it", False),
    )
}


def kind_names(*, compared_only: bool = False) -> tuple[str, ...]:
    """The kinds in contract order; `compared_only` leaves out `conformance` (no baseline)."""
    return tuple(k for k in KINDS if not (compared_only and k == "conformance"))
