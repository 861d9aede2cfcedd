"""`wirediff import`: mitmproxy flow files and HAR archives become `wirediff/1` records.

Both are turned into mitmproxy `HTTPFlow`s and go through the same record builder as live
capture, so imported records are indistinguishable in shape from captured ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from mitmproxy import exceptions, http, io

from wirediff._types import Record
from wirediff.errors import CaptureError
from wirediff.record.build import build_record, upstream_label


def _flows_from_flowfile(path: Path) -> Iterator[http.HTTPFlow]:
    with path.open("rb") as fh:
        try:
            for f in io.FlowReader(fh).stream():
                if isinstance(f, http.HTTPFlow):
                    yield f
        except exceptions.FlowReadException as e:
            raise CaptureError(f"{path}: not a mitmproxy flow file ({e})") from None


def _flows_from_har(path: Path) -> Iterator[http.HTTPFlow]:
    from mitmproxy.io.har import request_to_flow

    try:
        har = json.loads(path.read_text(encoding="utf-8"))
        entries = har["log"]["entries"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise CaptureError(f"{path}: not a HAR file ({type(e).__name__}: {e})") from None
    for i, entry in enumerate(entries):
        try:
            flow = request_to_flow(entry)
        except (KeyError, ValueError, TypeError, exceptions.OptionsError) as e:
            raise CaptureError(f"{path}: HAR entry {i} is malformed ({e!r})") from None
        timings = entry.get("timings") or {}
        waited = sum(
            max(float(timings.get(k) or 0), 0.0) for k in ("blocked", "connect", "send", "wait")
        )
        if flow.response is not None and waited:
            flow.response.timestamp_start = flow.request.timestamp_start + waited / 1000.0
        yield flow


def import_flows(path: str | Path) -> list[Record]:
    """Records for every HTTP flow in a `.flow` (mitmdump -w) or `.har` file."""
    p = Path(path)
    if p.is_dir():
        raise CaptureError(f"{p}: is a directory, not a flow or HAR file")
    if not p.is_file():
        raise CaptureError(f"{p}: no such file")
    with p.open("rb") as fh:
        head = fh.read(64).lstrip()
    flows = _flows_from_har(p) if head.startswith(b"{") else _flows_from_flowfile(p)
    return [
        build_record(f, session=p.stem, label=upstream_label(f), seq=i, listener=None)
        for i, f in enumerate(flows)
    ]
