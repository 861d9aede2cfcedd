"""The report in Debian's headless Chromium, driven over the DevTools protocol (a pipe).

No console error, nothing fetched but the file itself, the matrix and a divergence
visible, a filter click hides the other backends; at 1024, 1400 and 1920 px nothing is wider
than the window, no text runs out of its card, cell or row and no card lies over another
(element boxes compared, closed and with every detail open), the bottom line and the
drop-in verdicts are on the first screen, the latency charts' values sit where their values
are, and what the verdicts say names no raw id. Screenshots of the window go to tmp, and of
the page's top to `$WIREDIFF_SCREENSHOTS` (a directory, as `report-<width>.png`) when set;
`$WIREDIFF_REPORT` checks an existing report instead of the fixture one. The README's
screenshots are the demo's, taken so:

    make demo && WIREDIFF_REPORT=wirediff-demo/report.html WIREDIFF_SCREENSHOTS=docs \
        .venv/bin/pytest tests/e2e/test_report_browser.py -k "1400px or 1024px"
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import missing
from tests.fixtures import records as fx
from tests.unit.test_report import analysed, render, sample_records
from wirediff._types import Record

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--remote-debugging-pipe", "--hide-scrollbars",
]  # fmt: skip
WIDTH, HEIGHT = 1360, 1700
VIEWPORTS = [(1024, 1200), (1400, 1000), (1920, 1080)]
"""Window sizes the layout is checked at (width, height of the first screen)."""
SHOWN_HEIGHT = 1600
"""Pixels of the page's top in the screenshots written to `$WIREDIFF_SCREENSHOTS`."""

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


class DevTools:
    """The Chrome DevTools protocol over `--remote-debugging-pipe` (fd 3 in, fd 4 out)."""

    def __init__(self, chromium: str, profile: Path, log: Path) -> None:
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        # Keep the child's ends clear of 3 and 4 so that dup2 cannot clobber one with the other.
        child_in = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_out = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_chrome_r)
        os.close(from_chrome_w)

        def wire_fds() -> None:
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        with log.open("wb") as err:
            self.proc = subprocess.Popen(
                [
                    chromium,
                    *FLAGS,
                    f"--user-data-dir={profile}",
                    f"--window-size={WIDTH},{HEIGHT}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                close_fds=False,
                preexec_fn=wire_fds,
            )
        os.close(child_in)
        os.close(child_out)
        self.write_fd, self.read_fd = to_chrome_w, from_chrome_r
        self.buf = b""
        self.events: list[dict[str, Any]] = []
        self.next_id = 0
        self.session: str | None = None

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from chromium")
            ready, _, _ = select.select([self.read_fd], [], [], left)
            if ready:
                chunk = os.read(self.read_fd, 1 << 20)
                if not chunk:
                    raise EOFError("chromium closed the DevTools pipe")
                self.buf += chunk
        raw, _, self.buf = self.buf.partition(b"\0")
        return dict(json.loads(raw))

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self.write_fd, data) :]
        deadline = time.monotonic() + timeout
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while True:
            ev = self._message(deadline)
            self.events.append(ev)
            if ev.get("method") == method:
                return ev

    def open(
        self, url: str, *, javascript: bool = True, width: int = WIDTH, height: int = HEIGHT
    ) -> None:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.resize(width, height)
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")
        if not javascript:  # emulation is per document: switch scripts off, then load again
            self.call("Emulation.setScriptExecutionDisabled", value=True)
            self.events.clear()
            self.call("Page.reload")
            self.wait_event("Page.loadEventFired")

    def resize(self, width: int, height: int) -> None:
        """The window's size in CSS pixels (the layout viewport)."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def js(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click at the element's centre (not a synthetic `el.click()`)."""
        box = self.js(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)}); el.scrollIntoView({{block: 'center'}});"
            " const r = el.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        x, y = box
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def screenshot(self, path: Path, height: int | None = None) -> None:
        """The window, or its top `height` pixels of the page, however far they reach."""
        clip: dict[str, Any] = {}
        if height:
            width = self.js("window.innerWidth")
            clip = {"clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}}
        data = self.call(
            "Page.captureScreenshot", format="png", captureBeyondViewport=bool(height), **clip
        )["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def errors(self) -> list[str]:
        out = []
        for ev in self.events:
            method, params = ev.get("method"), ev.get("params") or {}
            if method == "Runtime.exceptionThrown":
                out.append(json.dumps(params["exceptionDetails"])[:300])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append(json.dumps(params.get("args"))[:300])
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                out.append(params["entry"].get("text", "")[:300])
        return out

    def requests(self) -> list[str]:
        return [
            ev["params"]["request"]["url"]
            for ev in self.events
            if ev.get("method") == "Network.requestWillBeSent"
        ]

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, EOFError, OSError):
            self.call("Browser.close", timeout=5)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.write_fd)
        os.close(self.read_fd)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    chromium = shutil.which("chromium")
    if chromium is None:
        missing("needs Debian's chromium: make browser (apt-get install -y chromium)")
    devtools = DevTools(chromium, tmp_path / "profile", tmp_path / "chromium.log")
    try:
        yield devtools
    finally:
        devtools.close()


def visible(selector: str) -> str:
    """JS: how many elements match and how many of them are rendered."""
    return (
        f"(() => {{ const all = [...document.querySelectorAll({json.dumps(selector)})];"
        " return [all.length, all.filter(e => e.checkVisibility()).length]; })()"
    )


def layout_records() -> list[Record]:
    """The report tests' sample, and a stream whose events lack a deep field: the longest
    path a finding names (`events[response.*].response.usage.input_tokens_details.…`)."""
    records = sample_records()
    [stream] = [
        r
        for r in records
        if r["label"] == "openai"
        and r["tags"]["stream"]
        and r["tags"]["family"] == "responses"
        and not (r["request"]["body"] or {}).get("tools")
    ]

    def no_cache_write_tokens(rec: Record) -> None:
        for data in fx.payloads(rec):
            usage = (data.get("response") or {}).get("usage") if isinstance(data, dict) else None
            if usage:
                usage["input_tokens_details"].pop("cache_write_tokens", None)
        fx.set_payloads(rec, fx.payloads(rec), renumber=False)

    records.append(fx.replay(stream, id="vl-resp-s", label="vllm", change=no_cache_write_tokens))
    return records


def report_under_test(tmp_path: Path) -> Path:
    given = os.environ.get("WIREDIFF_REPORT")
    if given:
        return Path(given).resolve()
    return render(*analysed(layout_records()), tmp_path / "report.html")


def test_report_in_headless_chromium(browser: DevTools, tmp_path: Path) -> None:
    report = report_under_test(tmp_path)
    browser.open(report.as_uri())

    assert browser.errors() == []
    assert set(browser.requests()) == {report.as_uri()}, "the report fetched something"
    assert browser.js(visible("#filters")) == [1, 1], "the script did not run"
    matrix = browser.js(visible("table.matrix td[data-backend]"))
    assert matrix[0] > 0 and matrix[1] == matrix[0]
    assert browser.js(visible("details.finding > summary"))[1] > 0, "no divergence visible"

    backend = browser.js("document.querySelector('details.finding').dataset.backend")
    browser.click(f'#filters [data-dim="backend"] button[data-value="{backend}"]')
    mine = browser.js(visible(f'table.matrix td[data-backend="{backend}"]'))
    others = browser.js(visible(f'table.matrix td[data-backend]:not([data-backend="{backend}"])'))
    assert mine[1] == mine[0] > 0
    assert others[0] > 0 and others[1] == 0, "the filter did not hide the other backends"
    assert browser.js(visible(f'details.finding:not([data-backend="{backend}"])'))[1] == 0
    assert browser.js(visible(f'details.finding[data-backend="{backend}"] > summary'))[1] > 0
    assert browser.js(visible(f'.card[data-backend="{backend}"]')) == [1, 1]

    browser.click('#filters [data-dim="backend"] button[data-value=""]')
    assert browser.js(visible("table.matrix td[data-backend]")) == matrix
    assert browser.errors() == []


def test_a_backend_named_with_spaces_is_filtered_as_one(browser: DevTools, tmp_path: Path) -> None:
    """A label is one value, spaces and all (a timeline's kinds are a list; a label is not)."""
    records = sample_records()
    for rec in records:
        if rec.get("label") == "lmstudio":
            rec["label"] = "LM Studio"
    browser.open(render(*analysed(records), tmp_path / "report.html").as_uri())
    cells = browser.js(visible('table.matrix td[data-backend="LM Studio"]'))
    browser.click('#filters [data-dim="backend"] button[data-value="LM Studio"]')
    assert browser.js(visible('table.matrix td[data-backend="LM Studio"]')) == cells
    assert cells[0] > 0 and browser.js(visible('.card[data-backend="LM Studio"]')) == [1, 1]
    assert (
        browser.js(visible('table.matrix td[data-backend]:not([data-backend="LM Studio"])'))[1] == 0
    )
    assert browser.errors() == []


def test_report_reads_with_javascript_off(browser: DevTools, tmp_path: Path) -> None:
    browser.open(report_under_test(tmp_path).as_uri(), javascript=False)
    assert browser.errors() == []
    assert browser.js(visible("#filters")) == [1, 0], "filters need JS: hidden without it"
    cards = browser.js(visible(".card"))
    assert cards[0] > 0 and cards[1] == cards[0]
    assert browser.js(visible("table.matrix"))[1] == 1
    assert browser.js(visible("details.finding > summary"))[1] > 0, "no divergence visible"
    shown = browser.js(visible("details.finding > summary"))[1]
    browser.click("details.kindgroup:not([open]) > summary")  # <details> opens natively
    assert browser.js(visible("details.finding > summary"))[1] > shown


OVERFLOW = """(() => {
  const width = window.innerWidth;
  const clipped = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== "visible") return true;
    }
    return false;
  };
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + (el.classList.length ? "." + [...el.classList].join(".") : "");
  const wide = [];
  for (const el of document.querySelectorAll("body *")) {
    if (!el.checkVisibility()) continue;
    const r = el.getBoundingClientRect();
    if ((r.right > width + 0.5 || r.left < -0.5) && !clipped(el)) {
      wide.push(`${name(el)} ${Math.round(r.left)}..${Math.round(r.right)}`);
    }
  }
  return [document.documentElement.scrollWidth, width, wide.slice(0, 8)];
})()"""
"""JS: the page's scroll width, the window's, and the rendered elements that reach past
either edge of the window (an element inside a box that scrolls or clips on its own, as a
`<pre>` does, is judged by that box)."""

FIRST_SCREEN = """(() => {
  const first = document.querySelector("main > section");
  const row = document.querySelector("#verdicts table.dropin tbody tr");
  const r = row.getBoundingClientRect();
  const line = document.querySelector("#verdicts .bottomline");
  return [first.id, r.top >= 0 && r.bottom <= window.innerHeight, row.checkVisibility(),
          line !== null && line.getBoundingClientRect().top < r.top];
})()"""
"""JS: which section comes first, whether its first verdict is whole on the first screen, and
whether the bottom line is above it."""

BOXES = """(() => {
  const CONTAINERS = ".card, .cellev, .kindgroup, .chain, .timeline, .chart, td, th, li, summary, figure, p";
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + (el.classList.length ? "." + [...el.classList].join(".") : "");
  const clipped = (el, box) => {
    for (let p = el; p && p !== box.parentElement; p = p.parentElement) {
      const s = getComputedStyle(p);
      if (s.overflowX !== "visible" || p instanceof SVGElement) return true;
    }
    return false;
  };
  const out = [];
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el.checkVisibility()) continue;
    const box = el.closest(CONTAINERS);
    if (!box || clipped(el, box)) continue;
    const b = box.getBoundingClientRect();
    const range = document.createRange();
    range.selectNodeContents(n);
    for (const r of range.getClientRects()) {
      if (r.width > 0 && (r.left < b.left - 1 || r.right > b.right + 1)) {
        out.push(`text of ${name(el)} at ${Math.round(r.left)}..${Math.round(r.right)} outside ${name(box)} ${Math.round(b.left)}..${Math.round(b.right)}: ${n.textContent.trim().slice(0, 60)}`);
        break;
      }
    }
  }
  for (const sel of [".cards > .card", ".cells > .cellev", ".charts > .chart", "main > section"]) {
    const boxes = [...document.querySelectorAll(sel)].filter(e => e.checkVisibility());
    const rects = boxes.map(e => e.getBoundingClientRect());
    for (let i = 0; i < rects.length; i++) {
      for (let j = i + 1; j < rects.length; j++) {
        const a = rects[i], c = rects[j];
        const w = Math.min(a.right, c.right) - Math.max(a.left, c.left);
        const h = Math.min(a.bottom, c.bottom) - Math.max(a.top, c.top);
        if (w > 1 && h > 1) out.push(`${name(boxes[i])} lies over ${name(boxes[j])} (${sel})`);
      }
    }
  }
  return out.slice(0, 10);
})()"""
"""JS: text that runs out of the card, cell, row, item or paragraph it is in (unless a box on
the way scrolls or clips it, as a `<pre>` does), and cards, cells, charts or sections that
lie over one another: element boxes compared."""

LATENCY = """(() => {
  const out = [];
  for (const bar of document.querySelectorAll("#latency g.bar")) {
    const median = bar.querySelector("line.median").getBBox();
    const whisker = bar.querySelector("line.whisker").getBBox();
    const p50 = bar.querySelector("text.p50").getBBox();
    const p95 = bar.querySelector("text.p95").getBBox();
    const label = bar.querySelector("text:not(.val)").getBBox();
    const overlap = (a, b) => a.x < b.x + b.width && b.x < a.x + a.width
      && a.y < b.y + b.height && b.y < a.y + a.height;
    out.push([
      Math.abs(p50.x + p50.width / 2 - median.x) < 1 || p50.x > label.x + label.width,
      p95.x >= whisker.x + whisker.width,
      !overlap(p50, p95) && !overlap(p50, label) && !overlap(p95, label),
      p50.y + p50.height <= median.y + median.height,
    ]);
  }
  return out;
})()"""
"""JS: per latency bar, whether the median's value is centred on the median's line (or, for
a median near zero, just clear of the backend's name), the p95's value comes after its
whisker, no two labels overlap, and the median's value is above the box."""

WHOLE_NAMES = """[...document.querySelectorAll("table.verdicts th, table.dropin td:nth-child(2)")]
  .filter(e => e.checkVisibility())
  .filter(e => { const r = document.createRange(); r.selectNodeContents(e);
                 return r.getClientRects().length > 1; })
  .map(e => e.textContent)"""
"""JS: endpoint family names broken over lines (one that wraps anywhere reads `chat.completio
ns`)."""

RAW_ID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b[a-z]{2,12}[_-](?=[A-Za-z0-9]*\d)[A-Za-z0-9]{16,}"
"""A uuid or a prefixed generated id (`resp_8307…`)."""


@pytest.mark.parametrize(("width", "height"), VIEWPORTS, ids=[f"{w}px" for w, _ in VIEWPORTS])
def test_report_fits_the_window_at_widths(
    browser: DevTools, tmp_path: Path, width: int, height: int
) -> None:
    report = report_under_test(tmp_path)
    browser.open(report.as_uri(), width=width, height=height)
    assert browser.errors() == []
    assert browser.js("[window.innerWidth, window.innerHeight]") == [width, height]
    assert browser.js(FIRST_SCREEN) == ["verdicts", True, True, True], "the verdicts are not first"

    shot = tmp_path / f"report-{width}.png"
    browser.screenshot(shot)
    assert shot.stat().st_size > 20_000
    if os.environ.get("WIREDIFF_SCREENSHOTS"):
        docs = Path(os.environ["WIREDIFF_SCREENSHOTS"]) / f"report-{width}.png"
        browser.screenshot(docs, height=SHOWN_HEIGHT)

    scroll, inner, wide = browser.js(OVERFLOW)
    assert scroll <= inner and not wide, (scroll, inner, wide)
    assert browser.js(BOXES) == []
    assert browser.js(WHOLE_NAMES) == []
    bars = browser.js(LATENCY)
    assert bars and all(all(checks) for checks in bars), bars
    said = browser.js(
        "[...document.querySelectorAll('#verdicts, .cellev .reasons')].map(e => e.innerText)"
    )
    assert not [t for t in said if re.search(RAW_ID, t)], "a verdict names a raw id"
    cards = browser.js(
        "[...document.querySelectorAll('#summary .card')].map(c => c.getBoundingClientRect().right)"
    )
    main = browser.js("document.querySelector('#summary .cards').getBoundingClientRect().right")
    assert max(cards) >= main - 1, "the summary's cards leave the width unused"

    browser.click("#expand-all")
    assert browser.js(visible("main details:not([open])"))[0] == 0
    scroll, inner, wide = browser.js(OVERFLOW)
    assert scroll <= inner and not wide, ("with every detail open", scroll, inner, wide)
    assert browser.js(BOXES) == [], "with every detail open"
    assert browser.errors() == []
