"""Describe where to replay: a target's base URL, label, key, model map and headers.

The command-line values that describe one are parsed here too."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from wirediff.errors import PlanError, UsageError
from wirediff.record.names import AUTH_HEADERS
from wirediff.record.redact import redact_url
from wirediff.replay.paths import remove_dot_segments

__all__ = [
    "Target",
    "default_label",
    "key_in",
    "key_variable",
    "parse_pairs",
    "parse_rate",
    "port_problem",
]


def key_variable(var: str | None, option: str = "--api-key-env") -> str | None:
    """Return the name of the variable that holds the key, refusing a blank one: it names none."""
    if var is not None and not var.strip():
        raise UsageError(f"{option}: empty; name the environment variable that holds the key")
    return var


def key_in(var: str, env: Mapping[str, str], said: str) -> str:
    """Read the key in the variable `var` of `env`; one not set, or empty, is a usage error.

    `said` names what asked for it, before the message."""
    key = env.get(var)
    if not key:
        why = "is empty" if key == "" else "is not set"
        raise UsageError(f"{said}: environment variable {var} {why}")
    return key


@dataclass(frozen=True)
class Target:
    """Say where to replay: the base URL as an SDK's `base_url`, e.g. `http://host:port/v1`."""

    label: str
    url: str
    api_key_env: str | None = None
    model_map: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str | None] = field(default_factory=dict)
    """Header overrides by lower-case name; `None` removes the header."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", {k.lower(): v for k, v in self.headers.items()})
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PlanError(f"target {self.label!r}: not an http(s) URL: {redact_url(self.url)!r}")
        port = port_problem(self.url)
        if port is not None:
            raise PlanError(f"target {self.label!r}: {port}")
        bad = sorted(set(self.headers) & (set(AUTH_HEADERS) | {"cookie"}))
        if bad:
            raise PlanError(
                f"target {self.label!r}: --header {bad[0]} would put a secret on the command "
                "line or in a file; use --api-key-env VAR"
            )

    @property
    def path(self) -> str:
        """Return the base path, dot segments resolved, no trailing `/`: `/v1`, or `""` for none.

        Every request sent to this target lies under it."""
        return remove_dot_segments(urlsplit(self.url).path).rstrip("/")

    @property
    def base(self) -> str:
        """Return the URL without its query or a trailing `/`.

        A path after the prefix goes onto it."""
        return self.origin + self.path

    @property
    def shown(self) -> str:
        """Show the base URL as messages and records do, credentials in it fingerprinted."""
        return redact_url(self.base)

    @property
    def origin(self) -> str:
        """Return `scheme://host:port`, the only place a request to this target goes."""
        p = urlsplit(self.url)
        return f"{p.scheme}://{p.netloc}"

    @property
    def query(self) -> str:
        """Return the target URL's own query, sent on every request.

        Azure's `api-version=…` is one."""
        return urlsplit(self.url).query

    def map_model(self, model: str) -> str:
        return self.model_map.get(model, self.model_map.get("*", model))


def port_problem(url: str) -> str | None:
    """Say why the port of an http(s) URL cannot be connected to; None when it can or has none."""
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    text = netloc.rpartition("]")[2] if netloc.startswith("[") else netloc
    _, colon, port = text.rpartition(":")
    if not colon or not port:
        return None
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"port {port!r} of {redact_url(url)} is not a number from 1 to 65535"
    return None


def default_label(url: str) -> str:
    """Label a target by its host, and port when not the scheme's default, like a capture."""
    try:
        port = port_problem(url)
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as e:  # an IPv6 host without its closing bracket
        raise PlanError(f"not a URL ({e})") from None
    if port is not None:
        raise PlanError(port)
    if not host:
        raise PlanError("no host in the URL")
    default = 443 if parts.scheme == "https" else 80
    return host if parts.port in (None, default) else f"{host}:{parts.port}"


def parse_pairs(items: Iterable[str], what: str, *, allow_empty: bool) -> dict[str, str]:
    """Parse `A=B` strings into a dict; `what` names the option in the error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or (not value and not allow_empty):
            raise PlanError(f"{what}: expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def parse_rate(text: str) -> float:
    """Parse `5`, `5/s`, `300/m`, `300/min`, `3600/h` into requests per second."""
    num, _, unit = text.strip().partition("/")
    per = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}.get(unit.strip())
    try:
        value = float(num)
    except ValueError:
        value = -1.0
    if per is None or not math.isfinite(value) or value <= 0:
        raise PlanError(f"--rate: expected a positive number per s/m/h (e.g. 5/s), got {text!r}")
    return value / per
