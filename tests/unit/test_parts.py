"""Capture rotation: `capture_rotate` specs, the writer starting `<session>.<n>.jsonl`, and
every loader reading a session as all its parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures import records as fx
from wirediff._types import Record
from wirediff.analysis.index.analyze import Index
from wirediff.record.parts import Rotation, capture_parts, expand_parts, parse_rotation
from wirediff.record.store import RecordWriter, encode_record, load_records


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("", None),
        ("100MB", Rotation(max_bytes=100_000_000)),
        ("512KiB", Rotation(max_bytes=512 * 1024)),
        ("1.5GiB", Rotation(max_bytes=3 << 29)),
        ("1h", Rotation(max_seconds=3600)),
        ("30m", Rotation(max_seconds=1800)),
        (" 90s ", Rotation(max_seconds=90)),
    ],
)
def test_rotation_specs(text: str, want: Rotation | None) -> None:
    assert parse_rotation(text) == want


@pytest.mark.parametrize("text", ["soon", "100", "10 parsecs", "0MB", "-1h", "MB"])
def test_bad_rotation_specs_say_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="capture_rotate must be"):
        parse_rotation(text)


def records(n: int) -> list[Record]:
    return [fx.chat_record(id=f"r{i}", seq=i) for i in range(n)]


def test_size_rotation_starts_numbered_parts_between_records(tmp_path: Path) -> None:
    recs = records(7)
    line = len(encode_record(recs[0]))
    base = tmp_path / "s.jsonl"
    with RecordWriter(base, Rotation(max_bytes=2 * line)) as w:
        for rec in recs:
            w.write(rec)
    parts = capture_parts(base)
    assert [p.name for p in parts] == ["s.jsonl", "s.1.jsonl", "s.2.jsonl", "s.3.jsonl"]
    for p in parts:  # whole records only, none split across parts
        assert [json.loads(x)["id"] for x in p.read_text().splitlines()]
    assert [r["id"] for r in load_records([base])] == [r["id"] for r in recs]


def test_a_batch_is_split_at_the_part_size(tmp_path: Path) -> None:
    recs = records(5)
    line = len(encode_record(recs[0]))
    base = tmp_path / "s.jsonl"
    with RecordWriter(base, Rotation(max_bytes=2 * line)) as w:
        w.write_lines(encode_record(r) for r in recs)
    assert [len(p.read_text().splitlines()) for p in capture_parts(base)] == [2, 2, 1]


def test_a_restarted_capture_goes_on_in_the_last_part(tmp_path: Path) -> None:
    recs = records(6)
    base = tmp_path / "s.jsonl"
    rotation = Rotation(max_bytes=3 * len(encode_record(recs[0])))
    with RecordWriter(base, rotation) as w:
        for rec in recs[:4]:
            w.write(rec)
    with RecordWriter(base, rotation) as w:
        assert w.path.name == "s.1.jsonl"
        for rec in recs[4:]:
            w.write(rec)
    assert [len(p.read_text().splitlines()) for p in capture_parts(base)] == [3, 3]


def test_any_part_names_the_whole_session_and_replays_are_no_parts(tmp_path: Path) -> None:
    for name in ("s.jsonl", "s.1.jsonl", "s.10.jsonl", "s.2.jsonl", "s.vllm.jsonl", "t.jsonl"):
        (tmp_path / name).write_bytes(b"")
    want = ["s.jsonl", "s.1.jsonl", "s.2.jsonl", "s.10.jsonl"]
    assert [p.name for p in capture_parts(tmp_path / "s.jsonl")] == want
    assert [p.name for p in capture_parts(tmp_path / "s.2.jsonl")] == want
    assert [p.name for p in capture_parts(tmp_path / "s.vllm.jsonl")] == ["s.vllm.jsonl"]
    every = expand_parts(sorted(tmp_path.glob("*.jsonl")))
    assert [p.name for p in every] == [*want, "s.vllm.jsonl", "t.jsonl"]


def test_a_lost_part_is_said_once_with_what_it_costs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A rotated session read without its middle: its exchanges are gone, and it is said."""
    for name in ("s.jsonl", "s.2.jsonl", "t.jsonl", "t.1.jsonl"):
        (tmp_path / name).write_bytes(b"")
    for _ in range(2):
        assert [p.name for p in capture_parts(tmp_path / "s.jsonl")] == ["s.jsonl", "s.2.jsonl"]
        assert len(capture_parts(tmp_path / "t.jsonl")) == 2
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 's.jsonl'}: parts of its session are missing ({tmp_path / 's.1.jsonl'}): "
        "their exchanges are not read"
    ]


def test_a_part_without_its_first_part_is_a_session_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "s.3.jsonl").write_bytes(b"")
    assert [p.name for p in capture_parts(tmp_path / "s.3.jsonl")] == ["s.3.jsonl"]


def test_a_numeric_replay_label_is_refused(tmp_path: Path) -> None:
    from wirediff.cli.replay import main_replay

    capture = tmp_path / "s.jsonl"
    with RecordWriter(capture) as w:
        w.write(fx.chat_record())
    code = main_replay([str(capture), "--to", "http://127.0.0.1:9/v1", "--label", "2"])
    assert code == 2


def _session(folder: Path, parts: int) -> list[Path]:
    """A session of `parts` parts, two records each."""
    recs = records(2 * parts)
    base = folder / "s.jsonl"
    with RecordWriter(base, Rotation(max_bytes=2 * len(encode_record(recs[0])))) as w:
        for rec in recs:
            w.write(rec)
    found = capture_parts(base)
    assert len(found) == parts
    return found


def test_the_engine_reads_a_session_once_whichever_of_its_parts_are_named(
    tmp_path: Path,
) -> None:
    from wirediff.cli import main

    parts = _session(tmp_path, 3)
    counts = []
    for named in ([parts[1]], parts, [*parts, parts[0]]):  # one part; a glob's worth
        out = tmp_path / "summary.json"
        assert (
            main(["report", *map(str, named), "-o", str(tmp_path / "r.html"), "--json", str(out)])
            == 0
        )
        counts.append(json.loads(out.read_text())["totals"]["exchanges"])
    assert counts == [6, 6, 6]


def test_a_session_is_read_in_the_order_of_its_parts_however_they_are_named(
    tmp_path: Path,
) -> None:
    """`captures/*.jsonl` names `s.1.jsonl` before `s.jsonl`: the records are read in the
    session's order all the same, so the first capture's label (the baseline) and the
    first record of a repeated id are the session's, as loading them reads them."""
    from wirediff.cli import main
    from wirediff.engine.sources import resolve

    recs = records(4)
    for rec in recs[2:]:
        rec["label"] = "gateway"
    recs[3]["id"] = "r0"  # read again in the second part: the first part's is analysed
    with RecordWriter(tmp_path / "s.jsonl", Rotation(max_bytes=len(encode_record(recs[0])))) as w:
        for rec in recs:
            w.write(rec)
    parts = capture_parts(tmp_path / "s.jsonl")
    loaded = load_records(parts[::-1])
    assert [r["label"] for r in loaded] == ["openai", "openai", "gateway", "gateway"]
    assert Index.of(loaded).rows["label"].tolist() == ["openai", "openai", "gateway"]
    summaries = []
    for named in (parts[:1], parts[::-1], [parts[2], parts[0]]):
        (found, *rest) = resolve([str(p) for p in named], scoped=False)
        assert [s.url for s in found] == [str(p) for p in parts] and not any(rest)
        out = tmp_path / "summary.json"
        args = ["report", *map(str, named), "-o", str(tmp_path / "r.html"), "--json", str(out)]
        assert main(args) == 0
        summary = json.loads(out.read_text())
        summaries.append((summary["baseline"], summary["totals"]["exchanges"]))
    assert summaries == [(["openai"], 3)] * 3


def test_a_part_at_a_url_names_the_whole_session(tmp_path: Path) -> None:
    from wirediff.engine.sources import resolve

    parts = _session(tmp_path, 3)
    (found,) = resolve([f"file://{parts[2]}"])
    assert [s.url for s in found] == [f"file://{p}" for p in parts]
    assert [s.size for s in found] == [p.stat().st_size for p in parts]


def test_files_are_read_at_absolute_paths_and_shown_as_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Dask worker runs in a folder of its own: it is sent where the file is, while
    messages name it as the command line did."""
    from wirediff.cli import main
    from wirediff.engine.sources import resolve

    parts = _session(tmp_path, 2)
    with parts[1].open("ab") as fh:
        fh.write(b'{"torn\n')
    monkeypatch.chdir(tmp_path)
    (found,) = resolve(["s.jsonl"])
    assert [(s.url, s.name) for s in found] == [(str(p), p.name) for p in parts]
    assert main(["report", "s.1.jsonl", "-o", "r.html", "--json", "r.json"]) == 0
    assert "s.1.jsonl:3: not a JSON record (a torn write): skipped" in caplog.text
    assert str(tmp_path) not in caplog.text


def test_check_keeps_each_named_file_with_its_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A candidate's parts named by a glob, or replay labels one of which reads as a part
    of the other (`qwen2`, `qwen2.5`): each argument keeps the file it names."""
    from tests.fixtures.sessions import fixture_sessions, write
    from wirediff.cli import main

    base, replays = fixture_sessions()
    write(tmp_path / "s.jsonl", base)
    candidate = replays["ollama"]
    write(tmp_path / "s.qwen2.jsonl", candidate[:10])
    write(tmp_path / "s.qwen2.5.jsonl", candidate[10:])
    for named in (["s.qwen2.jsonl", "s.qwen2.5.jsonl"], ["s.qwen2.5.jsonl", "s.qwen2.jsonl"]):
        code = main(["check", str(tmp_path / "s.jsonl"), *(str(tmp_path / n) for n in named)])
        said = capsys.readouterr()
        assert code == 0, said.err
        assert f"\n{len(candidate)} replayed and " in said.out, said.out  # after the bottom line


def test_two_urls_of_one_session_read_it_once(tmp_path: Path) -> None:
    from wirediff.engine.sources import resolve

    folder = tmp_path / "run[1]"  # glob characters in the folder
    folder.mkdir()
    parts = _session(folder, 3)
    found = resolve([f"file://{parts[0]}", f"file://{parts[2]}"])
    urls = [s.url for sources in found for s in sources]
    assert sorted(urls) == sorted(f"file://{p}" for p in parts)


def test_replay_outputs_named_like_parts_are_no_parts(tmp_path: Path) -> None:
    """Labels `qwen2` and `qwen2.5` give `s.qwen2.jsonl` and `s.qwen2.5.jsonl`: a replay's
    output is never rotated, so neither is a part of the other; a capture's parts are."""
    from tests.fixtures.sessions import fixture_sessions, write

    base, replays = fixture_sessions()
    write(tmp_path / "s.qwen2.jsonl", replays["ollama"][:10])
    write(tmp_path / "s.qwen2.5.jsonl", replays["ollama"][10:])
    assert [p.name for p in capture_parts(tmp_path / "s.qwen2.jsonl")] == ["s.qwen2.jsonl"]
    assert [p.name for p in capture_parts(tmp_path / "s.qwen2.5.jsonl")] == ["s.qwen2.5.jsonl"]
    write(tmp_path / "c.jsonl", base[:10])  # a capture's parts: originals
    write(tmp_path / "c.1.jsonl", base[10:])
    assert [p.name for p in capture_parts(tmp_path / "c.1.jsonl")] == ["c.jsonl", "c.1.jsonl"]
