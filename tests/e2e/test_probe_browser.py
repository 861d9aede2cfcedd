"""The probe's report in Debian's headless Chromium: it opens with the feature matrix and the
client rows, whole on the first screen's width; it fetches nothing but itself; and what a
server wrote (its error messages, its model's name) is shown as text, never run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_report_browser import OVERFLOW, VIEWPORTS, DevTools, visible
from tests.e2e.test_report_browser import browser as browser  # the fixture
from tests.probe_premises import answering
from wirediff.backends.standin import standin
from wirediff.cli.probe import main_probe
from wirediff.probe.features import load_probe

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

HOSTILE = "<script>window.pwned = 1</script><img src=x onerror='window.pwned = 2'>"
FIRST_ROWS = """(() => {
  const first = document.querySelector("main > section");
  const rows = [...document.querySelectorAll("#probe table.probe tbody tr")];
  const whole = (el) => { const r = el.getBoundingClientRect();
    return r.top >= 0 && r.bottom <= window.innerHeight && el.checkVisibility(); };
  return [first.id, rows.length, whole(rows[0])];
})()"""
"""JS: the first section, how many probe rows, whether the first is whole on the first screen."""


@pytest.fixture
def hostile() -> Iterator[str]:
    """A server that lists a model and refuses everything else, in words that are markup."""

    def answer(method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
        doc: Any = {"error": {"message": HOSTILE, "type": HOSTILE}}
        if path == "/v1/models":
            doc = {"object": "list", "data": [{"id": HOSTILE, "object": "model"}]}
        return 200 if path == "/v1/models" else 400, "application/json", json.dumps(doc).encode()

    with answering(answer) as url:
        yield url


@pytest.mark.parametrize(("width", "height"), VIEWPORTS, ids=[f"{w}px" for w, _ in VIEWPORTS])
def test_the_probe_report_opens_with_its_matrix(
    browser: DevTools, tmp_path: Path, width: int, height: int
) -> None:
    report = tmp_path / "probe.html"
    with standin("lmstudio") as url:
        assert main_probe([url + "/v1", "-o", str(report)]) == 1
    browser.open(report.as_uri(), width=width, height=height)
    assert browser.errors() == []
    assert set(browser.requests()) == {report.as_uri()}, "the report fetched something"
    rows = len(load_probe().features) + len(load_probe().clients)
    assert browser.js(FIRST_ROWS) == ["probe", rows, True], "the probe's matrix is not first"
    assert browser.js(visible("#probe .v-not-ready"))[1] > 0
    scroll, inner, wide = browser.js(OVERFLOW)
    assert scroll <= inner and not wide, (scroll, inner, wide)
    # a client's blocking feature links to its row
    browser.click("#probe a[href^='#probe-']")
    assert browser.js("location.hash").startswith("#probe-responses")


def test_what_a_server_wrote_is_text(browser: DevTools, hostile: str, tmp_path: Path) -> None:
    report = tmp_path / "probe.html"
    assert main_probe([hostile, "-o", str(report)]) == 1
    browser.open(report.as_uri())
    assert browser.errors() == []
    assert browser.js("window.pwned === undefined"), "the server's markup ran"
    assert browser.js("document.querySelectorAll('main script, main img').length") == 0
    shown = browser.js("document.querySelector('#probe').textContent")
    assert HOSTILE in shown  # its words, as it wrote them
