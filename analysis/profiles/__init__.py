"""Provider profiles: each provider's documented wire behaviour, as data (one YAML each).

The same files drive the stand-in backends, name the provider behind an error
(`signatures`) and inform the diagnosis rules.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import yaml

Profile = dict[str, Any]


@cache
def load_profiles() -> dict[str, Profile]:
    """All bundled profiles by name."""
    out: dict[str, Profile] = {}
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            data = yaml.safe_load(entry.read_text(encoding="utf-8"))
            out[data["name"]] = data
    return out


def profile(name: str) -> Profile:
    """One profile by name; `KeyError` names the known ones."""
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


def match_signature(
    status: int | None, headers: Sequence[Sequence[str]], body_text: str | None
) -> str | None:
    """The id of the first known error signature this answer carries, if any.

    A signature is a conjunction of optional conditions: `status` (int or list),
    `content_type` (prefix), `header` (name → exact value) and `body` (regex).
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
