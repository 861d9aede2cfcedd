"""Load the provider profiles: each provider's documented wire behaviour, as data, one YAML each.

The same files drive the stand-in backends, name the provider behind an error with their
`signatures`, and inform the diagnosis rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

__all__ = [
    "STANDIN_HEADER",
    "Profile",
    "answer_for",
    "answer_variants",
    "fill",
    "load_bugs",
    "load_clients",
    "load_profiles",
    "load_remedies",
    "match_signature",
    "noisy",
    "profile",
    "render_answer",
    "signature_headers",
]

Profile = dict[str, Any]
REMEDIES = "remedies.yaml"
"""The diagnosis prose (summary and remedies per code), beside the profiles it names."""
STANDIN_HEADER = "x-wirediff-standin"
"""The header in which a stand-in names the profile it plays, in every answer.

Findings that rest on a profile's assumed facts say so: see
`wirediff.analysis.comparison.assumed`."""
BUGS = "bugs"
"""Stand-ins that reproduce one public bug report each, one change over a base profile."""
CLIENTS = "clients.yaml"
"""The known clients: how each names itself on the wire, and what it does with answers."""


@cache
def load_profiles() -> dict[str, Profile]:
    """Load all bundled profiles by name.

    PyYAML is imported here, when they are first needed, so the processes that record, and read a
    profile only for an error answer, start faster."""
    import yaml

    out: dict[str, Profile] = {}
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml") and entry.name not in (REMEDIES, CLIENTS):
            data = yaml.safe_load(entry.read_text(encoding="utf-8"))
            out[data["name"]] = data
    return out


def _merged(base: Any, change: Any) -> Any:
    """Merge `change` over `base`: mappings merge key by key, anything else is replaced."""
    if isinstance(base, dict) and isinstance(change, dict):
        return {**base, **{k: _merged(base.get(k), v) for k, v in change.items()}}
    return change


@cache
def load_bugs() -> dict[str, Profile]:
    """Load the bug-report stand-ins by name, each its base profile with its `change` merged in.

    The base is a provider's profile or another stand-in; an answer the `change` names replaces
    the base's whole. Each stand-in's own keys, `report`, `title`, `wire`, `noise` and `assumed`,
    sit beside."""
    import yaml

    folder = resources.files(__package__).joinpath(BUGS)
    raw = {}
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            bug = yaml.safe_load(entry.read_text(encoding="utf-8"))
            raw[bug["name"]] = bug
    out: dict[str, Profile] = {}

    def resolve(name: str) -> Profile:
        if name not in out:
            bug = raw[name]
            base = resolve(bug["base"]) if bug["base"] in raw else profile(bug["base"])
            own = {k: v for k, v in bug.items() if k != "change"}
            change = dict(bug.get("change") or {})
            answers = {**base.get("answers", {}), **change.pop("answers", {})}  # each whole
            out[name] = {**_merged(base, change), "answers": answers, **own}
        return out[name]

    for name in raw:
        resolve(name)
    return out


@cache
def load_remedies() -> dict[str, Any]:
    """Load the diagnosis prose by code.

    Each reads `{"summary": str, "remedies": [{"text": str, "provider"?: str, "variant"?: str},
    …]}`."""
    import yaml

    text = resources.files(__package__).joinpath(REMEDIES).read_text(encoding="utf-8")
    return dict(yaml.safe_load(text))


@cache
def load_clients() -> dict[str, Any]:
    """Load the known clients by name.

    Each reads `{"user_agent": {"products": [str], "version"?: [str]}, …}`."""
    import yaml

    text = resources.files(__package__).joinpath(CLIENTS).read_text(encoding="utf-8")
    return dict(yaml.safe_load(text)["clients"])


def profile(name: str) -> Profile:
    """Return one profile by name; `KeyError` names the known ones."""
    profiles = load_profiles()
    if name not in profiles:
        raise KeyError(f"unknown provider profile {name!r} (known: {', '.join(sorted(profiles))})")
    return profiles[name]


@cache
def _compiled() -> list[tuple[str, str, dict[str, Any], re.Pattern[str] | None]]:
    sigs = []
    for name, prof in load_profiles().items():
        for sig in prof.get("signatures", []):
            when = sig.get("when", {})
            body = when.get("body")
            sigs.append((name, sig["id"], when, re.compile(body) if body else None))
    return sigs


@cache
def signature_headers() -> frozenset[str]:
    """Name the headers, lower-cased, that some error signature's `header` condition names."""
    return frozenset(
        str(k).lower() for _, _, when, _ in _compiled() for k in when.get("header", {})
    )


def match_signature(
    status: int | None, headers: Sequence[Sequence[str]], body_text: str | None
) -> str | None:
    """Return the id of the first known error signature this answer carries, if any.

    A signature is a conjunction of optional conditions: `status`, an int or a list;
    `content_type`, a prefix; `header`, a name and its exact value; and `body`, a regex.
    """
    hdrs = {k.lower(): v for k, v in reversed(list(headers))}
    for _name, sig_id, when, body_rx in _compiled():
        want = when.get("status")
        if want is not None and status not in (want if isinstance(want, list) else [want]):
            continue
        ctype = when.get("content_type")
        if ctype and not hdrs.get("content-type", "").startswith(ctype):
            continue
        if any(hdrs.get(k.lower()) != v for k, v in when.get("header", {}).items()):
            continue
        if body_rx is not None and not (body_text and body_rx.search(body_text)):
            continue
        return str(sig_id)
    return None


# --- answers: the canned replies a profile documents (unknown endpoint, wrong key, …) ------


def fill(template: Any, values: Mapping[str, str]) -> Any:
    """Replace `{name}` placeholders in every string of a YAML template.

    This is not `str.format`, because JSON bodies are full of braces."""
    if isinstance(template, str):
        for k, v in values.items():
            template = template.replace("{" + k + "}", v)
        return template
    if isinstance(template, list):
        return [fill(x, values) for x in template]
    if isinstance(template, dict):
        return {k: fill(v, values) for k, v in template.items()}
    return template


def answer_variants(prof: Profile, kind: str) -> list[dict[str, Any]]:
    """List all documented variants of one answer; a profile may give one mapping or a list."""
    ans = prof.get("answers", {}).get(kind)
    if ans is None:
        return []
    return list(ans) if isinstance(ans, list) else [ans]


def answer_for(
    prof: Profile, kind: str, path: str = "", *, stream: bool | None = None
) -> dict[str, Any] | None:
    """Find the answer a provider gives for `kind` on `path`, or `None` when it has none.

    That is the first variant whose optional `path_regex` matches and whose optional `stream` is
    whether the request streams. A provider may have no such answer, for example for auth."""
    for variant in answer_variants(prof, kind):
        rx = variant.get("path_regex")
        if rx is not None and not re.search(rx, path):
            continue
        if "stream" in variant and stream is not None and variant["stream"] is not stream:
            continue
        return variant
    return None


def render_answer(
    answer: Mapping[str, Any], values: Mapping[str, str]
) -> tuple[int, list[tuple[str, str]], bytes]:
    """Render an answer template as `(status, headers, body bytes)`.

    A mapping body is sent as compact JSON, a string body as it is; placeholders are filled in
    both and in headers."""
    body = fill(answer.get("body"), values)
    if body is None:
        data = b""
    elif isinstance(body, str):
        data = body.encode("utf-8")
    else:
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    headers = [("Content-Type", str(answer["content_type"]))] if "content_type" in answer else []
    headers += [(k, str(fill(str(v), values))) for k, v in (answer.get("headers") or {}).items()]
    return int(answer["status"]), headers, data


def noisy(value: Any, noise: Mapping[str, Any] | None) -> Any:
    """Change in an answer what differs between two honest servers, as a profile's `noise` says.

    Timestamps move by `created_offset`, token counts by `usage_offset`, generated text is
    reworded by `text: {from, to}`, and keys come in another order with `key_order: reversed`."""
    if not noise:
        return value
    if isinstance(value, list):
        return [noisy(v, noise) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    reword = noise.get("text") or {}
    for key, item in value.items():
        if (
            key in ("created", "created_at")
            and isinstance(item, int)
            and not isinstance(item, bool)
        ):
            item = item + int(noise.get("created_offset", 0))
        elif key.endswith("_tokens") and isinstance(item, int) and not isinstance(item, bool):
            item = item + int(noise.get("usage_offset", 0))
        elif key in ("content", "text", "delta") and isinstance(item, str) and reword:
            item = item.replace(str(reword["from"]), str(reword["to"]))
        out[key] = noisy(item, noise)
    if noise.get("key_order") == "reversed":
        out = dict(reversed(list(out.items())))
    return out
