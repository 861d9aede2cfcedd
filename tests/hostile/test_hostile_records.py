"""Hostile records: whatever a capture line holds, every command that reads captures ends
with exit 2 and one line naming file:line, never a traceback, never `check`'s exit 1."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from tests.fixtures.records import answer, openai_session, replay
from wirediff._types import Record
from wirediff.cli import main

pytestmark = pytest.mark.hostile

Change = Callable[[dict[str, Any]], Any]


def deep(n: int) -> Any:
    value: Any = {}
    for _ in range(n):
        value = {"a": value}
    return value


CHANGES: dict[str, Change] = {
    "started yesterday": lambda r: r.update(started="yesterday"),
    "headers not pairs": lambda r: r["request"].update(headers=[["content-type"]]),
    "headers a string": lambda r: r["response"].update(headers="content-type: x"),
    "status a string": lambda r: r["response"].update(status="200"),
    "events an object": lambda r: r["response"].update(events={"a": 1}),
    "an event without data": lambda r: r["response"].update(events=[{"t_ms": 1}]),
    "tags a list": lambda r: r.update(tags=[]),
    "family a number": lambda r: r["tags"].update(family=5),
    "error a string": lambda r: r.update(error="boom"),
    "id a number": lambda r: r.update(id=7),
    "request null": lambda r: r.update(request=None),
    "no label": lambda r: r.pop("label"),
    "tags null": lambda r: r.update(tags=None),
    "no endpoint": lambda r: r["tags"].pop("endpoint"),
    "status null": lambda r: r["response"].update(status=None),
    "sdk a number": lambda r: r["tags"].update(sdk=5),
    "an auth without its header": lambda r: r["tags"].update(auth={"scheme": "Bearer"}),
    "another format": lambda r: r.update(format="wirediff/2"),
}
DEEP_LINE = (
    '{"format": "wirediff/1", "id": "x", "request": {"body": ' + "[" * 10_000 + "]" * 10_000 + "}}"
)


@pytest.fixture
def captures(tmp_path: Path) -> tuple[Path, Path, list[Record]]:
    base = openai_session()
    cand = [replay(r, id=f"c{i}") for i, r in enumerate(base)]
    b, c = tmp_path / "base.jsonl", tmp_path / "cand.jsonl"
    c.write_text("".join(json.dumps(r) + "\n" for r in cand))
    return b, c, base


def commands(base: Path, cand: Path) -> dict[str, list[str]]:
    out = base.parent
    return {
        "report": [
            "report",
            str(base),
            str(cand),
            "-o",
            str(out / "r.html"),
            "--json",
            str(out / "s.json"),
            "--findings",
            str(out / "f.jsonl"),
            "--csv",
            str(out / "d.csv"),
        ],
        "diagnose": ["diagnose", str(base), str(cand), "--json"],
        "check": ["check", str(base), str(cand)],
        "replay": ["replay", str(base), "--to", "http://127.0.0.1:9/v1", "--dry-run"],
    }


@pytest.mark.parametrize("change", [*CHANGES, "nested 10 000 levels"])
def test_every_command_says_one_line_and_exits_2(
    captures: tuple[Path, Path, list[Record]],
    capsys: pytest.CaptureFixture[str],
    change: str,
) -> None:
    base, cand, records = captures
    lines = [json.dumps(r) for r in records]
    if change in CHANGES:
        bad = cast(dict[str, Any], copy.deepcopy(records[2]))  # made malformed on purpose
        CHANGES[change](bad)
        lines[2] = json.dumps(bad)
    else:
        lines[2] = DEEP_LINE
    base.write_text("\n".join(lines) + "\n")
    runs = {**commands(base, cand), "check, as the candidate": ["check", str(cand), str(base)]}
    for name, argv in runs.items():
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, f"{name}: exit {code}: {err}"
        assert err.count("\n") == 1 and f"{base}:3: " in err, f"{name}: {err}"
        assert "Traceback" not in err and "unexpected" not in err, f"{name}: {err}"


def test_bodies_nested_deeper_than_the_limit_are_analysed_as_text(
    captures: tuple[Path, Path, list[Record]], capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand, records = captures
    answer(records[0])["body"] = deep(500)
    base.write_text("".join(json.dumps(r) + "\n" for r in records))
    for name, argv in commands(base, cand).items():
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 0 and "Traceback" not in err, f"{name}: exit {code}: {err}"
    lines = (base.parent / "f.jsonl").read_text().splitlines()
    as_text = [
        d["message"]
        for d in map(json.loads, lines)
        if "kind" in d
        and records[0]["id"] in (d["baseline_id"], d["candidate_id"])
        and d["path"] == "body"
    ]
    assert len(as_text) == 1 and "a body that is not JSON" in as_text[0], as_text
