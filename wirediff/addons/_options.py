"""Check the addons' `--set` options; no addon class here."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["given_twice", "take_unknown", "take_unparsable", "unknown_names", "unparsable"]

_INTEGER = re.compile(r"\s*-?\d+\s*")


def unknown_names(names: Iterable[str], prefix: str, known: Iterable[str]) -> list[str]:
    """Say in one line each which of `names` with an addon's `prefix` the addon does not take.

    Each line, for `capture_bodycap` say, names the nearest it does."""
    known = sorted(known)
    problems = []
    for name in sorted(n for n in names if n.startswith(prefix) and n not in known):
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}?" if near else f"known: {', '.join(known)}"
        problems.append(f"unknown option {name} ({hint})")
    return problems


def take_unknown(options: Any, prefix: str) -> list[str]:
    """Take the `unknown_names` out of the `--set` values waiting for a script to register them.

    mitmproxy would keep them waiting in `options.deferred`, and the misspelt option would do
    nothing without a word. Call it once the script's options are added."""
    known = [name for name in sorted(options.keys()) if name.startswith(prefix)]
    problems = unknown_names(options.deferred, prefix, known)
    for name in [n for n in options.deferred if n.startswith(prefix) and n not in known]:
        del options.deferred[name]
    return problems


def take_unparsable(options: Any, ints: Mapping[str, str], bools: Iterable[str]) -> list[str]:
    """Take the `--set` values that do not parse out of `options.deferred`, and say why.

    `--set` values of a script's options wait until it registers them, and one that does not
    parse (`capture_body_cap=abc`) would abort loading the script without a word; each is said in
    one line. `ints`: each integer option and what it counts ("a whole number of bytes"); ranges
    are checked later."""
    problems = []
    for name in (*ints, *bools):
        values = getattr(options.deferred.get(name), "val", None)
        found = unparsable(name, values, ints, bools) if values else None
        if found:
            del options.deferred[name]
            problems.append(found)
    return problems


def given_twice(name: str, values: list[str]) -> str | None:
    """Say that an option that takes one value was given more, or None."""
    return f"{name} given {len(values)} times; give it once" if len(values) > 1 else None


def unparsable(
    name: str, values: list[str], ints: Mapping[str, str], bools: Iterable[str]
) -> str | None:
    """Say why the `--set` values of an addon's integer or boolean option do not parse, or None.

    A boolean's value may be left out, as mitmproxy reads `--set NAME`: true. Given twice, an
    option is refused, as mitmproxy refuses it."""
    if name not in ints and name not in bools:
        return None
    if twice := given_twice(name, values):
        return twice
    value = values[-1]
    if name in ints:
        ok, want = _INTEGER.fullmatch(value) is not None, ints[name]
    else:
        ok, want = value in ("", "true", "false", "toggle"), "true or false"
    return None if ok else f"{name} must be {want}, not {value!r}"
