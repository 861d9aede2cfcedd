"""The report: one offline HTML file, summary.json (schema-checked) and divergences.csv.

Built from realistic records (tests/fixtures/records.py: OpenAI's bodies, events and
headers) replayed to two candidates with one change each, and the analysis and diagnoses
the product makes of them (`analyze`, `diagnose`).
"""

from __future__ import annotations

import copy
import csv
import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from tests.fixtures import records as fx
from tests.fixtures.records import answer
from wirediff._types import Record
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.diagnosis.explain import CODES
from wirediff.analysis.index.analyze import Analysis, Diagnosed, analyze, diagnose_index
from wirediff.cli import report as report_cli
from wirediff.engine.run import Run
from wirediff.errors import UsageError
from wirediff.record.redact import fingerprint, redact_headers, redact_url
from wirediff.record.store import RecordWriter
from wirediff.reports.formatters import CONTEXT, MAX_LINES, hits, nice_ticks, pretty_json, redact
from wirediff.reports.model import VERDICTS, ReportModel, build
from wirediff.reports.render import (
    SCHEMA_PATH,
    render_html,
    summary_from,
    write_csv,
    write_findings,
    write_json,
)

CANARY = "sk-canary-Zq8VwX3pLr7TnY2b"
INJECT = "<script>alert(1)</script></textarea>\"'><img src=x onerror=alert(2)>"
GATEWAY = "reverse:http://127.0.0.1:4100@4001"
UPSTREAM = "reverse:http://127.0.0.1:4200@4002"


def analysed(records: list[Record]) -> tuple[Analysis, Diagnosed]:
    """The analysis and the diagnoses of `records`, as `wirediff report` makes them."""
    analysis = analyze(records)
    return analysis, diagnose_index(analysis.index)


def render(analysis: Analysis, diagnoses: Diagnosed, out: Path, *, max_examples: int = 3) -> Path:
    return render_html(build(analysis, diagnoses, max_examples=max_examples), out)


def summary_json(analysis: Analysis, diagnoses: Diagnosed) -> dict[str, Any]:
    """`summary.json` as written and read back."""
    return dict(json.loads(json.dumps(summary_from(build(analysis, diagnoses)))))


def findings_lines(model: ReportModel, out: Path) -> list[dict[str, Any]]:
    """The lines of `--findings`, written and read back."""
    with write_findings(model, out).open(encoding="utf-8") as fh:
        return [json.loads(text) for text in fh]


def no_request_id(rec: Record) -> None:
    fx.set_header(rec, "x-request-id", None)


def _evil_chat(rec: Record) -> None:
    """Model output and a header with markup, and no request id (a header finding, which
    shows the headers)."""
    fx.body(rec)["choices"][0]["message"]["content"] = INJECT
    fx.set_header(rec, "x-evil", INJECT)
    no_request_id(rec)


def sample_records() -> list[Record]:
    """openai (baseline) replayed to ollama and lmstudio, plus a two-hop 401 chain."""
    base = fx.openai_session()
    by_path = {
        (
            r["request"]["path"],
            r["tags"]["stream"],
            bool(r["request"]["body"] and r["request"]["body"].get("tools")),
        ): r
        for r in base
    }
    chat = by_path[("/v1/chat/completions", False, False)]
    chat_stream = by_path[("/v1/chat/completions", True, False)]
    resp_stream = by_path[("/v1/responses", True, False)]
    resp = by_path[("/v1/responses", False, False)]
    tool = by_path[("/v1/chat/completions", False, True)]
    out = list(base)
    # ollama: model output with markup and no request id, a stream without its usage chunk, a
    # missing done event, tool arguments as an object
    out.append(fx.replay(chat, id="ol-chat", label="ollama", change=_evil_chat))
    out.append(
        fx.replay(
            chat_stream,
            id="ol-chat-s",
            label="ollama",
            change=lambda r: fx.drop_events(
                r, lambda d: not (isinstance(d, dict) and d.get("usage"))
            ),
        )
    )
    out.append(
        fx.replay(
            resp_stream,
            id="ol-resp-s",
            label="ollama",
            change=lambda r: fx.drop_events(
                r, lambda d: fx.event_type(d) != "response.output_text.done"
            ),
        )
    )
    out.append(fx.replay(resp, id="ol-resp", label="ollama"))

    def args_object(r: Record) -> None:
        fx.body(r)["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {
            "city": "Paris"
        }

    out.append(fx.replay(tool, id="ol-tool", label="ollama", change=args_object))

    # lmstudio: a soft error on /v1/responses that echoes markup and the key (a breaking
    # finding: laid out), the chat answer fine
    def soft(r: Record) -> None:
        answer(r)["body"] = {
            "error": f"Unexpected endpoint or method. (POST /v1/responses) {INJECT} Incorrect API key provided: {CANARY}"
        }

    out.append(fx.replay(resp, id="lm-resp", label="lmstudio", change=soft))

    def skipped(r: Record) -> None:  # a continuation the replayer could not send
        r.update({"response": None, "error": {"kind": "skipped", "message": "nothing to continue"}})

    out.append(fx.replay(resp, id="lm-skip", label="lmstudio", change=skipped))
    out.append(fx.replay(chat, id="lm-chat", label="lmstudio"))
    # a two-hop chain: the gateway drops the key, the upstream answers 401
    outer = fx.error_record(
        id="hop-outer",
        status=401,
        label="gateway",
        seq=90,
        session="hops",
        body=fx.openai_error("You didn't provide an API key.", "invalid_request_error"),
    )
    outer["listener"] = GATEWAY
    outer["request"]["url"] = redact_url(f"http://127.0.0.1:4001/v1/chat/completions?key={CANARY}")
    inner = copy.deepcopy(outer)
    inner.update({"id": "hop-inner", "listener": UPSTREAM, "started": outer["started"] + 0.01})
    inner["request"]["headers"] = [
        h for h in inner["request"]["headers"] if h[0] != "authorization"
    ]
    inner["tags"]["auth"] = None
    outer["request"]["headers"] = redact_headers(
        [("authorization", f"Bearer {CANARY}"), ("x-api-key", CANARY)]
    )
    outer["tags"]["auth"] = {
        "header": "authorization",
        "scheme": "Bearer",
        "fingerprint": fingerprint(CANARY),
        "forwarded": False,
    }
    out += [outer, inner]
    return out


def sample() -> tuple[Analysis, Diagnosed]:
    return analysed(sample_records())


# --- summary.schema.json, checked by a real JSON Schema validator ----------------------


def validate(value: Any, schema: dict[str, Any], root: dict[str, Any]) -> None:
    """`value` against the schema (Draft 2020-12); every error in the assertion."""
    jsonschema.Draft202012Validator.check_schema(root)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=str)
    assert not errors, "; ".join(f"{e.json_path}: {e.message}" for e in errors[:5])


def schema() -> dict[str, Any]:
    return dict(json.loads(SCHEMA_PATH.read_text()))


# --- the HTML as a browser would parse it -----------------------------------------------


class Page(HTMLParser):
    """Tags, attributes and text of a document, to assert on what a browser would build."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        (self.scripts if self._in_script else self.text).append(data)


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


@pytest.fixture
def report(tmp_path: Path) -> tuple[Path, str]:
    analysis, diagnoses = sample()
    out = render(analysis, diagnoses, tmp_path / "report.html", max_examples=2)
    return out, out.read_text(encoding="utf-8")


# --- tests ------------------------------------------------------------------------------


def test_report_is_one_file_with_no_network_reference(report: tuple[Path, str]) -> None:
    path, html = report
    page = parse(html)
    assert [t for t, _ in page.tags].count("script") == 1
    for tag, attrs in page.tags:
        for name in ("src", "href", "action", "srcset", "data", "poster"):
            value = attrs.get(name) or ""
            assert not value or value.startswith("#"), f"<{tag} {name}={value!r}> leaves the file"
        assert tag not in ("link", "iframe", "object", "embed", "img", "base")
    assert not re.search(r"(?i)(https?:)?//[\w.-]+\.[a-z]{2,}/", "".join(page.scripts))
    assert "@import" not in html and "url(" not in html
    csp = next(
        a["content"]
        for t, a in page.tags
        if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    )
    assert csp is not None and "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert path.stat().st_size < 2_000_000


def test_report_shows_every_section(report: tuple[Path, str]) -> None:
    _, html = report
    page = parse(html)
    ids = {a.get("id") for _, a in page.tags}
    assert {
        "verdicts",
        "summary",
        "matrix",
        "divergences",
        "timelines",
        "chains",
        "latency",
        "filters",
    } <= ids
    text = " ".join(page.text)
    for label in ("openai", "ollama", "lmstudio", "gateway"):
        assert label in text
    # the matrix: every cell links to an evidence block that exists
    links = [a.get("href") or "" for t, a in page.tags if t == "a"]
    assert links and all(href.startswith("#") and href[1:] in ids for href in links)
    cells = [a for t, a in page.tags if t == "td" and a.get("data-backend")]
    assert {c["class"] for c in cells} == {
        "v-compatible",
        "v-compatible-with-deviations",  # ollama's Responses stream without output_text.done
        "v-breaking",
        "v-unsupported",
        "v-untested",
    }
    # the report opens with the drop-in verdicts, each with its reasons
    assert html.index('id="verdicts"') < html.index('id="summary"')
    assert "tool-call arguments are not a string (dict)" in text
    # hops drawn from the listeners: client → gateway upstream → the inner upstream
    assert "127.0.0.1:4100" in text and "127.0.0.1:4200" in text and "auth_dropped_by_hop" in text
    # the missing event is marked in its stream timeline, the differing path highlighted
    assert 'class="mk-missing"' in html and "response.output_text.done" in text
    assert re.search(r"<span class=\"hl\">\s*&#34;arguments&#34;: \{", html)
    # latency as inline SVG
    assert html.count("<svg") >= 3 and 'class="box"' in html


def test_a_client_without_a_user_agent_is_listed(tmp_path: Path) -> None:
    records = fx.openai_session()
    anonymous = fx.chat_record(id="anon", seq=99)
    anonymous["tags"]["sdk"] = None  # what the tagger says of no User-Agent, no X-Stainless-*
    analysis, diagnoses = analysed([*records, anonymous])
    html = render(analysis, diagnoses, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "no user agent" in html and "OpenAI SDK python 2.54.0" in html


def test_injection_is_shown_as_text(report: tuple[Path, str]) -> None:
    _, html = report
    page = parse(html)
    assert [t for t, _ in page.tags].count("script") == 1  # only the report's own
    assert not any(t in ("img", "textarea") for t, _ in page.tags)
    assert not any(k.startswith("on") for _, a in page.tags for k in a)
    text = "".join(page.text)
    assert "<script>alert(1)</script>" in text  # model output: visible, as text
    assert "</textarea>" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert" not in html


def test_control_characters_are_shown_as_escapes(tmp_path: Path) -> None:
    """A server's words with ANSI codes, a NUL, a bell or a right-to-left override show as
    `\\x1b`-style escapes in the report: nothing hides, and the page holds no control
    character but line breaks and tabs."""
    said = "\x1b[2J\x1b[31mno such model\x00\x07 \u2028done\u202eldom"
    base = fx.chat_record(id="o1")

    def refused(rec: Record) -> None:
        rec["response"] = fx.error_record(status=404, body={"error": {"message": said}})["response"]

    cand = fx.replay(base, label="other", change=refused)
    html = render(*analysed([base, cand]), tmp_path / "r.html").read_text(encoding="utf-8")
    assert "\\x1b[31mno such model\\x00\\x07" in html and "done\\u202eldom" in html
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202e]", html)


def test_canary_key_never_written(tmp_path: Path) -> None:
    analysis, diagnoses = sample()
    raw = json.dumps(list(analysis.index.read(range(len(analysis.index)))))
    assert CANARY in raw  # the sample does carry it (an error body echoing the key)
    model = build(analysis, diagnoses, max_examples=5)
    html = render_html(model, tmp_path / "report.html").read_text()
    summary = json.dumps(summary_from(model))
    csv_text = write_csv(model, tmp_path / "divergences.csv").read_text()
    lines = write_findings(model, tmp_path / "findings.jsonl").read_text()
    for name, text in (
        ("report.html", html),
        ("summary.json", summary),
        ("findings.jsonl", lines),
        ("divergences.csv", csv_text),
    ):
        assert CANARY not in text, name
        assert CANARY[3:] not in text, name
    assert fingerprint(CANARY) in html  # the fingerprint is the evidence


def line_schema() -> dict[str, Any]:
    """The schema of one line of `--findings`."""
    whole = schema()
    return {"$schema": whole["$schema"], "$defs": whole["$defs"], "$ref": "#/$defs/findings_line"}


def test_summary_json_and_findings_lines_match_the_schema(tmp_path: Path) -> None:
    analysis, diagnoses = sample()
    summary = summary_json(analysis, diagnoses)
    validate(summary, schema(), schema())
    lines = findings_lines(build(analysis, diagnoses), tmp_path / "findings.jsonl")
    for item in lines:
        validate(item, line_schema(), schema())
    found = [item for item in lines if "kind" in item]
    diagnosed = [item for item in lines if "code" in item]
    assert lines == found + diagnosed, "every finding, then every diagnosis"
    assert len(found) == len(analysis.divergences) + len(analysis.conformance)
    assert len(found) == 16 and len(diagnosed) == 3
    assert {d["code"] for d in diagnosed} >= {
        "endpoint_not_implemented",
        "auth_dropped_by_hop",
    }
    by_label = {b["label"]: b for b in summary["backends"]}
    assert by_label["openai"]["role"] == "baseline"
    assert by_label["openai"]["verdicts"] == {
        "chat.completions": "compatible",
        "responses": "compatible",
        "models": "compatible",
    }
    assert by_label["lmstudio"]["verdicts"]["responses"] == "unsupported"
    assert by_label["lmstudio"]["status_mix"] == {"200": 1, "200 error body": 1, "skipped": 1}
    assert by_label["ollama"]["verdicts"] == {
        "chat.completions": "breaking",
        "responses": "compatible with deviations",  # no output_text.done
    }
    assert by_label["gateway"]["verdicts"]["chat.completions"] == "breaking"
    verdicts = [(v["label"], v["family"], v["verdict"]) for v in summary["verdicts"]]
    assert verdicts[:3] == [
        ("openai", "chat.completions", "compatible"),
        ("openai", "responses", "compatible"),
        ("openai", "models", "compatible"),
    ]
    [ollama_chat] = [
        v
        for v in summary["verdicts"]
        if v["label"] == "ollama" and v["family"] == "chat.completions"
    ]
    # one reason per problem, however many references found it: the lost usage chunk
    # (the baseline diff, the grammar, the SDK) and the tool-call arguments (the baseline
    # diff, the OpenAPI document, the SDK types, the SDK)
    assert sorted(r.split(":")[0] for r in ollama_chat["reasons"][:2]) == [
        "`client.chat.completions.create()`",
        "`client.chat.completions.create(stream=True)`",
    ]
    assert (ollama_chat["breaking"], ollama_chat["cosmetic"], ollama_chat["exchanges"]) == (2, 1, 3)
    assert summary["bottom_line"] == [
        "lmstudio cannot replace openai: responses is not implemented (200 with an error body); "
        "it can for chat.completions.",
        "ollama cannot replace openai: chat.completions breaks: "
        "`client.chat.completions.create(stream=True)`: no usage, though "
        "`stream_options.include_usage` asked for it; it can for responses, with 1 deviation "
        "no client notices.",
    ]
    [arguments] = [
        f for f in summary["findings"] if f["path"].endswith("tool_calls[].function.arguments")
    ]
    assert arguments["sources"][:2] == ["baseline", "openai-openapi 2.3.0"]
    assert arguments["sources"][2:] == [f"openai-python {openai.__version__}"]
    assert by_label["ollama"]["divergences_by_kind"]["event_missing"] == 2
    cell = next(
        c
        for c in summary["matrix"]
        if c["label"] == "lmstudio" and c["endpoint"] == "/v1/responses"
    )
    assert cell == {
        **cell,
        "verdict": "unsupported",
        "exchanges": 1,
        "outcomes": {"unsupported": 1, "skipped": 1},
    }


def test_schema_enums_are_the_contract() -> None:
    """(The kinds: tests/unit/test_kinds.py.)"""
    defs = schema()["$defs"]
    assert defs["code"]["enum"] == list(CODES)
    assert defs["verdict"]["enum"] == list(VERDICTS[:-1])


def test_schema_rejects_an_unknown_kind(tmp_path: Path) -> None:
    item = findings_lines(build(*sample()), tmp_path / "findings.jsonl")[0]
    item["kind"] = "vibes"
    with pytest.raises(AssertionError, match="is not valid under any of the given schemas"):
        validate(item, line_schema(), schema())
    divergence = {"$defs": schema()["$defs"], "$ref": "#/$defs/divergence"}
    with pytest.raises(AssertionError, match="'vibes' is not one of"):
        validate(item, divergence, schema())


def moved_in_progress(to: int) -> Any:
    """A change: `response.in_progress` sent later, before the event now at `to`."""

    def change(rec: Record) -> None:
        data = fx.payloads(rec)
        data.insert(to, data.pop(1))
        fx.set_payloads(rec, data)

    return change


def test_identical_findings_fold_with_counts(tmp_path: Path) -> None:
    """25 replays without a request id; four streams, each the replay of an original of its
    own, with one event moved to another position (findings that differ only in event
    positions are one finding)."""
    chat = fx.chat_record(id="o0")
    records = [chat]
    records += [
        fx.replay(chat, id=f"rep{i}", label="vllm", change=no_request_id) for i in range(25)
    ]
    stream = fx.responses_record(id="s", stream=True)
    for i, to in enumerate((3, 7, 8, 9)):
        original = fx.replay(stream, id=f"s{i}", label="openai")
        original.update({"replay_of": None, "seq": 10 + i})
        records += [
            original,
            fx.replay(original, id=f"m{i}", label="vllm", change=moved_in_progress(to)),
        ]
    analysis, diagnoses = analysed(records)
    assert analysis.divergences["baseline"].nunique() == 2  # header "present", the event "#1"
    assert analysis.divergences["candidate"].nunique() == 5  # "" and four event positions
    model = build(analysis, diagnoses, max_examples=3)
    assert [(f.kind, f.count, len(f.examples)) for f in model.findings] == [
        ("header", 25, 3),
        ("event_order", 4, 3),
    ]
    html = render_html(model, tmp_path / "r.html").read_text()
    assert "22 more occurrences folded" in html
    # both cosmetic: their values say it all, so the examples are named, not laid out
    assert {f.severity for f in model.findings} == {"cosmetic"}
    assert html.count('class="example"') == 0
    assert all(f"<code>{e.pair_id}</code>" in html for f in model.findings for e in f.examples)
    summary = summary_from(model)
    assert len(findings_lines(model, tmp_path / "findings.jsonl")) == 29
    assert [f["count"] for f in summary["findings"]] == [25, 4]


def test_csv_is_the_divergence_table(tmp_path: Path) -> None:
    analysis, diagnoses = sample()
    model = build(analysis, diagnoses)
    with write_csv(model, tmp_path / "d.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == DIVERGENCE_COLUMNS
    assert len(rows) == 16 and {r["kind"] for r in rows} >= {
        "soft_error",
        "conformance",
        "event_missing",
        "client",
    }
    assert {r["severity"] for r in rows} == {"breaking", "deviation", "cosmetic"}


def test_highlight_and_window() -> None:
    assert hits(
        "choices[].message.tool_calls[].function.arguments",
        "choices[].message.tool_calls[].function.arguments@json.city",
    )
    assert hits("usage.total_tokens", "usage")
    assert hits(
        "events[response.output_text.delta].delta", "events[response.output_text.delta+].delta"
    )
    assert hits("headers.x-ratelimit-limit-tokens", "headers.x-ratelimit-*")
    assert not hits("usage_extra", "usage")
    doc = {"a": list(range(200)), "b": {"c": "<b>"}, "z": list(range(10_000))}
    html = str(pretty_json(doc, "b.c"))
    assert '<span class="hl">    &#34;c&#34;: &#34;&lt;b&gt;&#34;</span>' in html
    assert f"{204 - CONTEXT} lines above" in html and "⋯ more below" in html
    # plain lines end in a newline, the others are block spans: a line each, gaps included
    assert html.count("\n") + html.count("<span") == MAX_LINES + 2
    html = str(pretty_json(doc, "nowhere"))
    assert html.count("\n") + html.count("<span") == MAX_LINES + 1 and 'class="hl"' not in html


def test_redact_scrubs_echoed_credentials() -> None:
    text = f'Incorrect API key provided: {CANARY}. Bearer abcdefghijkl; ?api_key=zzzzzz&x=1 {{"api_key": "qqqqqqqqq"}}'
    out = redact(text)
    assert (
        CANARY not in out
        and "abcdefghijkl" not in out
        and "zzzzzz" not in out
        and "qqqqqqqqq" not in out
    )
    assert redact("Bearer sha256:1a2b3c4d5e6f") == "Bearer sha256:1a2b3c4d5e6f"


def test_cli_report_writes_three_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    analysis, diagnoses = sample()
    capture = tmp_path / "c.jsonl"
    with RecordWriter(capture) as w:
        for rec in analysis.index.read(range(len(analysis.index))):
            w.write(rec)
    seen: dict[str, Any] = {}

    def fake_report(
        run: Run,
        captures: list[str],
        *,
        ignore: tuple[str, ...],
        max_examples: int,
        baseline: str | None,
    ) -> ReportModel:
        seen["ignore"], seen["captures"] = ignore, captures
        return build(analysis, diagnoses, max_examples=max_examples)

    monkeypatch.setattr(Run, "report", fake_report)
    config = tmp_path / "wirediff.yaml"
    config.write_text("ignore:\n  - usage.*\n  - system_fingerprint\n")
    out = tmp_path / "out"
    rc = report_cli.main_report(
        [
            str(capture),
            *("-o", str(out / "r.html")),
            *("--json", str(out / "s.json")),
            *("--csv", str(out / "d.csv")),
            *("--ignore-config", str(config)),
        ]
    )
    assert rc == 0
    assert seen == {
        "ignore": ("usage.*", "system_fingerprint"),
        "captures": [str(capture)],
    }
    assert (out / "r.html").stat().st_size > 10_000
    validate(json.loads((out / "s.json").read_text()), schema(), schema())
    assert (out / "d.csv").read_text().startswith(",".join(DIVERGENCE_COLUMNS))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("ignore: usage\n", "wirediff.yaml: `ignore` must be a list of path patterns"),
        ("- a\n", "wirediff.yaml: expected a mapping with an `ignore:` list"),
        ("ignore: [a\n", "wirediff.yaml:2: not valid YAML"),
        (None, "wirediff.yaml: no such ignore config"),
        ("ignores: [usage.*]\n", "wirediff.yaml: unknown key 'ignores' (ignore: the paths"),
    ],
)
def test_cli_rejects_a_bad_ignore_config(tmp_path: Path, content: str | None, message: str) -> None:
    config = tmp_path / "wirediff.yaml"
    if content is not None:
        config.write_text(content)
    with pytest.raises(UsageError, match=re.escape(message)):
        report_cli.load_ignore(config)


def test_cli_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "har/1.2"}\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for argv, expect in (
        ([str(bad)], "not a wirediff/1 record"),
        ([str(empty)], "no exchanges"),
        ([str(tmp_path / "missing.jsonl")], "cannot read capture"),
        ([str(empty), "--max-examples", "0"], "--max-examples must be at least 1"),
    ):
        assert report_cli.main_report(argv) == 2
        err = capsys.readouterr().err
        assert expect in err and err.count("\n") == 1, err


def test_wirediff_report_is_wired_into_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from wirediff.cli import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "har/1.2"}\n')
    assert main(["report", str(bad), "-o", str(tmp_path / "r.html")]) == 2
    assert capsys.readouterr().err.startswith("wirediff: error: ")
    assert not (tmp_path / "r.html").exists()


def test_a_baseline_that_breaks_a_reference_is_flagged_first(tmp_path: Path) -> None:
    """Every comparison inherits the baseline's flaws: the report says so above the verdicts,
    and summary.json carries it; a spec-clean baseline gets no such note."""
    clean = fx.chat_record(id="o1")
    flawed = copy.deepcopy(clean)
    del fx.body(flawed)["choices"][0]["message"]["refusal"]  # the document requires it
    for base, expected in ((clean, False), (flawed, True)):
        records = [base, fx.replay(base, id="c1", label="vllm")]
        analysis, diagnoses = analysed(records)
        html = render(analysis, diagnoses, tmp_path / "r.html").read_text()
        assert summary_json(analysis, diagnoses)["baseline_flawed"] is expected
        assert ("The baseline is not spec-clean" in html) is expected


def test_the_summary_to_stdout_is_the_file_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--json -`: a pipeline reads the summary from stdout (`| jq`); the paths of what
    else was written go to stderr."""
    from tests.fixtures.sessions import masked
    from wirediff.cli import main

    argv = _report_argv(tmp_path)
    assert main([*argv, "--json", str(tmp_path / "s.json")]) == 0
    capsys.readouterr()
    assert main([*argv, "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert masked(json.loads(out)) == masked(json.loads((tmp_path / "s.json").read_text()))
    assert str(tmp_path / "r.html") in err


def test_the_summary_on_stdout_is_utf8_whatever_the_locale(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    from tests.fixtures.sessions import write_fixtures
    from wirediff.reports.render import write_summary

    (tmp_path / "captures").mkdir()
    files = [str(p) for p in write_fixtures(tmp_path / "captures")]
    with Run("local") as run:
        model = run.report(files, ignore=(), max_examples=1)
        ascii_out = io.TextIOWrapper(sys.stdout.buffer, encoding="ascii")
        monkeypatch.setattr(sys, "stdout", ascii_out)
        write_summary(model, "-")
        write_summary(model, tmp_path / "s.json")
    assert capsysbinary.readouterr().out == (tmp_path / "s.json").read_bytes()


@pytest.mark.parametrize("ms", [1.7e308, 1e-320, 0.0])
def test_latencies_at_the_ends_of_a_double_are_charted(tmp_path: Path, ms: float) -> None:
    """A capture may say any time a double holds: the chart's axis ends past the largest
    and every tick is a finite number, in memory and on the engine."""
    records = sample_records()
    for rec in records:
        rec["ttfb_ms"] = rec["duration_ms"] = ms
    html = render(*analysed(records), tmp_path / "memory.html").read_text(encoding="utf-8")
    assert "<svg" in html and "inf" not in re.sub(r"<[^>]*>|[a-z]inf|inf[a-z]", "", html)
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with Run("local", progress=False) as run:
        model = run.report([str(path)], ignore=(), max_examples=3)
    assert "<svg" in render_html(model, tmp_path / "engine.html").read_text(encoding="utf-8")
    ticks = nice_ticks(ms)
    assert ticks[0] == 0 and ticks[-1] >= ms and all(math.isfinite(t) for t in ticks)


def test_a_summary_written_anywhere_is_scrubbed_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`write_json`, which `probe --json` and `report --json` call for a file or `-`: a key a
    server quoted is scrubbed on stdout as in the file."""
    summary = {"reasons": ["401: Incorrect API key provided: sk-proj-PLANTED0123456789abcdef"]}
    write_json(summary, tmp_path / "s.json")
    assert write_json(summary, "-") == Path("-")
    out = capsys.readouterr().out
    assert out == (tmp_path / "s.json").read_text()
    assert "PLANTED" not in out and json.loads(out)["reasons"][0].startswith("401: Incorrect")


def test_the_csv_to_stdout_is_the_file_and_only_one_output_goes_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--csv -`: the table on stdout, as the file holds it, the paths written on stderr; two
    outputs on stdout are refused before anything is read."""
    from wirediff.cli import main

    monkeypatch.chdir(tmp_path)  # where a file named `-` would be written
    argv = _report_argv(tmp_path)
    assert main([*argv, "--csv", str(tmp_path / "d.csv")]) == 0
    capsys.readouterr()
    assert main([*argv, "--csv", "-"]) == 0
    out, err = capsys.readouterr()
    assert out == (tmp_path / "d.csv").read_text() and out.count("\n") > 1
    assert str(tmp_path / "r.html") in err and not (tmp_path / "-").exists()
    assert main([*argv, "--json", "-", "--csv", "-"]) == 2
    assert "--json - and --csv -: only one of them can go to stdout" in capsys.readouterr().err


def test_the_html_to_stdout_is_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-o -`: the report on stdout, as the file holds it but the time it was made; no file
    named `-`, and stdout is the report's alone."""
    from wirediff.cli import main

    def masked_html(text: str) -> str:
        return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "<time>", text)

    monkeypatch.chdir(tmp_path)
    argv = _report_argv(tmp_path)
    assert main(argv) == 0
    capsys.readouterr()
    assert main([*argv, "-o", "-"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("<!doctype html>")
    assert masked_html(out) == masked_html((tmp_path / "r.html").read_text(encoding="utf-8"))
    assert "exchanges" in err and not (tmp_path / "-").exists()
    assert main([*argv, "-o", "-", "--json", "-"]) == 2
    assert "-o - and --json -: only one of them can go to stdout" in capsys.readouterr().err


def _report_argv(tmp_path: Path) -> list[str]:
    """Give `wirediff report` over the fixture captures, written to `tmp_path`, its HTML there."""
    from tests.fixtures.sessions import write_fixtures

    (tmp_path / "captures").mkdir()
    captures = write_fixtures(tmp_path / "captures")
    return ["report", *map(str, captures), "-o", str(tmp_path / "r.html")]


def test_a_probes_summary_is_what_the_schema_says_and_nothing_more() -> None:
    """`summary.schema.json` admits no key it does not name: a field added to a feature's or a
    client's row is written only once the schema says what it is."""
    from wirediff.probe.drive import ProbeResult, result_summary
    from wirediff.probe.matrix import ClientRow, FeatureRow

    row = FeatureRow(
        "tools", "Tool calls", "breaking", "arguments are an object", "python", ["x1"], ["p"]
    )
    row.whose = [("breaking", "python")]  # what the matrix reads, not the summary
    result = ProbeResult(
        url="http://127.0.0.1:1/v1",
        label="candidate",
        model="m",
        embedding_model="e",
        rows=[row],
        clients=[ClientRow("python", "openai-python", ["tools"], ["tools"], [])],
        records=[],
        graded=None,  # type: ignore[arg-type]
        seconds={"sending": 0.5},
    )
    probe = schema()["properties"]["probe"]
    validate(result_summary(result), probe, schema())
    assert (
        list(result_summary(result)["features"][0])
        == probe["properties"]["features"]["items"]["required"]
    )
