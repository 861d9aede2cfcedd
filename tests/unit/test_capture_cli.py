"""`wirediff capture` without processes: its help, its checks, the options table of
docs/cli.md, and the live session switch it documents, on the addon under mitmproxy's
`taddons`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mitmproxy.test import taddons, tflow

from wirediff.addons.capture import Capture
from wirediff.cli.capture_command import addon_options, check_extra, main_capture, split_upstream
from wirediff.errors import UsageError
from wirediff.record.store import load_records

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def documented_options() -> dict[str, str]:
    """`option -> default` from docs/cli.md's table under "### Options"."""
    section = CLI_DOC.read_text(encoding="utf-8").split("\n### Options\n", 1)[1]
    section = re.split(r"^#", section, maxsplit=1, flags=re.M)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]*) \|", section, re.M)
    return {name: default.strip() for name, default in rows}


def test_help_lists_every_addon_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main_capture(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    options = addon_options()
    assert len(options) >= 6
    for o in options:
        assert f"  {o.name} ({o.type}, default: {o.default!r})" in out
        assert o.help.split()[0] in out
    assert "capture_session" in out.split("The session can also change")[1]


def test_the_documented_table_lists_exactly_the_addon_options() -> None:
    table = documented_options()
    assert list(table) == [o.name for o in addon_options()]
    for o in addon_options():
        if o.default not in ("", None):  # an empty default is described in words
            assert table[o.name] == f"`{str(o.default).lower()}`", o.name


@pytest.mark.parametrize(
    ("url", "upstream", "path"),
    [
        ("https://api.openai.com/v1", "https://api.openai.com", "/v1"),
        ("https://api.openai.com/v1/", "https://api.openai.com", "/v1"),
        ("http://127.0.0.1:1234", "http://127.0.0.1:1234", "/v1"),
        ("http://gw.internal:4000/openai/v1", "http://gw.internal:4000", "/openai/v1"),
    ],
)
def test_the_upstream_and_the_clients_path(url: str, upstream: str, path: str) -> None:
    assert split_upstream(url) == (upstream, path)


@pytest.mark.parametrize(
    "argv",
    [
        ["--to", "api.openai.com"],
        ["--to", "ftp://host/v1"],
        ["--to", "https://host/v1?api-version=1"],
        ["--to", "https://user:pw@host/v1"],
        ["--to", "http://127.0.0.1:9/v1", "--session", "../elsewhere"],
        ["--to", "http://127.0.0.1:9/v1", "--", "--set", "capture_session=x"],
        ["--to", "http://127.0.0.1:9/v1", "--", "--set", "capture_dir=/tmp/x"],
        ["--to", "http://127.0.0.1:9/v1", "--", "--set=capture_label=x"],
        ["--to", "http://127.0.0.1:9/v1", "--", "--set", "capture_rotate=soon"],
        ["--to", "http://127.0.0.1:9/v1", "--", "--set=capture_rotate=0MB"],
        ["--to", "http://127.0.0.1:9/v1", "--", "--set", "capture_bodycap=5"],
        ["--to", "http://127.0.0.1:9/v1", "--", "--set", "capture_body_cap=abc"],
        ["--to", "http://127.0.0.1:9/v1", "--", "--set", "capture_body_cap=-1"],
        ["--to", "http://127.0.0.1:9/v1", "--", "--set=capture_lazy_connect=maybe"],
        [
            "--to",
            "http://127.0.0.1:9/v1",
            "--",
            "--set=capture_body_cap=1",
            "--set=capture_body_cap=2",
        ],
    ],
)
def test_bad_usage_is_one_line_and_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main_capture(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("wirediff: error: ") and err.count("\n") == 1
    assert "unexpected" not in err, err
    if "capture_bodycap" in argv[-1]:
        assert "unknown option capture_bodycap (did you mean capture_body_cap?)" in err


async def test_changing_capture_session_live_starts_a_new_file(tmp_path: Path) -> None:
    """What `:set capture_session=NAME` does in a running mitmproxy: the next exchanges go
    to NAME.jsonl, the earlier file is closed with what it had."""
    cap = Capture()
    with taddons.context(cap) as tctx:
        tctx.configure(cap, capture_dir=str(tmp_path), capture_session="first")
        for _ in range(2):
            f = tflow.tflow(resp=True)
            cap.requestheaders(f)
            cap.response(f)
        tctx.configure(cap, capture_session="second")
        f = tflow.tflow(resp=True)
        cap.requestheaders(f)
        cap.response(f)
        cap.done()
    first = load_records([tmp_path / "first.jsonl"])
    second = load_records([tmp_path / "second.jsonl"])
    assert [(r["session"], r["seq"]) for r in first] == [("first", 0), ("first", 1)]
    assert [(r["session"], r["seq"]) for r in second] == [("second", 0)]


@pytest.mark.parametrize(
    "extra",
    [
        ["--set", "capture_lazy_connect"],
        ["--set=capture_lazy_connect="],
        ["--set", "capture_lazy_connect=false"],
        ["--set", "capture_body_cap= 64 "],
        ["--set", "flow_detail=3", "--set", "flow_detail=4"],
    ],
    ids=["bare boolean", "empty boolean", "false", "spaced integer", "mitmdump's own twice"],
)
def test_what_mitmproxy_takes_is_taken(extra: list[str]) -> None:
    """A boolean's value may be left out (`--set NAME` is true, as mitmproxy reads it)."""
    assert check_extra(["--", *extra]) == extra


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            ["--set", "capture_rotate=1KB", "--set", "capture_rotate=2KB"],
            "--set capture_rotate given 2 times; give it once",
        ),
        (
            ["--set=capture_body_cap=1", "--set=capture_body_cap=1"],
            "--set capture_body_cap given 2 times; give it once",
        ),
        (
            ["--set", "capture_body_cap="],
            "--set capture_body_cap must be a whole number of bytes, not ''",
        ),
    ],
)
def test_what_mitmproxy_refuses_is_refused_first(extra: list[str], said: str) -> None:
    with pytest.raises(UsageError) as e:
        check_extra(extra)
    assert str(e.value) == said
