"""Reports of hostile size: thousands of findings, repeated or distinct, beside a 1 MiB
body, keep the HTML file small."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import records as fx
from tests.unit.test_report import analysed, no_request_id, parse, render
from wirediff._types import Record
from wirediff.analysis.comparison.kinds import SEVERITIES
from wirediff.analysis.index.analyze import Analysis, Diagnosed
from wirediff.reports import examples
from wirediff.reports.examples import MAX_LAID_OUT
from wirediff.reports.findings import MAX_FINDINGS


def _synthetic(n: int) -> tuple[Analysis, Diagnosed]:
    """n exchanges: the sample session's shapes repeated, replayed to three candidates:
    ollama and lmstudio send no request id, ollama's chat streams no usage chunk."""
    base = fx.openai_session()
    answers: dict[tuple[str, str], Any] = {}
    for b in base:
        for label in ("ollama", "vllm", "lmstudio"):
            c = fx.replay(b, label=label, change=None if label == "vllm" else no_request_id)
            if label == "ollama" and b["tags"]["stream"]:
                fx.drop_events(c, lambda d: not (isinstance(d, dict) and d.get("usage")))
            answers[(b["id"], label)] = c["response"]
    records: list[Record] = []
    for i in range(n // 4):
        b = {**base[i % len(base)], "id": f"b{i}", "seq": i}
        records.append(b)
        for label in ("ollama", "vllm", "lmstudio"):
            records.append(
                {
                    **b,
                    "id": f"{label}{i}",
                    "label": label,
                    "replay_of": b["id"],
                    "ttfb_ms": 50.0 + i % 97,
                    "response": answers[(base[i % len(base)]["id"], label)],
                }
            )
    return analysed(records)


def test_scale_stays_small(tmp_path: Path) -> None:
    """Size does not grow with repeats (render time is measured in bench/analysis_scale.py)."""
    analysis, diagnoses = _synthetic(8000)
    assert len(analysis.divergences) > 3000
    size = render(analysis, diagnoses, tmp_path / "r.html").stat().st_size
    assert size < 1_500_000, size


def test_size_is_bounded_however_many_distinct_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thousands of distinct findings beside a 1 MiB body: the budget keeps the file small.

    Each original asks its own question and gets the same 1 MiB answer (2000 choices), laid
    out once; its one replay answers with one choice and a key of its own, one distinct
    finding each. Extra keys are cosmetic: laid out here all the same, as the worst case."""
    monkeypatch.setattr(examples, "LAID_OUT", frozenset(SEVERITIES))
    chat = fx.chat_record(id="o")
    choice = fx.body(chat)["choices"][0]
    big = {
        **fx.body(chat),
        "choices": [
            {**choice, "index": i, "message": {**choice["message"], "content": "x" * 500}}
            for i in range(2000)
        ],
    }
    records: list[Record] = []
    for i in range(MAX_FINDINGS + 500):
        original = copy.deepcopy(chat)
        original.update({"id": f"o{i}", "seq": i})
        original["request"]["body"]["messages"][-1]["content"] = f"question {i}"

        def extra_key(rec: Record, i: int = i) -> None:
            fx.body(rec)["choices"][0]["message"][f"extra{i}"] = "x"

        records += [original, fx.replay(original, id=f"w{i}", label="vllm", change=extra_key)]
        fx.answer(original)["body"] = big
    analysis, diagnoses = analysed(records)
    assert set(analysis.divergences["kind"]) == {"schema_extra"}
    html = render(analysis, diagnoses, tmp_path / "r.html").read_text()
    assert len(html.encode()) < 5_000_000
    page = parse(html)
    findings = [a for t, a in page.tags if t == "details" and "finding" in (a.get("class") or "")]
    assert len(findings) == MAX_FINDINGS
    assert html.count('class="example"') == MAX_LAID_OUT
    assert html.count("<pre>") == MAX_LAID_OUT + 1  # the originals' one answer, once
    assert html.count('<p class="same">') == MAX_LAID_OUT - 1
    assert "500 more occurrences at 500 more paths not listed here" in html
    ids = {a.get("id") for _, a in page.tags}
    assert all((a.get("href") or "#")[1:] in ids for t, a in page.tags if t == "a")
