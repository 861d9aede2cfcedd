"""One list of divergence kinds and one of severities: the registry
(`wirediff.analysis.comparison.kinds`).

The comparison produces exactly the registered kinds; `wirediff check`, the report,
`summary.schema.json` and docs/cli.md's table take theirs from it or agree with it.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import wirediff.analysis.comparison as comparison
from tests.fixtures import records as fx
from tests.fixtures.analysed import conformance
from tests.fixtures.records import answer
from wirediff._types import Record
from wirediff.analysis.comparison.kinds import KINDS, SEVERITIES, kind_names
from wirediff.analysis.comparison.verdicts import VERDICTS
from wirediff.analysis.index.analyze import analyze, diagnose_index
from wirediff.cli import build_parser
from wirediff.cli.check import parse_kinds
from wirediff.errors import UsageError
from wirediff.reports.model import build
from wirediff.reports.render import SCHEMA_PATH, summary_from

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def finding_kinds() -> dict[str, list[str]]:
    """Every kind a `Finding(...)` in the comparison package names, with where it does."""
    found: dict[str, list[str]] = {}
    for path in sorted(Path(comparison.__path__[0]).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding"):
                continue
            where = f"{path.name}:{node.lineno}"
            kind = node.args[0] if node.args else None
            kind = next((k.value for k in node.keywords if k.arg == "kind"), kind)
            assert isinstance(kind, ast.Constant) and isinstance(kind.value, str), (
                f"{where}: a finding's kind is a literal, so that this test sees it"
            )
            found.setdefault(kind.value, []).append(where)
    return found


def test_the_comparison_code_produces_exactly_the_registered_kinds() -> None:
    """Every kind but `client` comes from a `Finding`; `client` rows come from the SDK
    impact harness, on one answer (conformance) and between a pair (divergences)."""
    found = finding_kinds()
    assert set(found) == set(kind_names(compared_only=True)) - {"client"}, found
    rec = fx.chat_record(tool=True)
    fx.body(rec)["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"a": 1}
    rows = conformance([rec])
    assert set(rows["kind"]) == {"conformance", "client"}
    base = fx.chat_record(id="o1")
    usage_gone = fx.replay(base, id="r1", change=lambda r: fx.body(r).pop("usage"))
    divergences = analyze([base, usage_gone]).divergences
    assert {"client", "schema_missing"} <= set(divergences["kind"])


def test_check_takes_its_choices_from_the_registries(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert parse_kinds(",".join(KINDS)) == kind_names()
    with pytest.raises(UsageError, match="unknown kind vibes"):
        parse_kinds("status,vibes")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["check", "--help"])
    squeezed = "".join(capsys.readouterr().out.split())
    assert "known:" + ",".join(kind_names()) in squeezed
    assert "{" + ",".join(SEVERITIES) + "}" in squeezed


def test_summary_schema_enums_are_the_registries() -> None:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["$defs"]["kind"]["enum"] == list(kind_names())
    assert schema["$defs"]["severity"]["enum"] == list(SEVERITIES)
    assert schema["$defs"]["verdict"]["enum"] == list(VERDICTS)


def test_the_documented_table_names_the_registered_kinds() -> None:
    text = CLI_DOC.read_text(encoding="utf-8")
    table = text.split("| divergence kind | found when |", 1)[1].split("\n\n", 1)[0]
    named = [k for row in table.splitlines()[2:] for k in re.findall(r"`(\w+)`", row.split("|")[1])]
    assert named == list(kind_names())


def test_the_report_orders_and_lists_kinds_as_the_registry_does() -> None:
    base = fx.chat_record(id="o1")

    def server_error(rec: Record) -> None:
        answer(rec)["status"] = 500

    def no_request_id(rec: Record) -> None:
        fx.set_header(rec, "x-request-id", None)

    records = [
        base,
        fx.replay(base, id="r1", label="vllm", change=no_request_id),
        fx.replay(base, id="r2", label="ollama", change=server_error),
    ]
    analysis = analyze(records)
    model = build(analysis, diagnose_index(analysis.index))
    assert {"status", "header"} <= set(model.filter_kinds)
    assert model.filter_kinds == [k for k in kind_names() if k in model.filter_kinds]
    contract = summary_from(model)["contract"]
    assert contract["kinds"] == list(kind_names())
    assert contract["severities"] == list(SEVERITIES)
    assert contract["verdicts"] == list(VERDICTS)
