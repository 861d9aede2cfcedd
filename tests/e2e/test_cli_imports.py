"""The command line is built without the analysis: `wirediff addon-path` inside `$(…)`,
`capture`, `replay`, `stand-in` and the help wait for no import of pandas, the openai SDK or
the report, which building the parser shows; the commands that analyse import them when they
run."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pandas", "openai", "wirediff.analysis.index.analyze", "wirediff.reports.model")


def imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def test_building_the_command_line_imports_nothing_heavy() -> None:
    loaded = imported_after("from wirediff.cli import build_parser; build_parser()")
    assert not loaded & set(HEAVY)


def test_a_command_that_analyses_imports_it_when_it_runs() -> None:
    loaded = imported_after(
        "from wirediff.cli import main\nassert main(['report', '/nonexistent/x.jsonl']) == 2"
    )
    assert "wirediff.reports.render" in loaded
