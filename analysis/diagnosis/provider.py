"""The provider behind a chain: a profile's error signature, else a header or body shape
only one server family produces."""

from __future__ import annotations

import re
from functools import cache

from wirediff.analysis.diagnosis.view import ExchangeView
from wirediff.profiles import load_profiles, match_signature

__all__ = ["PROVIDER_NAMES", "guess_provider"]

PROVIDER_NAMES = {
    "lmstudio": "LM Studio",
    "ollama": "Ollama",
    "vllm": "vLLM",
    "litellm": "LiteLLM",
    "openai": "OpenAI",
}

# Response headers that name a server: (header, lower-case value substring, provider).
HEADER_HINTS: list[tuple[str, str, str]] = [
    ("x-powered-by", "express", "lmstudio"),
    ("openai-version", "", "openai"),
    ("openai-processing-ms", "", "openai"),
    ("x-litellm-version", "", "litellm"),
    ("x-litellm-call-id", "", "litellm"),
]
# Go net/http's default error bodies (Ollama is the Go server among OpenAI-compatible ones).
GO_PLAIN = re.compile(r"^\s*\d{3} (page not found|method not allowed)\s*$")


def _signature(x: ExchangeView) -> str | None:
    sig = (x.rec.get("tags") or {}).get("signature")
    if sig is None and x.status is not None and not x.ok:
        headers = (x.rec.get("response") or {}).get("headers") or []
        sig = match_signature(x.status, headers, x.body_text)
    return str(sig) if sig else None


@cache
def _profile_headers() -> list[tuple[str, str, str]]:
    """`(header, exact lower-case value, provider)` for each fixed header a profile documents."""
    out = []
    for name, prof in load_profiles().items():
        for header, value in (prof.get("headers") or {}).items():
            if "{" not in str(value):
                out.append((str(header).lower(), str(value).lower(), str(name)))
    return out


def _hint(x: ExchangeView) -> tuple[str, str] | None:
    """`(provider, evidence)` from headers and body shape."""
    for name, value, provider in HEADER_HINTS:
        got = x.header(name)
        if got is not None and value in got.lower():
            return provider, f"{name}: {got}"
    for name, value, provider in _profile_headers():
        got = x.header(name)
        if got is not None and got.lower() == value:
            return provider, f"{name}: {got}"
    if x.ctype == "text/plain" and x.text and GO_PLAIN.match(x.text):
        return "ollama", f"text/plain {x.text.strip()!r} (Go net/http default)"
    if isinstance(x.body, dict):
        if set(x.body) == {"detail"}:
            return "vllm/litellm", 'FastAPI-style {"detail": …} body'
        if x.body.get("system_fingerprint") == "fp_ollama":
            return "ollama", "system_fingerprint: fp_ollama"
    return None


def guess_provider(xs: list[ExchangeView]) -> tuple[str | None, list[str]]:
    """Most likely provider behind a chain (innermost/latest answers first)."""
    for x in reversed(xs):
        sig = _signature(x)
        if sig:
            return sig.split(".", 1)[0], [f"signature: {sig}"]
    for x in reversed(xs):
        hint = _hint(x)
        if hint:
            return hint[0], [hint[1]]
    return None, []
