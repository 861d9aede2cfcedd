"""Where the scrub replaces anything, `MAY_HOLD` matches, in RE2 and in `re`; and scrubbing only
the lines it matches gives every line as scrubbing each one does."""

from __future__ import annotations

import random
import re

import pyarrow as pa
import pyarrow.compute as pc

from tests.unit.test_secrets import INNOCENT, SHAPED
from wirediff.record.names import KEY_MARKS, ascii_lower
from wirediff.record.scrub import (
    _NAMES,
    _NOT_WORD,
    _QUOTED_WORDS,
    _SCHEMES,
    _SPACE,
    MAY_HOLD,
    _found,
    scrub_output,
)
from wirediff.reports.items import scrubbed

WORDS = [
    *("api key provided", "bearer", "basic", "token", "tokens", "key", "keys", "apikey"),
    *("secret", "password", "passwd", "sig", "signature", "credential", "credentials"),
    *("authorization", "sk-", "lm-", "pk-", "rk-", "gsk_", "hf_", "hf-", "ghp_", "xai-"),
    *("aiza", "openai-insecure-api-key.", "x-api-key", "max_tokens", "monkey", "keyed"),
]
"""Words the scrub looks for, their near misses and the names they end."""
AFTER = [
    *" \t\r\n\"'\\.:=,;&?/-_sSx0é",
    *('\\"', '\\":', '="', '": "', "': '", "'='", "\t= ", ""),
]
"""What may follow a word: the scrub's own marks, a name's quote and `:`, a letter, nothing."""
VALUES = ["abcdef123456", "sha256:0123456789ab", "12345678", "ABCDEFGHIJKLMNOPQRST0123", "x"]


def _case(rng: random.Random, text: str) -> str:
    """Change the case of some letters; now and then write a K as the Kelvin sign, which RE2
    and `str.lower` both fold to k."""
    out = "".join(c.upper() if rng.random() < 0.3 else c for c in text)
    return out.replace("K", "\u212a") if rng.random() < 0.05 else out


def _text(rng: random.Random) -> str:
    pieces: list[str] = []
    for _ in range(rng.randrange(1, 6)):
        if rng.random() < 0.2:
            pieces.append(rng.choice([t for t, _ in SHAPED] + INNOCENT))
            continue
        lead = rng.choice(["", " ", "?", "&", '"', "{", "a", "_", "-", "\n"])
        word = _case(rng, rng.choice(WORDS))
        pieces.append(lead + word + rng.choice(AFTER) + rng.choice(VALUES))
    return rng.choice(["", " ", ", ", '","']).join(pieces)


LOOKED_FOR = [(_QUOTED_WORDS, None), (_SCHEMES, _SPACE), (KEY_MARKS, None), (_NAMES, _NOT_WORD)]
"""The words `_spans` finds, each with what must follow it, as it calls `_found`."""


def _re2(texts: list[str]) -> list[bool]:
    found = pc.match_substring_regex(pa.array(texts), MAY_HOLD, ignore_case=True)
    return [bool(m) for m in found.to_pylist()]


def test_may_hold_matches_wherever_the_scrub_looks_further() -> None:
    """Wherever the scrub finds one of its words followed as it must be, a shape may begin."""
    rng = random.Random(4)
    texts = [_text(rng) for _ in range(20_000)]
    looked = [
        t
        for t in texts
        for lowered in [ascii_lower(t)]
        if any(next(_found(lowered, *group), -1) >= 0 for group in LOOKED_FOR)
    ]
    assert len(looked) > 10_000
    missed = [t for t, m in zip(looked, _re2(looked), strict=True) if not m]
    assert not missed, missed[:5]


def test_may_hold_matches_wherever_the_scrub_replaces_anything() -> None:
    rng = random.Random(5)
    texts = [_text(rng) for _ in range(20_000)]
    changed = [t for t in texts if scrub_output(t) != t]
    assert len(changed) > 5_000  # the texts hold credentials often
    missed = [t for t, m in zip(changed, _re2(changed), strict=True) if not m]
    assert not missed, missed[:5]
    assert all(re.search(MAY_HOLD, t, re.IGNORECASE) for t in changed)
    # and it leaves texts out: the point of it
    assert not any(_re2(['"max_tokens":16,"x":"usage.total_tokens"', "monkeys"]))


def test_lines_scrubbed_where_may_hold_matches_are_every_line_scrubbed() -> None:
    rng = random.Random(6)
    lines = [_text(rng).replace("\n", " ") + "\n" for _ in range(5_000)]
    assert scrubbed(lines) == "".join(scrub_output(line) for line in lines)
    assert scrubbed(pa.array(lines)) == scrubbed(lines)
