"""Identify the provider behind a chain, with the evidence and how much it is worth.

A product is named only by a mark that product alone leaves: a header it sets about itself, such
as `x-litellm-version`, `openai-version`, or a `Server` or `X-Powered-By` that names a product;
an error answer in its own words, which is a profile's signature; or a body mark, such as
`system_fingerprint: fp_ollama`. A web framework's defaults are shared by every server built on
it: `server: uvicorn`, `X-Powered-By: Express`, FastAPI's `{"detail": "Not Found"}`, Go's `404
page not found`. They are reported as the framework and name no product. Without a mark the
provider is `unknown`, and the remedies stay generic.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

from wirediff.analysis.diagnosis.view import ExchangeView
from wirediff.profiles import load_profiles, match_signature

__all__ = ["PROVIDER_NAMES", "UNKNOWN", "Provider", "identify"]

UNKNOWN = "unknown"
PROVIDER_NAMES = {
    "lmstudio": "LM Studio",
    "ollama": "Ollama",
    "vllm": "vLLM",
    "litellm": "LiteLLM",
    "openai": "OpenAI",
}

# Headers only one product sets about itself: (header, provider).
PRODUCT_HEADERS: list[tuple[str, str]] = [
    ("openai-version", "openai"),
    ("openai-organization", "openai"),
    ("x-litellm-version", "litellm"),
    ("x-litellm-call-id", "litellm"),
]
# `Server` / `X-Powered-By` tokens of web frameworks, servers and proxies: shared by every
# application built on them (llama-cpp-python, open-responses-server, vLLM and LiteLLM all
# answer `server: uvicorn`; LM Studio and any Node app `X-Powered-By: Express`).
FRAMEWORKS = frozenset(
    [
        "uvicorn",
        "hypercorn",
        "gunicorn",
        "daphne",
        "granian",
        "waitress",
        "werkzeug",
        "basehttp",
        "python",
        "tornadoserver",
        "aiohttp",
        "cheroot",
        "twistedweb",
        "express",
        "koa",
        "next.js",
        "php",
        "asp.net",
        "kestrel",
        "jetty",
        "nginx",
        "openresty",
        "tengine",
        "apache",
        "caddy",
        "envoy",
        "istio-envoy",
        "cloudflare",
        "lighttpd",
        "microsoft-iis",
        "cowboy",
        "h2o",
        "traefik",
        "haproxy",
        "varnish",
        "squid",
        "kong",
        "apisix",
        "awselb",
        "elb",
        "gfe",
        "gws",
        "google",
        "akamaighost",
    ]
)
_PRODUCT = re.compile(r"[A-Za-z][\w.\-]*")
GO_PLAIN = re.compile(r"^\s*\d{3} (page not found|method not allowed)\s*$")
"""Go net/http's default error bodies."""


@dataclass
class Provider:
    """Name who answered: a profile name or a product's own name, or `unknown`."""

    name: str = UNKNOWN
    confidence: str = "none"
    """`high`: the server names itself; `medium`: an answer or mark only it produces."""
    evidence: list[str] = field(default_factory=list)

    @property
    def known(self) -> bool:
        return self.name != UNKNOWN

    @property
    def display(self) -> str:
        """Name it as the prose does: its product name, or "the server"."""
        return PROVIDER_NAMES.get(self.name, self.name) if self.known else "the server"

    @property
    def profile(self) -> str | None:
        """Return the profile whose remedies apply, if it has one."""
        return self.name if self.name in load_profiles() else None


@cache
def _framework_signatures() -> dict[str, str]:
    """Map the signature ids a profile marks as a framework's default answer to the framework."""
    return {
        str(sig["id"]): str(sig["framework"])
        for prof in load_profiles().values()
        for sig in prof.get("signatures", [])
        if sig.get("framework")
    }


def _token(value: str) -> str:
    """Name the software a `Server` or `X-Powered-By` value names, lower-cased.

    `BaseHTTP/0.6 Python/3.11` gives `basehttp`, `Jetty(9.4.z)` gives `jetty`."""
    m = _PRODUCT.match(value.strip())
    return m.group(0).lower() if m else ""


def _framework(token: str) -> bool:
    """Tell a framework, server or proxy, also in a variant such as `hypercorn-h11`."""
    return token in FRAMEWORKS or token.split("-", 1)[0] in FRAMEWORKS


def _signature(x: ExchangeView) -> str | None:
    sig = x.rec["tags"].get("signature")
    resp = x.rec.get("response")
    if sig is None and x.status is not None and not x.ok:
        headers = resp["headers"] if resp is not None else []
        sig = match_signature(x.status, headers, x.body_text)
    return str(sig) if sig else None


def _marks(x: ExchangeView) -> tuple[tuple[str, str, str] | None, list[str]]:
    """Find the provider mark of one exchange, if any, and the framework evidence it shows.

    The mark is a `(provider, confidence, evidence)` triple."""
    frameworks: list[str] = []
    for name, provider in PRODUCT_HEADERS:
        got = x.header(name)
        if got is not None:
            return (provider, "high", f"{name}: {got}"), frameworks
    for name in ("server", "x-powered-by"):
        got = x.header(name)
        token = _token(got or "")
        if not token:
            continue
        if _framework(token):
            frameworks.append(f"{name}: {got}")
        else:
            return (token, "high", f"{name}: {got}"), frameworks
    sig = _signature(x)
    framework = _framework_signatures().get(sig or "")
    if sig and not framework:
        return (sig.split(".", 1)[0], "medium", f"signature {sig}"), frameworks
    if isinstance(x.body, dict) and x.body.get("system_fingerprint") == "fp_ollama":
        return ("ollama", "medium", "system_fingerprint: fp_ollama"), frameworks
    if framework:
        frameworks.append(f"{framework}'s default answer (signature {sig})")
    elif isinstance(x.body, dict) and set(x.body) == {"detail"}:
        frameworks.append('FastAPI-style {"detail": …} body')
    elif x.ctype == "text/plain" and x.text and GO_PLAIN.match(x.text):
        frameworks.append(f"text/plain {x.text.strip()!r} (Go net/http's default)")
    return None, frameworks


def identify(xs: list[ExchangeView], others: Iterable[ExchangeView] = ()) -> Provider:
    """Identify the provider behind a chain, latest answers first, else behind `others`.

    `others` are the other exchanges of the same backend. Without a mark, the provider is
    `unknown`, with the frameworks seen."""
    seen: list[str] = []
    for x, where in [*((x, "") for x in reversed(xs)), *((x, " elsewhere") for x in others)]:
        mark, frameworks = _marks(x)
        seen.extend(f for f in frameworks if f not in seen)
        if mark is not None:
            name, confidence, why = mark
            on = f" (on {x.method} {x.path})" if where else ""
            return Provider(
                name, confidence, [f"provider {name}, {confidence} confidence: {why}{on}"]
            )
    if seen:
        why = f"{'; '.join(seen)}: a framework, which names no product"
    else:
        why = "no header or answer names the server"
    return Provider(evidence=[f"provider unknown: {why}"])
