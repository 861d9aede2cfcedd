"""`wirediff export --parquet`: JSON Lines → Parquet → analysed gives what the JSON Lines
give; the dataset holds the records byte for byte, one row per event, at a path or an
fsspec URL."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.fixtures.sessions import masked, write_fixtures
from wirediff.cli import main
from wirediff.engine.parquet import EVENT_SCHEMA, EXCHANGE_SCHEMA
from wirediff.engine.sources import DATASET_MARK
from wirediff.record.redact import fingerprint
from wirediff.record.store import load_records


@pytest.fixture
def captures(tmp_path: Path) -> list[Path]:
    d = tmp_path / "captures"
    d.mkdir()
    return write_fixtures(d)


def outputs(
    inputs: list[str], out: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[Any, str, str, str]:
    """What `report --json --csv`, `check` and `diagnose --json` say about `inputs`."""
    out.mkdir()
    argv = ["report", *inputs, "-o", str(out / "r.html"), "--json", str(out / "s.json")]
    assert main([*argv, "--csv", str(out / "d.csv")]) == 0
    capsys.readouterr()
    assert main(["check", *inputs]) == 1
    check = capsys.readouterr().out
    assert main(["diagnose", *inputs, "--json"]) == 0
    diagnosed = capsys.readouterr().out
    summary = masked(json.loads((out / "s.json").read_text()))
    return summary, (out / "d.csv").read_text(), check, diagnosed


def export(inputs: list[Path], dataset: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["export", *map(str, inputs), "--parquet", dataset]) == 0
    return capsys.readouterr().out


def test_jsonl_to_parquet_round_trip_gives_the_same_results(
    tmp_path: Path, captures: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    records = load_records(captures)
    events = sum(len(r["response"].get("events") or []) for r in records if r["response"])
    datasets = []
    for n, capture in enumerate(captures):  # one dataset per capture: check's arguments
        dataset = tmp_path / f"dataset{n}"
        said = export([capture], str(dataset), capsys)
        assert said.startswith(f"{len(load_records([capture])):,} exchanges")
        datasets.append(str(dataset))
    jsonl = outputs([str(p) for p in captures], tmp_path / "from-jsonl", capsys)
    parquet = outputs(datasets, tmp_path / "from-parquet", capsys)
    assert parquet == jsonl
    assert jsonl[0]["totals"]["exchanges"] == len(records)

    exported = [pq.read_table(Path(d) / "exchanges") for d in datasets]
    texts = sorted(t for table in exported for t in table.column("record").to_pylist())
    lines = sorted(line for p in captures for line in p.read_text().splitlines(keepends=True))
    assert texts == lines, "each record's line, byte for byte"
    assert {"session", "label"} <= set(exported[0].column_names), "the directories' keys"
    assert sum(pq.read_table(Path(d) / "events").num_rows for d in datasets) == events
    mark = json.loads((Path(datasets[0]) / DATASET_MARK).read_text())
    assert mark["format"] == "wirediff-dataset/1"
    assert mark["exchanges"] == len(load_records([captures[0]]))


def test_a_dataset_at_an_fsspec_url_reads_like_the_captures(
    tmp_path: Path, captures: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"file://{tmp_path / 'remote' / 'all'}"
    export(captures, url, capsys)
    written = list((tmp_path / "remote" / "all" / "exchanges").rglob("*.parquet"))
    mark = json.loads((tmp_path / "remote" / "all" / DATASET_MARK).read_text())
    assert mark["files"] == len(written) > 1, "a file per session and label"
    part = next((tmp_path / "remote" / "all" / "exchanges").glob("session=*/label=*/*.parquet"))
    assert pq.read_schema(part).names == EXCHANGE_SCHEMA.names
    events = next((tmp_path / "remote" / "all" / "events").rglob("*.parquet"))
    assert pq.read_schema(events).names == EVENT_SCHEMA.names
    for argv in (["diagnose", "--json"], ["report", "-o", str(tmp_path / "r{}.html")]):
        outs = []
        for n, inputs in enumerate(([url], [str(p) for p in captures])):
            args = [a.format(n) for a in argv]
            assert main([args[0], *inputs, *args[1:]]) == 0
            outs.append(capsys.readouterr().out.replace(f"r{n}.html", "r.html"))
        assert outs[0] == outs[1]
    # alone, the dataset's labels other than the baseline's are the candidates
    assert main(["check", *map(str, captures)]) == 1
    expected = capsys.readouterr().out
    assert main(["check", url]) == 1
    assert capsys.readouterr().out == expected


@pytest.mark.parametrize(
    ("existing", "said"),
    [("a file", "is a file: --parquet names a directory to create"),
     ("an empty file", "is a file: --parquet names a directory to create"),
     ("a non-empty directory", "exists and is not empty")],
)  # fmt: skip
def test_export_never_writes_over_something(
    tmp_path: Path,
    captures: list[Path],
    capsys: pytest.CaptureFixture[str],
    existing: str,
    said: str,
) -> None:
    target = tmp_path / "target"
    if existing == "a file":
        target.write_text("keep me")
    elif existing == "an empty file":
        target.touch()
    else:
        target.mkdir()
        (target / "keep.txt").write_text("keep me")
    assert main(["export", str(captures[0]), "--parquet", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err
    if existing == "an empty file":
        assert target.read_text() == ""
        return
    assert "keep me" in (
        target.read_text() if target.is_file() else (target / "keep.txt").read_text()
    )


def test_an_empty_target_is_one_clear_line(
    captures: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", str(captures[0]), "--parquet", ""]) == 2
    assert capsys.readouterr().err == "wirediff: error: --parquet needs a directory or a URL\n"


def test_a_broken_dataset_file_or_an_unknown_url_is_one_clear_line(
    tmp_path: Path, captures: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = tmp_path / "dataset"
    export(captures[:1], str(dataset), capsys)
    (broken,) = sorted((dataset / "exchanges").rglob("*.parquet"))[:1]
    broken.write_bytes(broken.read_bytes()[:100])  # cut short: no footer
    assert main(["report", str(dataset), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"wirediff: error: {broken}: not a readable Parquet file (")
    assert "\n" not in err and "unexpected" not in err
    assert main(["report", "nosuchfs://bucket/s.jsonl", "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("wirediff: error: nosuchfs://bucket/s.jsonl: ")
    assert "\n" not in err and "unexpected" not in err
    assert main(["export", str(captures[0]), "--parquet", "nosuchfs://bucket/ds"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("wirediff: error: nosuchfs://bucket/ds: ")
    assert "\n" not in err and "unexpected" not in err


def test_a_dataset_at_a_url_whose_path_a_glob_would_read_is_read_whole(
    tmp_path: Path, captures: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"file://{tmp_path / 'runs[1]*?'}"
    export(captures, url, capsys)
    outs = []
    for inputs in ([url], [str(p) for p in captures]):
        assert main(["diagnose", *inputs, "--json"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and json.loads(outs[0])


def test_numbers_a_column_cannot_hold_exactly_are_read_from_the_records(
    tmp_path: Path, captures: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Start times in nanoseconds, integers past what a double holds exactly (another
    tool's records): the exchanges' columns hold them as null, the file is marked
    inexact, and the analysis reads those files' records instead, as it reads the
    captures."""
    lines = captures[0].read_text().splitlines()
    records = [json.loads(line) for line in lines]
    records[0]["started"] = 2**60 + 1
    records[1]["ttfb_ms"] = 2**53 + 1
    captures[0].write_text("".join(json.dumps(r) + "\n" for r in records))
    dataset = tmp_path / "dataset"
    export(captures, str(dataset), capsys)
    table = pq.read_table(dataset / "exchanges")
    inexact = [
        pq.read_schema(p).metadata[b"wirediff.exact"]
        for p in (dataset / "exchanges").rglob("*.parquet")
    ]
    assert b"0" in inexact
    assert 2**60 + 1 not in table.column("started").to_pylist()
    outs = []
    for inputs in ([str(dataset)], [str(p) for p in captures]):
        assert main(["diagnose", *inputs, "--json"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]


def test_a_session_or_label_named_as_the_null_directory_reads_back_as_itself(
    tmp_path: Path, captures: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = captures[0].read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for r in records:
        r["session"] = "__HIVE_DEFAULT_PARTITION__"
    captures[0].write_text("".join(json.dumps(r) + "\n" for r in records))
    dataset = tmp_path / "dataset"
    export(captures, str(dataset), capsys)
    assert (dataset / "exchanges" / "session=%5F_HIVE_DEFAULT_PARTITION__").is_dir()
    outs = []
    for inputs in ([str(dataset)], [str(p) for p in captures]):
        assert main(["report", *inputs, "-o", str(tmp_path / "r.html"), "--json", "-"]) == 0
        outs.append(masked(json.loads(capsys.readouterr().out)))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("long", ["x" * 300, "é" * 120, "a" * 182 + "é" * 40])
def test_keys_too_long_for_a_directory_name_are_cut_and_read_back_whole(
    tmp_path: Path, captures: list[Path], capsys: pytest.CaptureFixture[str], long: str
) -> None:
    """A label or session longer than a file system's names (255 bytes) is exported in a
    directory named by its start and its digest, and analysed as itself."""
    records = [json.loads(line) for line in captures[0].read_text().splitlines()]
    for n, r in enumerate(records):
        r["session"], r["label"] = long, f"{long}{n % 2}"
    captures[0].write_text("".join(json.dumps(r) + "\n" for r in records))
    dataset = tmp_path / "dataset"
    export(captures, str(dataset), capsys)
    names = {p.name for p in (dataset / "exchanges").rglob("*=*")}
    assert all(len(n.encode()) <= 255 for n in names), names
    assert len([n for n in names if "~" in n]) == 3  # the session and both labels
    outs = []
    for inputs in ([str(dataset)], [str(p) for p in captures]):
        assert main(["report", *inputs, "-o", str(tmp_path / "r.html"), "--json", "-"]) == 0
        outs.append(masked(json.loads(capsys.readouterr().out)))
    assert outs[0] == outs[1]
    assert long + "1" in json.dumps(outs[0], ensure_ascii=False)


def _flip(data: bytes, *offsets: int) -> bytes:
    out = bytearray(data)
    for at in offsets:
        out[at] ^= 0xFF
    return bytes(out)


def _rewrite(f: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    """Write `f` again, changed, as another tool might: its schema's marks kept."""
    table = pq.read_table(f, partitioning=None)
    pq.write_table(change(table).replace_schema_metadata(table.schema.metadata), f)


def _records(change: Callable[[list[Any]], list[Any]]) -> Callable[[Path, Path], None]:
    def rewrite(d: Path, f: Path) -> None:
        def changed(t: pa.Table) -> pa.Table:
            texts = change(t.column("record").to_pylist())
            return t.set_column(t.schema.get_field_index("record"), "record", pa.array(texts))

        _rewrite(f, changed)

    return rewrite


def _first(change: Callable[[dict[str, Any]], object]) -> Callable[[list[Any]], list[Any]]:
    def first(texts: list[Any]) -> list[Any]:
        rec = json.loads(texts[0])
        change(rec)
        return [json.dumps(rec), *texts[1:]]

    return first


Damage = tuple[Callable[[Path, Path], object], str]
DAMAGES: dict[str, Damage] = {
    "page data damaged": (
        lambda d, f: f.write_bytes(_flip(f.read_bytes(), 2700, 20000)),
        "not a readable Parquet file (",
    ),
    "a file lost": (
        lambda d, f: f.unlink(),
        "files of exchanges: {less} where its wirediff-dataset.json says {files}: the dataset "
        "lost a file",
    ),
    "the mark no JSON": (
        lambda d, f: (d / DATASET_MARK).write_text("{{bad"),
        "wirediff-dataset.json: not the mark wirediff export writes",
    ),
    "the mark's count changed": (
        lambda d, f: (d / DATASET_MARK).write_text(
            re.sub(r'"exchanges": \d+', '"exchanges": 1000', (d / DATASET_MARK).read_text())
        ),
        "{exchanges} exchanges where its wirediff-dataset.json says 1,000: a file of the "
        "dataset was changed",
    ),
    "no mark": (
        lambda d, f: (d / DATASET_MARK).unlink(),
        "a directory, neither a capture file nor a dataset (no wirediff-dataset.json",
    ),
    "a record malformed": (
        _records(_first(lambda r: r["response"].update(status=5000))),
        "row 0: malformed wirediff/1 record (response.status must be an HTTP status",
    ),
    "a record of another format": (
        _records(_first(lambda r: r.update(format="other/1"))),
        "row 0: not a wirediff/1 record",
    ),
    "a record null": (_records(lambda texts: [None, *texts[1:]]), "row 0: no record"),
    "a record no JSON": (
        _records(lambda texts: ["{bad", *texts[1:]]),
        "row 0: not a JSON record",
    ),
    "the record column dropped": (
        lambda d, f: _rewrite(f, lambda t: t.drop_columns(["record"])),
        "not a file of a wirediff dataset (no `record`)",
    ),
    "another table": (
        lambda d, f: _rewrite(f, lambda t: pa.table({"x": range(len(t))})),
        "not a file of a wirediff dataset (no `ordinal`, `record`)",
    ),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_dataset_is_one_line_that_says_how(
    tmp_path: Path, captures: list[Path], capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """Nothing recorded is lost silently: a dataset that does not hold what its mark says
    is no input, whichever file is hurt."""
    dataset = tmp_path / "dataset"
    export(captures, str(dataset), capsys)
    files = sorted((dataset / "exchanges").rglob("*.parquet"), key=lambda f: -f.stat().st_size)
    mark = json.loads((dataset / DATASET_MARK).read_text())
    assert mark["files"] == len(files) > 1 and 2 < mark["exchanges"] < 1000
    do, said = DAMAGES[damage]
    do(dataset, files[0])
    said = said.format(less=len(files) - 1, files=len(files), exchanges=mark["exchanges"])
    for command in (["report", "-o", str(tmp_path / "r.html")], ["diagnose"]):
        assert main([command[0], str(dataset), *command[1:]]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err, err


def _emptied(column: str) -> Callable[[pa.Table], pa.Table]:
    def empty(t: pa.Table) -> pa.Table:
        at = t.schema.get_field_index(column)
        return t.set_column(at, column, pa.nulls(len(t), t.schema.field(at).type))

    return empty


def test_index_columns_another_tool_emptied_are_read_from_the_records(
    tmp_path: Path, captures: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """An exact file's index columns are a shortcut: with nulls where export writes none,
    the records say the same."""
    datasets = [str(tmp_path / f"dataset{n}") for n in range(len(captures))]
    for capture, dataset in zip(captures, datasets, strict=True):
        export([capture], dataset, capsys)
    whole = outputs(datasets, tmp_path / "whole", capsys)
    for f in (tmp_path / "dataset0" / "exchanges").rglob("*.parquet"):
        _rewrite(f, _emptied("id_digest"))
    assert outputs(datasets, tmp_path / "emptied", capsys) == whole


def test_a_datasets_rows_go_back_to_their_order(
    tmp_path: Path, captures: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A dataset is written by root, its rows' places kept (`ordinal`): the index puts
    each row back at its place, in the order the captures give."""
    from wirediff.engine.run import Run

    dataset = tmp_path / "dataset"
    export(captures, str(dataset), capsys)
    written = pq.read_table(dataset / "exchanges").column("ordinal").to_pylist()
    assert written != sorted(written), "the dataset holds its rows out of their order"

    def ids(inputs: list[str]) -> list[str]:
        with Run("local", progress=False, workers=1) as run:
            index, _ = run.scan(inputs)
        return [str(i) for i in index.rows["id"]]

    assert ids([str(dataset)]) == ids([str(p) for p in captures])


def test_a_capture_another_tool_wrote_is_exported_without_its_raw_credentials(
    tmp_path: Path, captures: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Secret headers whose values are no fingerprints leave as the capture records them."""
    secrets = {
        "cookie": "sid=s3cr3tcookievalue123456",
        "x-api-key": "plainkeyvalue987654321",
        "api-key": "azurekey0123456789abcdef",
        "authorization": "Bearer plain-bearer-0123456789",
    }
    records = [json.loads(line) for line in captures[0].read_text().splitlines()]
    records[0]["request"]["headers"] += [[k, v] for k, v in secrets.items()]
    records[0]["request"]["body"]["stop"] = ["token", "END"]  # shaped like a pair, no header
    records[1]["response"]["headers"].append(["set-cookie", "session=abcdef1234567890; Path=/"])
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps(r) + "\n" for r in records))
    export([other], str(tmp_path / "ds"), capsys)
    tables = [pq.read_table(p).to_pylist() for p in (tmp_path / "ds").rglob("*.parquet")]
    text = json.dumps(tables, default=str)
    for value in [*secrets.values(), "abcdef1234567890"]:
        assert value.split()[-1] not in text
    [kept] = [
        json.loads(t)
        for t in pq.read_table(tmp_path / "ds" / "exchanges").column("record").to_pylist()
        if json.loads(t)["id"] == records[0]["id"]
    ]
    sent = dict(kept["request"]["headers"])
    assert sent["cookie"] == fingerprint(secrets["cookie"])
    assert sent["authorization"] == f"Bearer {fingerprint('plain-bearer-0123456789')}"
    assert sent["content-type"] == dict(records[0]["request"]["headers"])["content-type"]
    assert kept["request"]["body"] == records[0]["request"]["body"]
