"""The report in Debian's headless Chromium, driven over the DevTools protocol (a pipe).

No console error, nothing fetched but the file itself, the matrix and a divergence
visible, a filter click hides the other backends; at 900, 1400 and 1920 px nothing is wider
than the window (closed and with every detail open) and the drop-in verdicts are on the
first screen. Screenshots of the window go to tmp, and of the page's top to
`$WIREDIFF_SCREENSHOTS` (a directory, as `report-<width>.png`) when set; `$WIREDIFF_REPORT`
checks an existing report instead of the fixture one. The README's screenshots are the
demo's, taken so:

    make demo && WIREDIFF_REPORT=wirediff-demo/report.html WIREDIFF_SCREENSHOTS=docs \
        .venv/bin/pytest tests/e2e/test_report_browser.py -k "1400px or 900px"
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import missing
from tests.unit.test_report import analysed, render, sample, sample_records

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--remote-debugging-pipe", "--hide-scrollbars",
]  # fmt: skip
WIDTH, HEIGHT = 1360, 1700
VIEWPORTS = [(900, 1200), (1400, 1000), (1920, 1080)]
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


def report_under_test(tmp_path: Path) -> Path:
    given = os.environ.get("WIREDIFF_REPORT")
    if given:
        return Path(given).resolve()
    analysis, diagnoses = sample()
    return render(analysis, diagnoses, tmp_path / "report.html")


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
  return [first.id, r.top >= 0 && r.bottom <= window.innerHeight, row.checkVisibility()];
})()"""
"""JS: which section comes first, and whether its first verdict is whole on the first screen."""


@pytest.mark.parametrize(("width", "height"), VIEWPORTS, ids=[f"{w}px" for w, _ in VIEWPORTS])
def test_report_fits_the_window_at_widths(
    browser: DevTools, tmp_path: Path, width: int, height: int
) -> None:
    report = report_under_test(tmp_path)
    browser.open(report.as_uri(), width=width, height=height)
    assert browser.errors() == []
    assert browser.js("[window.innerWidth, window.innerHeight]") == [width, height]
    assert browser.js(FIRST_SCREEN) == ["verdicts", True, True], "the verdicts are not first"

    shot = tmp_path / f"report-{width}.png"
    browser.screenshot(shot)
    assert shot.stat().st_size > 20_000
    if os.environ.get("WIREDIFF_SCREENSHOTS"):
        docs = Path(os.environ["WIREDIFF_SCREENSHOTS"]) / f"report-{width}.png"
        browser.screenshot(docs, height=SHOWN_HEIGHT)

    scroll, inner, wide = browser.js(OVERFLOW)
    assert scroll <= inner and not wide, (scroll, inner, wide)
    cards = browser.js(
        "[...document.querySelectorAll('#summary .card')].map(c => c.getBoundingClientRect().right)"
    )
    main = browser.js("document.querySelector('#summary .cards').getBoundingClientRect().right")
    assert max(cards) >= main - 1, "the summary's cards leave the width unused"

    browser.click("#expand-all")
    assert browser.js(visible("main details:not([open])"))[0] == 0
    scroll, inner, wide = browser.js(OVERFLOW)
    assert scroll <= inner and not wide, ("with every detail open", scroll, inner, wide)
    assert browser.errors() == []
