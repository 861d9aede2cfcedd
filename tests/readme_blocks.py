"""The README's tested code blocks: a fenced block right after `<!-- tested: NAME -->`, in
the README or a page of docs/ (each name is tagged once across them).

Tests run these blocks as they stand, with the proxy's real address in place of the README's
`http://127.0.0.1:8080`, so the README shows exactly what was tried.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

__all__ = [
    "README",
    "README_PROXY",
    "readme_block",
    "readme_command",
    "readme_output",
    "with_proxy",
]

README = Path(__file__).resolve().parent.parent / "README.md"
PAGES = (README, *sorted((README.parent / "docs").glob("*.md")))
README_PROXY = "http://127.0.0.1:8080"
"""Where the README's examples put the proxy (`wirediff capture`'s default port)."""


def readme_block(name: str) -> str:
    """The body of the fenced block tagged `<!-- tested: name -->`."""
    m = re.search(
        rf"^<!-- tested: {re.escape(name)} -->\n```\w*\n(.*?)^```$", _pages(), re.M | re.S
    )
    if m is None:
        raise LookupError(f"no block tagged `<!-- tested: {name} -->` in the README or docs/")
    return m.group(1)


def readme_output(name: str) -> str:
    """The fenced block right after the one tagged `name`: what the README says it prints."""
    m = re.search(
        rf"^<!-- tested: {re.escape(name)} -->\n```\w*\n.*?^```\n```\w*\n(.*?)^```$",
        _pages(),
        re.M | re.S,
    )
    if m is None:
        raise LookupError(f"no output block after `<!-- tested: {name} -->` in the README or docs/")
    return m.group(1)


def _pages() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in PAGES)


def readme_command(name: str) -> list[str]:
    """A one-command shell block as argv (`\\` continuations joined)."""
    return shlex.split(readme_block(name).replace("\\\n", " "), comments=True)


def with_proxy(text: str, proxy_url: str) -> str:
    """The README's text with the proxy at `proxy_url` instead of 127.0.0.1:8080."""
    return text.replace(README_PROXY, proxy_url.rstrip("/"))
