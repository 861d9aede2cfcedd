"""What the addons share about their `--set` options (no addon class here)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["take_unknown", "take_unparsable", "unknown_names"]

_INTEGER = re.compile(r"\s*-?\d+\s*")


def unknown_names(names: Iterable[str], prefix: str, known: Iterable[str]) -> list[str]:
    """One line for each of `names` with an addon's `prefix` that the addon does not take
    (`capture_bodycap`), naming the nearest it does."""
    known = sorted(known)
    problems = []
    for name in sorted(n for n in names if n.startswith(prefix) and n not in known):
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}?" if near else f"known: {', '.join(known)}"
        problems.append(f"unknown option {name} ({hint})")
    return problems


def take_unknown(options: Any, prefix: str) -> list[str]:
    """`unknown_names` among the `--set` values waiting for a script to register them
    (mitmproxy would keep them waiting, and the misspelt option would do nothing without a
    word), taken out of `options.deferred`; call it once the script's options are added."""
    known = [name for name in sorted(options.keys()) if name.startswith(prefix)]
    problems = unknown_names(options.deferred, prefix, known)
    for name in [n for n in options.deferred if n.startswith(prefix) and n not in known]:
        del options.deferred[name]
    return problems


def take_unparsable(options: Any, ints: Mapping[str, str], bools: Iterable[str]) -> list[str]:
    """`--set` values of a script's options wait until it registers them, and one that does
    not parse (`capture_body_cap=abc`) would abort loading the script without a word: take
    those out of `options.deferred` and say why, one line each. `ints`: each integer
    option and what it counts ("a whole number of bytes"); ranges are checked later."""
    problems = []
    for name in (*ints, *bools):
        values = getattr(options.deferred.get(name), "val", None)
        if not values:
            continue
        value = values[-1]
        if name in ints:
            ok, want = len(values) == 1 and _INTEGER.fullmatch(value) is not None, ints[name]
        else:
            ok = len(values) == 1 and value in ("true", "false", "toggle")
            want = "true or false"
        if not ok:
            del options.deferred[name]
            problems.append(f"{name} must be {want}, not {value!r}")
    return problems
