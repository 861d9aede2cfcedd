"""Write the prose of each diagnosis: a one-line summary and a fix.

The prose is kept as data in `wirediff/profiles/remedies.yaml`, beside the provider profiles it
names."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from wirediff.profiles import load_remedies

__all__ = ["Facts", "remedy", "summary"]

RemedyKey = tuple[str, str | None, str | None]
"""`(code, provider, variant)`; `None` where a remedy is not narrowed."""


class Facts(dict[str, str]):
    """Hold what a rule found, for filling in the prose; a fact it did not record reads `?`."""

    def __missing__(self, key: str) -> str:
        return "?"


@cache
def _prose() -> tuple[dict[str, str], dict[RemedyKey, str]]:
    summaries: dict[str, str] = {}
    remedies: dict[RemedyKey, str] = {}
    for code, entry in load_remedies().items():
        summaries[code] = str(entry["summary"])
        for item in entry["remedies"]:
            remedies[(code, item.get("provider"), item.get("variant"))] = str(item["text"])
    return summaries, remedies


def summary(code: str, facts: Mapping[str, str]) -> str:
    """Write the one-line summary of a diagnosis."""
    return _prose()[0][code].format_map(Facts(facts))


def remedy(code: str, provider: str | None, facts: Mapping[str, str]) -> str:
    """Write the most specific fix, followed by the server's own hint if it gave one.

    The fix is the first found for this provider and variant, this provider, this variant, then
    the code's own. The hint is `facts["hint"]`."""
    remedies = _prose()[1]
    variant = facts.get("variant") or None
    for key in (
        (code, provider, variant),
        (code, provider, None),
        (code, None, variant),
        (code, None, None),
    ):
        if key in remedies:
            text = remedies[key].format_map(Facts(facts))
            hint = facts.get("hint")
            return f"{text} (the server says: {hint})" if hint else text
    raise KeyError(code)
