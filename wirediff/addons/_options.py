"""What the addons share about their `--set` options (no addon class here)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["take_unparsable"]

_INTEGER = re.compile(r"\s*-?\d+\s*")


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
