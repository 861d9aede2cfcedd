"""Merge the replay's command line with a `--config` YAML of targets and defaults."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wirediff._support import read_yaml
from wirediff.errors import PlanError, UsageError
from wirediff.replay.filters import Term, parse_filter
from wirediff.replay.targets import Target, default_label, parse_pairs, parse_rate

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_TIMEOUT",
    "Options",
    "api_key_for",
    "options_from_args",
]

DEFAULT_CONCURRENCY = 4
DEFAULT_TIMEOUT = 600.0
CONNECT_TIMEOUT = 10.0


# --- options -------------------------------------------------------------------------------


@dataclass
class Options:
    targets: list[Target]
    concurrency: int = DEFAULT_CONCURRENCY
    rate: float | None = None
    timeout: float = DEFAULT_TIMEOUT
    filters: list[tuple[Term, ...]] = field(default_factory=list)
    allow_unsafe: bool = False
    dry_run: bool = False
    output: Path | None = None


_RUN_KEYS = {"concurrency", "rate", "timeout", "only", "allow_unsafe"}
_TARGET_KEYS = {"label", "url", "api_key_env", "model_map", "headers"}


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected a mapping, got {type(value).__name__}")
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e]*")


def _headers(pairs: Mapping[str, str], where: str) -> dict[str, str | None]:
    """Check the headers to set, an empty value meaning to drop one.

    They are refused here when HTTP cannot carry them: sent, every request would fail before it
    left, and read as the upstream's fault."""
    out: dict[str, str | None] = {}
    for key, value in pairs.items():
        name = key.strip().lower()
        if not _TOKEN.fullmatch(name):
            raise UsageError(f"{where}: {key!r} is not a header name")
        if not _FIELD_VALUE.fullmatch(value):
            raise UsageError(
                f"{where}: the value of {name} holds what a header cannot carry "
                "(a line break, a control character or a character outside ASCII)"
            )
        out[name] = value if value != "" else None
    return out


def _load_config(path: str) -> dict[str, Any]:
    try:
        data = read_yaml(path, " config") or {}
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping with `targets:`")
    unknown = set(data) - {"defaults", "targets"}
    if unknown:
        raise UsageError(f"{path}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    defaults = data.get("defaults") or {}
    targets = data.get("targets") or []
    if not isinstance(defaults, dict) or not isinstance(targets, list):
        raise UsageError(f"{path}: `defaults` must be a mapping and `targets` a list")
    bad = set(defaults) - _RUN_KEYS - (_TARGET_KEYS - {"label", "url"})
    if bad:
        raise UsageError(f"{path}: unknown defaults key(s) {', '.join(sorted(map(str, bad)))}")
    for i, t in enumerate(targets):
        if not isinstance(t, dict) or "url" not in t:
            raise UsageError(f"{path}: targets[{i}] needs at least `url`")
        bad = set(t) - _TARGET_KEYS
        if bad:
            raise UsageError(
                f"{path}: targets[{i}]: unknown key(s) {', '.join(sorted(map(str, bad)))}"
            )
    return {"defaults": defaults, "targets": targets, "path": path}


def options_from_args(args: argparse.Namespace) -> Options:
    """Merge the command line with `--config`; the module docstring says which wins."""
    cfg: dict[str, Any] = (
        _load_config(args.config) if args.config else {"defaults": {}, "targets": [], "path": ""}
    )
    d: dict[str, Any] = cfg["defaults"]
    try:
        cli_models = parse_pairs(args.model_map or (), "--model-map", allow_empty=False)
        cli_headers = parse_pairs(args.header or (), "--header", allow_empty=True)
        specs: list[dict[str, Any]] = list(cfg["targets"])
        if args.to:
            specs.append({"url": args.to, "label": args.label})
        elif args.label:
            raise UsageError("--label names the --to target; give --to URL too")
        if not specs:
            raise UsageError("nothing to replay to: give --to URL or --config FILE")
        targets: list[Target] = []
        for i, spec in enumerate(specs):
            where = f"{cfg['path']}: targets[{i}]" if i < len(cfg["targets"]) else "--to"
            url = str(spec["url"])
            label = str(spec.get("label") or default_label(url))
            if "/" in label or label.startswith(".") or not label.strip():
                raise UsageError(f"{where}: label {label!r} must be a plain name")
            if label.isdigit():  # `<session>.<digits>.jsonl` is a part of a rotated capture
                raise UsageError(f"{where}: label {label!r} must not be a number")
            models = {
                **_str_map(d.get("model_map"), "defaults.model_map"),
                **cli_models,
                **_str_map(spec.get("model_map"), f"{where}.model_map"),
            }
            headers = {
                **_headers(_str_map(d.get("headers"), "defaults.headers"), "defaults.headers"),
                **_headers(cli_headers, "--header"),
                **_headers(_str_map(spec.get("headers"), f"{where}.headers"), f"{where}.headers"),
            }
            key_env = spec.get("api_key_env") or args.api_key_env or d.get("api_key_env")
            targets.append(Target(label, url, key_env or None, models, headers))
        labels = [t.label for t in targets]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise UsageError(f"two targets share the label {dup[0]!r}; give each a --label")

        def pick(name: str, cli: Any, fallback: Any) -> Any:
            return cli if cli is not None else d.get(name, fallback)

        concurrency = int(pick("concurrency", args.concurrency, DEFAULT_CONCURRENCY))
        if concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        rate_text = pick("rate", args.rate, None)
        timeout = float(pick("timeout", args.timeout, DEFAULT_TIMEOUT))
        if not math.isfinite(timeout) or timeout <= 0:
            raise UsageError(f"--timeout must be a positive number of seconds, got {timeout}")
        only = args.only if args.only else d.get("only") or []
        if isinstance(only, str):
            only = [only]
        return Options(
            targets=targets,
            concurrency=concurrency,
            rate=parse_rate(str(rate_text)) if rate_text is not None else None,
            timeout=timeout,
            filters=[parse_filter(str(f)) for f in only],
            allow_unsafe=bool(args.allow_unsafe or d.get("allow_unsafe", False)),
            dry_run=bool(args.dry_run),
            output=Path(args.output) if args.output else None,
        )
    except PlanError as e:
        raise UsageError(str(e)) from None
    except (TypeError, ValueError) as e:
        raise UsageError(f"bad option value: {e}") from None


def api_key_for(target: Target, env: Mapping[str, str]) -> str | None:
    if target.api_key_env is None:
        return None
    key = env.get(target.api_key_env)
    if not key:
        raise UsageError(
            f"target {target.label!r}: environment variable {target.api_key_env} is not set"
        )
    return key
