"""Treat a recorded request path as a path and nothing more.

No scheme, host, port or user can come from a record, and what a replay builds from it stays
under the target's base path.

A capture is data people pass around, so its paths are hostile input. The target's URL is
never a string a record's path is appended to: the path must begin with a single `/`, hold
no character some server or client reads as a delimiter (a backslash, `#`, a space or a
control character), and, once its dot segments are resolved, lie under the base path,
both as it is sent (RFC 3986) and as a lenient server may read it: percent-decoding
repeated (`%2e%2e`, `%252e`), `\\` and `%2f` as `/`, `..;` as `..`, `//` as `/`.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from wirediff._support import clip, printable
from wirediff.record.redact import redact_url

__all__ = ["lenient", "outside_reason", "path_problem", "remove_dot_segments", "shown", "under"]

_NOT_IN_A_PATH = re.compile(r"[\x00-\x20\x7f#\\]")
"""What no request path holds literally.

A backslash, a slash to WHATWG parsers; a fragment mark; a space or a control character,
which ends a request line."""
_DECODINGS = 4
"""Rounds of percent-decoding a lenient reading is allowed (`%25252e` is `.` after three)."""


def shown(path: str) -> str:
    """Show `path` in a message: credentials fingerprinted, control characters escaped.

    It is cut to at most 200 characters."""
    return clip(printable(redact_url(path)), 200)


def path_problem(path: str) -> str | None:
    """Say why a recorded path cannot be sent to any target; None when it is a path."""
    if not path.startswith("/"):
        return (
            f"the captured path '{shown(path)}' does not begin with '/': a replay takes a path "
            "from a record, never a scheme, host or port"
        )
    if path.startswith("//"):
        return f"the captured path '{shown(path)}' begins with '//', which names a host"
    bad = _NOT_IN_A_PATH.search(path)
    if bad is not None:
        what = "a backslash" if bad[0] == "\\" else f"'{printable(bad[0])}'"
        return f"the captured path '{shown(path)}' holds {what}, which no request path holds"
    return None


def remove_dot_segments(path: str) -> str:
    """Resolve the `.` and `..` segments of `path` by RFC 3986 §5.2.4, never above `/`."""
    out: list[str] = []
    segs = path.split("/")
    for i, seg in enumerate(segs):
        last = i == len(segs) - 1
        if seg == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        elif seg == ".":
            if last:
                out.append("")
        else:
            out.append(seg)
    joined = "/".join(out)
    return joined if joined.startswith("/") or not path.startswith("/") else "/" + joined


_SLASHES = re.compile(r"/{2,}")


def lenient(path: str) -> str:
    """Read `path` as the most lenient server may route it.

    It is percent-decoded until nothing changes, `\\` as `/`, each segment's `;params` dropped
    (`..;` is `..` to Tomcat), `//` as `/`, then its dot segments resolved."""
    for _ in range(_DECODINGS):
        decoded = unquote(path, errors="surrogateescape").replace("\\", "/")
        if decoded == path:
            break
        path = decoded
    segs = [seg.partition(";")[0] for seg in path.split("/")]
    return remove_dot_segments(_SLASHES.sub("/", "/".join(segs)))


def under(path: str, base: str) -> bool:
    """Tell whether `path` lies at or under `base`, segment by segment.

    `path` is query-less, its dot segments resolved; `base` has no trailing `/`, and `""` is the
    root."""
    return path.startswith("/") and (not base or path == base or path.startswith(base + "/"))


def outside_reason(path: str, base: str, recorded: str) -> str | None:
    """Say why the query-less `path` built for the `recorded` one leaves `base`.

    It is checked as sent and as a lenient server reads it; None when it stays under it."""
    for reading, within in ((remove_dot_segments(path), base), (lenient(path), lenient(base))):
        if not under(reading, within):
            return (
                f"the captured path '{shown(recorded)}' leads to '{shown(reading)}', outside "
                f"the target's base path {base or '/'!r}"
            )
    return None
