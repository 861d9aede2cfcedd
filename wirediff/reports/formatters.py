"""Format values for the report: small pure functions the templates call as jinja2 filters.

Every function that returns markup escapes what it is given, since model output and headers can
hold `<script>`, `</textarea>` or quotes, and scrubs anything that looks like a credential; the
rest return plain strings that the Environment's autoescape escapes on output.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import numpy as np
from markupsafe import Markup

from wirediff._support import clip, plural
from wirediff._types import Record
from wirediff.analysis.comparison.observe import event_label
from wirediff.record.scrub import scrub_output

__all__ = [
    "CONTEXT",
    "FILTERS",
    "MAX_LINES",
    "SEQUENCES",
    "anchor",
    "hits",
    "missing",
    "nice_ticks",
    "path_only",
    "pretty_json",
    "redact",
    "status_class",
    "wire",
]

MAX_LINES = 24
"""Lines shown per side of a side-by-side view; longer documents are windowed."""
CONTEXT = 6
"""Lines kept above the first highlighted line when a document is windowed."""
MAX_STRING = 200
"""Characters kept of one string value; generated text is evidence, not the finding."""
MAX_WALK = 600
"""Lines generated at most per document (a 1 MiB body is never laid out whole)."""
MAX_SCALAR = 4 * MAX_STRING
"""Characters of one string kept while laying out, before credentials are scrubbed.

The cap is generous so that no key is cut before it can be recognised."""
MAX_LINE = MAX_STRING + 60
"""Characters of one shown line, after credentials are scrubbed."""
SHORT = 120
"""Characters of a value shown inline (`shorten`)."""
SLUG = 48
"""Characters of the readable part of an anchor."""
ANCHOR_HASH = 6
"""Hex digits of the hash that makes an anchor unique."""


def redact(text: object) -> str:
    """Turn `text` into a string, anything shaped like a credential replaced.

    `scrub_output` replaces them."""
    return scrub_output("" if text is None else str(text))


SEQUENCES = (list, tuple, np.ndarray)
"""What a cell of a list holds (a tuple: `isinstance` checks one faster than a union)."""


def missing(value: object) -> bool:
    """Tell None, NaN and pandas' NA, which show nothing."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return type(value).__name__ in ("NAType", "NaTType")


def ms(value: object) -> str:
    """Format milliseconds as `12.3 ms` or `1.24 s`, or an em dash."""
    if missing(value):
        return "—"
    v = float(value)  # type: ignore[arg-type]
    if v >= 10_000:
        return f"{v / 1000:.1f} s"
    if v >= 1000:
        return f"{v / 1000:.2f} s"
    return f"{v:.0f} ms" if v >= 100 else f"{v:.1f} ms"


def num(value: object) -> str:
    """Format a number with thousands separators, as in `12,345`."""
    if missing(value):
        return "—"
    return f"{int(value):,}"  # type: ignore[call-overload]


def anchor(*parts: object) -> str:
    """Make a stable, unique fragment id for a tuple of names.

    Its readable part is made from the text's start where that is long enough: a text may
    spell a whole chain."""
    text = "\x1f".join(str(p) for p in parts)
    made = slug(text[: 4 * SLUG])
    if len(made) <= SLUG and len(text) > 4 * SLUG:
        made = slug(text)
    return f"{made[:SLUG]}-{hashlib.sha1(text.encode()).hexdigest()[:ANCHOR_HASH]}"


def status_class(status: object) -> str:
    """Class a status as `s2`…`s5` by its class; `s0` when there was no response."""
    if missing(status) or not str(status).isdigit():
        return "s0"
    return f"s{str(status)[0]}"


def shorten(text: object, limit: int = SHORT) -> str:
    """Scrub credentials, then cut to `limit` characters."""
    return clip(redact(text), limit)


def path_only(path: object) -> str:
    """Cut a request path's query string, since queries can carry credentials."""
    return "" if missing(path) else str(path).split("?", 1)[0]


# --- side-by-side documents -------------------------------------------------------------


def hits(path: str, target: str) -> bool:
    """Tell whether a line at `path` shows the finding at `target`.

    It does when it is the line itself, anything under it, a parsed `arguments@json…` inside it,
    or a glob such as `headers.x-ratelimit-*`. Collapsed delta runs such as `events[x.delta+]`
    match single events.
    """
    path, target = path.replace("+]", "]"), target.replace("+]", "]")
    if not target or not path:
        return False
    if path == target:
        return True
    n = len(target)
    if path.startswith(target) and path[n] in ".[@":
        return True
    if target.startswith(path) and target[len(path)] == "@":
        return True
    return "*" in target and fnmatchcase(path, target)


@dataclass(slots=True)
class Line:
    """Hold one laid-out line: its text, indentation, and whether it shows the finding."""

    text: str
    depth: int = 0
    note: bool = False
    mark: bool = False


class _Enough(Exception):
    """Stop the walk once the layout holds what will be shown.

    The rest of the document is not walked."""


class Layout:
    """Lay out the lines of a document only as far as the window that will show them.

    The walk stops MAX_LINES after the first line showing `target`, or at MAX_WALK lines when
    none does, so a 1 MiB body costs no more than a small one.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.lines: list[Line] = []
        self.first_hit: int | None = None
        self.cut = False

    def add(self, text: str, paths: Sequence[str] = (), depth: int = 0, note: bool = False) -> None:
        limit = MAX_WALK if self.first_hit is None else self.first_hit + MAX_LINES
        if len(self.lines) >= limit:
            self.cut = True
            raise _Enough
        mark = bool(self.target) and any(hits(p, self.target) for p in paths)
        if mark and self.first_hit is None:
            self.first_hit = len(self.lines)
        self.lines.append(Line(text, depth, note, mark))

    def json(self, value: Any, prefix: str = "") -> None:
        """Lay out pretty JSON; each line knows its path, such as `a.b[].c`, arrays as `[]`."""

        def walk(v: Any, path: str, depth: int, head: str, tail: str) -> None:
            if isinstance(v, dict) and v:
                self.add(head + "{", (path,), depth)
                last = len(v) - 1
                for i, (k, item) in enumerate(v.items()):
                    sub = f"{path}.{k}" if path else str(k)
                    key = json.dumps(str(k), ensure_ascii=False) + ": "
                    walk(item, sub, depth + 1, key, "," if i < last else "")
                self.add("}" + tail, (path,), depth)
            elif isinstance(v, list) and v:
                self.add(head + "[", (path,), depth)
                for i, item in enumerate(v):
                    walk(item, path + "[]", depth + 1, "", "," if i < len(v) - 1 else "")
                self.add("]" + tail, (path,), depth)
            else:
                text = "{}" if isinstance(v, dict) else "[]" if isinstance(v, list) else _scalar(v)
                self.add(head + text + tail, (path,), depth)

        walk(value, prefix, 0, "", "")

    def stream(self, events: Sequence[Mapping[str, Any]], chat: bool) -> None:
        """Lay out each SSE event as a header line with its label and time, then its data."""
        last = len(events) - 1
        for i, ev in enumerate(events):
            data = ev.get("data")
            label = event_label(ev, chat)  # type: ignore[arg-type]
            paths = [f"events[{label}]"] + (["events[terminal]"] if i == last else [])
            partial = " (partial)" if ev.get("partial") else ""
            self.add(f"── #{i} {label} · {ms(ev.get('t_ms'))}{partial}", paths, 0, True)
            if isinstance(data, dict | list):
                self.json(data, _event_prefix(data, label, chat))
            else:
                self.add(_scalar(data), (f"events[{label}]",))

    def record(self, record: Record | None, kind: str) -> None:
        """Lay out one side of a finding: request line, status, the headers that matter, body."""
        if record is None:
            self.add("(no such exchange in the captures)", note=True)
            return
        req, resp = record.get("request") or {}, record.get("response")
        self.add(f"{req.get('method', '')} {path_only(req.get('path'))}", ("request",), note=True)
        if not resp:
            err = record.get("error")
            self.add(f"no response: {err['kind'] if err else '?'}", ("response", "status"))
            if err and err["message"]:
                self.add(err["message"], ("response",))
            return
        self.add(f"HTTP {resp.get('status')} {resp.get('reason') or ''}".rstrip(), ("status",))
        for name, value in resp.get("headers") or ():
            low = name.lower()
            if kind in ("header", "transport") or low == "content-type":
                self.add(f"{low}: {value}", (f"headers.{low}", low))
        if kind == "header":
            return
        chat = record["tags"].get("family") in ("chat.completions", "completions")
        if (events := resp.get("events")) is not None:
            self.stream(events, chat)
        elif resp.get("body") is not None:
            self.json(resp["body"])
        elif resp.get("text"):
            for raw in str(resp["text"]).splitlines():
                self.add(raw[:MAX_SCALAR], ("body", "error"))
        elif resp.get("b64"):
            self.add(f"(binary body, {num(resp.get('size') or 0)} bytes)", ("body",), note=True)
        else:
            self.add("(empty body)", ("body",), note=True)
        if resp.get("truncated"):
            self.add("… body truncated at capture", note=True)

    def markup(self) -> Markup:
        """Render escaped lines around the first highlighted one; gaps are marked.

        Plain lines are text ending in a newline; highlighted lines, notes and gaps are block
        `<span>`s, which need none since a block starts its own line. Only the lines shown are
        scrubbed of credentials, then cut to a readable width.
        """
        n = len(self.lines)
        first = self.first_hit or 0
        start = max(0, min(first - CONTEXT, n - MAX_LINES))
        end = min(n, start + MAX_LINES)
        parts = []
        if start:
            parts.append(Markup('<span class="gap">⋯ {} lines above</span>').format(start))
        for line in self.lines[start:end]:
            cls = " ".join(c for c, on in (("hl", line.mark), ("note", line.note)) if on)
            text = redact(line.text)
            if len(text) > MAX_LINE:
                text = f"{text[:MAX_LINE]}… (+{len(text) - MAX_LINE} chars)"
            text = "  " * line.depth + text
            if cls:
                parts.append(Markup('<span class="{}">{}</span>').format(cls, text))
            else:
                parts.append(Markup("{}\n").format(text))
        if end < n or self.cut:
            more = f"{n - end} lines" if not self.cut else "more"
            parts.append(Markup('<span class="gap">⋯ {} below</span>').format(more))
        return Markup("").join(parts)


def _scalar(value: Any) -> str:
    """Render a JSON scalar, long strings cut generously.

    The shown line is cut again after credentials are scrubbed, so no key is split before it can
    be recognised."""
    if isinstance(value, str) and len(value) > MAX_SCALAR:
        value = f"{value[:MAX_SCALAR]}… (+{len(value) - MAX_SCALAR} chars)"
    return json.dumps(value, ensure_ascii=False)


def _event_prefix(data: Any, label: str, chat: bool) -> str:
    if chat and isinstance(data, dict) and "error" not in data:
        return "events[chunk]"
    return f"events[{label}]"


def _laid_out(fill: Callable[[Layout], None], target: str) -> Markup:
    layout = Layout(target)
    with contextlib.suppress(_Enough):
        fill(layout)
    return layout.markup()


def wire(record: Record | None, path: str = "", kind: str = "") -> Markup:
    """Lay out a record's answer as escaped lines, the finding's path highlighted."""
    return _laid_out(lambda lay: lay.record(record, kind), path)


def pretty_json(value: Any, path: str = "") -> Markup:
    """Lay out any JSON value as escaped lines, `path` highlighted."""
    return _laid_out(lambda lay: lay.json(value), path)


# --- SVG helpers ------------------------------------------------------------------------


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Choose round axis ticks from 0 to at least `top`: 1, 2 or 5 times a power of ten."""
    raw = top / count
    if not 1e-300 < raw < 1e300:  # none to draw, or past where a power of ten is a double
        return [raw * i for i in range(count + 1)] if 0 < raw < math.inf else [0.0, 1.0]
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step)
    return [round(i * step, 6) for i in range(n + 1)]


def lane_path(
    ticks: Sequence[float], t_max: float, y: float, left: float = 90, width: float = 520
) -> str:
    """Draw an SVG path with one short vertical tick per event time."""
    scale = width / (t_max or 1.0)
    return "".join(f"M{left + t * scale:.1f} {y}v12" for t in ticks)


def counts(mapping: Mapping[str, int], order: Iterable[str] = ()) -> str:
    """Count in words, as in `3 pass · 1 error`, in the given order first."""
    keys = [k for k in order if mapping.get(k)] + [k for k in mapping if k not in set(order)]
    return " · ".join(f"{num(mapping[k])} {k}" for k in keys if mapping.get(k))


def slug(value: object) -> str:
    """Make a CSS class part: `compatible with deviations` → `compatible-with-deviations`."""
    return re.sub(r"[^a-z0-9]+", "-", str(value).lower()).strip("-")


FILTERS: dict[str, Callable[..., Any]] = {
    "slug": slug,
    "redact": redact,
    "ms": ms,
    "num": num,
    "plural": plural,
    "anchor": anchor,
    "status_class": status_class,
    "shorten": shorten,
    "path_only": path_only,
    "wire": wire,
    "pretty_json": pretty_json,
    "counts": counts,
    "lane_path": lane_path,
}
"""The template filters, registered on the one Environment by `wirediff.reports.render`."""
