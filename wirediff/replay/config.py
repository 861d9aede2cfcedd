"""Merge the replay's command line with a `--config` YAML of targets and defaults."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from wirediff._support import read_yaml
from wirediff.errors import PlanError, UsageError
from wirediff.record.redact import redact_url
from wirediff.replay.filters import Term, parse_filter
from wirediff.replay.targets import (
    Target,
    default_label,
    key_in,
    key_variable,
    parse_pairs,
    parse_rate,
)

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_TIMEOUT",
    "Options",
    "api_key_for",
    "config_keys",
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


Scalar = StrictStr | StrictInt | StrictFloat
"""A value a YAML file may write unquoted, `x-version: 2`, and that is sent as its text."""


class _Section(BaseModel):
    """Check what `defaults` and a target both set: any other key, or type, is refused."""

    model_config = ConfigDict(extra="forbid", strict=True)
    api_key_env: str | None = None
    model_map: dict[str, Scalar | None] | None = None
    headers: dict[str, Scalar | None] | None = None

    @field_validator("model_map")
    @classmethod
    def _models_named(
        cls, value: dict[str, Scalar | None] | None
    ) -> dict[str, Scalar | None] | None:
        """Refuse a model mapped to nothing, which would send `"model": ""` to every request."""
        for key, model in (value or {}).items():
            if not key.strip() or model is None or not str(model).strip():
                raise ValueError(f"{key!r} maps to no model; name one, or leave the key out")
        return value


class _Target(_Section):
    url: str
    label: Scalar | None = None


class _Defaults(_Section):
    concurrency: int | None = Field(default=None, ge=1)
    rate: Scalar | None = None
    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    only: str | list[str] | None = None
    allow_unsafe: bool = False


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    defaults: _Defaults = _Defaults()
    targets: list[_Target] = Field(default_factory=list)
    ignore: list[str] | None = None
    """The paths `report --ignore-config` leaves out, read there: one file may serve both."""


def config_keys() -> set[str]:
    """Name the keys a `wirediff.yaml` may have, for the replay and for the report alike."""
    return set(_Config.model_fields)


def _str_map(value: Mapping[str, Scalar | None] | None) -> dict[str, str]:
    return {k: "" if v is None else str(v) for k, v in (value or {}).items()}


def _merged(*maps: Mapping[str, str]) -> dict[str, str]:
    """Merge model maps, later ones winning; one with `*`, every model, replaces those before."""
    out: dict[str, str] = {}
    for m in maps:
        out = dict(m) if "*" in m else {**out, **m}
    return out


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


def _load_config(path: str) -> _Config:
    """Read a `--config` file, each key and type checked; one line names the first wrong one."""
    try:
        data = read_yaml(path, " config") or {}
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping with `targets:`")
    try:
        return _Config.model_validate({k: v for k, v in data.items() if v is not None})
    except ValidationError as e:
        errors = e.errors()
        at = _where(errors[0]["loc"])
        tried = [err for err in errors if _where(err["loc"]) == at]
        said = tried[0]["msg"].removeprefix("Value error, ")
        if len(tried) > 1:  # a union: each of its members tried
            kinds = dict.fromkeys(
                _UNION_MEMBERS[p] for err in tried for p in err["loc"] if p in _UNION_MEMBERS
            )
            said = f"not {' or '.join(kinds)} ({errors[0]['input']!r})"
        raise UsageError(f"{path}: {at}: {said}") from None


def _where(loc: tuple[int | str, ...]) -> str:
    """Spell where a value is in the file, `targets[0].headers.x-a`, without pydantic's own
    steps: the member of a union it was tried as, a mapping's key checked as a key."""
    steps = [p for p in loc if p not in _UNION_MEMBERS and p != "[key]"]
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in steps).lstrip(".")


_UNION_MEMBERS = {
    "str": "text",
    "int": "a number",
    "float": "a number",
    "list[str]": "a list of text",
}
"""The members of the file's unions, as pydantic names them in a value's place, in words."""


def _shown(url: str) -> str:
    """Show a URL with its credentials fingerprinted; one that does not parse, by its scheme."""
    try:
        return redact_url(url)
    except ValueError:
        return f"{url.partition('://')[0]}://…"


def options_from_args(args: argparse.Namespace) -> Options:
    """Merge the command line with `--config`; the module docstring says which wins."""
    path = args.config or ""
    cfg = _load_config(path) if path else _Config()
    d = cfg.defaults
    try:
        cli_models = parse_pairs(args.model_map or (), "--model-map", allow_empty=False)
        cli_headers = parse_pairs(args.header or (), "--header", allow_empty=True)
        key_variable(args.api_key_env)
        specs = list(cfg.targets)
        if args.to:
            specs.append(_Target(url=args.to, label=args.label))
        elif args.label:
            raise UsageError("--label names the --to target; give --to URL too")
        if not specs:
            raise UsageError(
                f"nothing to replay to: {path} lists no targets; give --to URL"
                if path
                else "nothing to replay to: give --to URL or --config FILE"
            )
        targets: list[Target] = []
        for i, spec in enumerate(specs):
            where = f"{path}: targets[{i}]" if i < len(cfg.targets) else "--to"
            url = spec.url
            try:
                named = default_label(url)
            except PlanError as e:
                raise UsageError(f"{where} {_shown(url)}: {e}") from None
            label = str(spec.label if spec.label is not None else named)
            said = "--label" if where == "--to" else f"{where}.label"
            if "/" in label or label.startswith(".") or not label.strip():
                raise UsageError(f"{said} {label!r}: a plain name, not a path")
            if label.isdigit():  # `<session>.<digits>.jsonl` is a part of a rotated capture
                raise UsageError(f"{said} {label!r}: a name, not a number")
            models = _merged(_str_map(d.model_map), cli_models, _str_map(spec.model_map))
            headers = {
                **_headers(_str_map(d.headers), "defaults.headers"),
                **_headers(cli_headers, "--header"),
                **_headers(_str_map(spec.headers), f"{where}.headers"),
            }
            key_env = (
                key_variable(spec.api_key_env, f"{where}.api_key_env")
                or args.api_key_env
                or key_variable(d.api_key_env, f"{path}: defaults.api_key_env")
            )
            targets.append(Target(label, url, key_env or None, models, headers))
        labels = [t.label for t in targets]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise UsageError(f"two targets share the label {dup[0]!r}; give each a --label")

        concurrency = next(
            c for c in (args.concurrency, d.concurrency, DEFAULT_CONCURRENCY) if c is not None
        )
        if concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        rate_text = args.rate if args.rate is not None else d.rate
        timeout = next(t for t in (args.timeout, d.timeout, DEFAULT_TIMEOUT) if t is not None)
        only = args.only or d.only or []
        if isinstance(only, str):
            only = [only]
        return Options(
            targets=targets,
            concurrency=concurrency,
            rate=parse_rate(str(rate_text)) if rate_text is not None else None,
            timeout=timeout,
            filters=[parse_filter(str(f)) for f in only],
            allow_unsafe=bool(args.allow_unsafe or d.allow_unsafe),
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
    return key_in(target.api_key_env, env, f"target {target.label!r}")
