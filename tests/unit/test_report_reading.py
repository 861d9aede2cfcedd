"""What the report shows a new user at a glance: the clients behind each capture, each
distinct failing chain once, skipped replay steps with their reason (never drawn as missing
events), hops named by label, and example bodies laid out once within a size budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import records as fx
from tests.fixtures.records import answer
from tests.unit.test_report import analysed, parse, sample_records, schema, validate
from wirediff._types import Record
from wirediff.reports import examples
from wirediff.reports.model import ReportModel, build
from wirediff.reports.render import render_html, summary_from

X = "\N{MULTIPLICATION SIGN}"
CODEX_UA = "codex_exec/0.171.0 (Debian 12; x86_64) dumb (codex-exec; 0.171.0)"


def built(records: list[Record]) -> ReportModel:
    return build(*analysed(records))


def rendered(model: ReportModel, tmp_path: Path) -> str:
    return render_html(model, tmp_path / "report.html").read_text(encoding="utf-8")


def text_of(html: str) -> str:
    return " ".join(" ".join(parse(html).text).split())


def with_client(rec: Record, headers: list[tuple[str, str]]) -> Record:
    """`rec` as sent by another client: its SDK headers replaced, tags recomputed."""
    kept = [
        h
        for h in rec["request"]["headers"]
        if not h[0].lower().startswith(("user-agent", "x-stainless"))
    ]
    rec["request"]["headers"] = [*kept, *map(list, headers)]
    fx.retag(rec)
    return rec


def test_each_capture_names_its_clients(tmp_path: Path) -> None:
    python = fx.chat_record(id="py", seq=0)
    codex = with_client(
        fx.responses_record(id="codex", seq=1, stream=True), [("User-Agent", CODEX_UA)]
    )
    js = with_client(
        fx.chat_record(id="js", seq=2),
        [
            ("User-Agent", "OpenAI/JS 5.23.0"),
            ("X-Stainless-Lang", "js"),
            ("X-Stainless-Package-Version", "5.23.0"),
            ("X-Stainless-Runtime", "node"),
            ("X-Stainless-Runtime-Version", "v20.19.2"),
        ],
    )
    records = [python, codex, js, fx.replay(python, id="r-py", label="vllm")]
    model = built(records)
    summary = json.loads(json.dumps(summary_from(model)))
    validate(summary, schema(), schema())
    captures = {b["label"]: b["captures"] for b in summary["backends"]}
    [openai] = captures["openai"]
    assert (openai["session"], openai["replayed"], openai["exchanges"]) == ("s1", False, 3)
    by_ua = {c["user_agent"]: c for c in openai["clients"]}
    assert by_ua["OpenAI/Python 2.54.0"] == {
        **by_ua["OpenAI/Python 2.54.0"],
        "lang": "python",
        "version": "2.54.0",
        "runtime": "CPython",
        "async": False,
        "client": None,
        "exchanges": 1,
    }
    assert (by_ua[CODEX_UA]["client"], by_ua[CODEX_UA]["client_version"]) == (
        "codex_exec",
        "0.171.0",
    )
    assert (by_ua["OpenAI/JS 5.23.0"]["lang"], by_ua["OpenAI/JS 5.23.0"]["async"]) == ("js", True)
    [replayed] = captures["vllm"]
    assert replayed["replayed"] is True
    assert [c["user_agent"] for c in replayed["clients"]] == ["OpenAI/Python 2.54.0"]

    text = text_of(rendered(model, tmp_path))
    assert f"OpenAI SDK python 2.54.0 · CPython 3.11.9 · sync {X}1" in text
    assert f"OpenAI SDK js 5.23.0 · node v20.19.2 · async {X}1" in text
    assert f"codex_exec 0.171.0 {X}1 {CODEX_UA}" in text
    assert "clients replayed by wirediff, the client's headers resent · session s1.vllm" in text


def soft_error(rec: Record) -> None:
    """LM Studio's answer to an endpoint it does not have: 200 with an error body."""
    answer(rec)["body"] = {"error": "Unexpected endpoint or method. (POST /v1/responses)"}


def test_identical_failing_chains_are_drawn_once(tmp_path: Path) -> None:
    """Three chains with the same two diagnoses: one drawing, both diagnoses, three named."""
    records: list[Record] = []
    for i in range(3):
        original = fx.responses_record(id=f"o{i}", seq=i)
        records += [original, fx.replay(original, id=f"lm{i}", label="lmstudio", change=soft_error)]
    model = built(records)
    assert len(model.diagnoses) == 6  # two diagnoses per chain
    [group] = model.chains
    assert group.codes == ["endpoint_not_implemented", "soft_error_200"]
    assert (group.count, len(group.chains)) == (3, 3)

    html = rendered(model, tmp_path)
    page = parse(html)
    chains = [a for t, a in page.tags if t == "details" and "chain" in (a.get("class") or "")]
    assert len(chains) == 1 and html.count('class="hops"') == 1
    assert f"{X}3, show all" in text_of(html)
    assert all(c.chain_id in html for c in group.chains)


def skipped(message: str) -> Any:
    def change(rec: Record) -> None:
        rec.update({"response": None, "error": {"kind": "skipped", "message": message}})

    return change


def test_skipped_steps_are_listed_with_their_reason_not_drawn(tmp_path: Path) -> None:
    """A replayed stream sent and two never sent (what they build on failed): the two are
    listed once, with their reason, and no timeline shows their events as missing."""
    records: list[Record] = []
    for i in range(3):
        original = fx.responses_record(id=f"o{i}", seq=i, stream=True)
        change = (
            None
            if i == 0
            else skipped(
                f"previous_response_id resp_{i:032x} comes from {i:08x}-0000-4000-8000-00000000000{i}, "
                "but the target answered it with HTTP 404"
            )
        )
        records += [original, fx.replay(original, id=f"lm{i}", label="lmstudio", change=change)]
    model = built(records)
    assert [t.pair_ids for t in model.timelines] == [["lm0"]]
    [group] = model.skipped
    assert (group.label, group.count, group.streamed, group.ids) == (
        "lmstudio",
        2,
        2,
        ["lm1", "lm2"],
    )
    # the reason without the ids that tell its repeats apart
    assert group.reason.startswith("previous_response_id resp_… comes from …")

    html = rendered(model, tmp_path)
    assert 'class="mk-missing"' not in html
    text = text_of(html)
    assert "Skipped replay steps 2 steps never sent" in text
    assert f"lmstudio /v1/responses {X}2 (2 streamed) — previous_response_id" in text
    assert "2 streamed replay steps skipped, never sent, so not drawn" in text
    assert 'href="#skipped"' in html  # from the backend's status mix


def test_hops_are_named_by_label_not_by_the_proxys_port(tmp_path: Path) -> None:
    records = sample_records()
    inner = next(r for r in records if r["id"] == "hop-inner")
    inner["label"] = "upstream-api"
    model = built(records)
    [group] = [g for g in model.chains if "auth_dropped_by_hop" in g.codes]
    assert [(h.source, h.target, h.host, h.via) for h in group.hops] == [
        ("client", "gateway", "127.0.0.1:4100", "captured, reverse proxy"),
        ("gateway", "upstream-api", "127.0.0.1:4200", "captured, reverse proxy"),
    ]
    html = rendered(model, tmp_path)
    chain = html[html.index(f'id="{group.anchor}"') :]
    drawn = chain[chain.index('<div class="hops">') : chain.index('<ul class="evidence">')]
    assert "upstream-api" in drawn and "127.0.0.1:4200" in drawn
    assert "@4001" not in text_of(drawn) and "reverse:http" not in text_of(drawn)
    titles = [a.get("title") for t, a in parse(html).tags if t == "span" and a.get("title")]
    assert "reverse:http://127.0.0.1:4100@4001" in titles  # the listener itself: a tooltip


def no_logprobs(rec: Record) -> None:
    del fx.body(rec)["choices"][0]["logprobs"]


def test_an_example_view_is_laid_out_once(tmp_path: Path) -> None:
    """Two candidates lose the same required field: the baseline's answer with that line
    highlighted, and the candidates' identical answers, are each laid out once."""
    original = fx.chat_record(id="o")
    records = [original]
    records += [
        fx.replay(original, id=f"{c}1", label=c, change=no_logprobs) for c in ("vllm", "ollama")
    ]
    model = built(records)
    first, second = [f for f in model.findings if f.kind == "schema_missing"]
    assert first.severity == second.severity == "deviation"
    assert [v.markup is not None for v in first.views] == [True, True]
    assert [v.markup is None for v in second.views] == [True, True]
    assert [v.anchor for v in second.views] == [v.anchor for v in first.views]

    html = rendered(model, tmp_path)
    page = parse(html)
    ids = {a.get("id") for _, a in page.tags}
    same = [href for t, a in page.tags if t == "a" and "#v-" in (href := a.get("href") or "")]
    assert len(same) >= 2 and all(href[1:] in ids for href in same)
    # every finding of one field appears once per candidate, its lines in as many <pre>s as
    # there are distinct views
    assert html.count("<pre>") == len(
        {str(v.markup) for f in model.findings for v in f.views if v.markup}
    )


def test_views_stop_at_the_byte_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(examples, "MAX_VIEW_BYTES", 1)
    model = built(sample_records())
    laid_out = [f for f in model.findings if f.views]
    assert len(laid_out) == 1
    html = rendered(model, tmp_path)
    assert "(not laid out: the report's size budget)" in html
