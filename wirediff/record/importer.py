"""`wirediff import`: mitmproxy flow files and HAR archives become `wirediff/1` records.

Each exchange is seen as an `Exchange` and goes through the same record builder as live
capture, so imported records are indistinguishable in shape from captured ones.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mitmproxy import exceptions, http, io
from mitmproxy.io.har import request_to_flow

from wirediff._types import Record
from wirediff.errors import CaptureError
from wirediff.record.build import build_record
from wirediff.record.exchange import Exchange
from wirediff.record.flow import exchange_from_flow, upstream_label

__all__ = ["exchange_from_har", "import_flows"]

HAR_WAITS = ("blocked", "connect", "send", "wait")
"""HAR `timings` phases before the first byte of the answer (`dns` lies inside `connect`)."""


def exchange_from_har(entry: dict[str, Any]) -> Exchange:
    """One HAR entry as an exchange.

    mitmproxy's HAR reader understands the dialects (browsers, Charles, Slack's header
    pairs, base64 bodies); the time to the first byte comes from the entry's `timings`.
    """
    return _har_exchange(request_to_flow(entry), entry)


def _har_exchange(flow: http.HTTPFlow, entry: dict[str, Any]) -> Exchange:
    ex = exchange_from_flow(flow)
    timings = entry.get("timings") or {}
    waited = sum(max(float(timings.get(k) or 0), 0.0) for k in HAR_WAITS)
    if ex.response is None or not waited:
        return ex
    first_byte = ex.timings.started + waited / 1000.0
    return dataclasses.replace(ex, timings=dataclasses.replace(ex.timings, first_byte=first_byte))


def _from_flowfile(path: Path) -> Iterator[tuple[Exchange, str]]:
    with path.open("rb") as fh:
        try:
            for f in io.FlowReader(fh).stream():
                if isinstance(f, http.HTTPFlow):
                    yield exchange_from_flow(f), upstream_label(f)
        except exceptions.FlowReadException as e:
            raise CaptureError(f"{path}: not a mitmproxy flow file ({e})") from None


def _from_har(path: Path) -> Iterator[tuple[Exchange, str]]:
    try:
        har = json.loads(path.read_text(encoding="utf-8"))
        entries = har["log"]["entries"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise CaptureError(f"{path}: not a HAR file ({type(e).__name__}: {e})") from None
    for i, entry in enumerate(entries):
        try:
            flow = request_to_flow(entry)
            ex = _har_exchange(flow, entry)
        except (KeyError, ValueError, TypeError, exceptions.OptionsError) as e:
            raise CaptureError(f"{path}: HAR entry {i} is malformed ({e!r})") from None
        yield ex, upstream_label(flow)


def import_flows(path: str | Path) -> list[Record]:
    """Records for every HTTP flow in a `.flow` (mitmdump -w) or `.har` file."""
    p = Path(path)
    if p.is_dir():
        raise CaptureError(f"{p}: is a directory, not a flow or HAR file")
    if not p.is_file():
        raise CaptureError(f"{p}: no such file")
    with p.open("rb") as fh:
        head = fh.read(64).lstrip()
    exchanges = _from_har(p) if head.startswith(b"{") else _from_flowfile(p)
    return [
        build_record(ex, session=p.stem, label=label, seq=i, listener=None)
        for i, (ex, label) in enumerate(exchanges)
    ]
