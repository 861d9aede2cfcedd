"""One problem, one line: when findings are one problem (`sameness`), the report's findings
folded across references (`one_per_problem`), the matrix's counts agreeing with its badge
(`agreeing`), and the sentence per candidate the report and `check` open with
(`bottom_line`)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from tests.fixtures.records import answer, openai_error, openai_session, replay, responses_record
from wirediff.analysis.comparison.sameness import problem_key, without_ids
from wirediff.analysis.comparison.verdicts import VERDICT_COLUMNS
from wirediff.analysis.index.analyze import analyze
from wirediff.reports.bottom_line import bottom_line
from wirediff.reports.findings import Example, Finding, one_per_problem
from wirediff.reports.model import agreeing

NOT_FOUND = "`client.responses.create()` raises NotFoundError: Response with id '{}' not found."


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (NOT_FOUND.format("resp_8307690165c64f4fc9e57c0a6a40e1eb"), NOT_FOUND.format("resp_…")),
        ("call_id call_Mwk2FUkaGdGP0QP3a0Jp58pb", "call_id call_…"),
        ("from 8907769c-cf7a-4722-be74-8fd0efaa684f", "from …"),
        ("created 2026-11-30T12:00:00Z", "created …"),
        ("key sha256:1a2b3c4d, model gpt-4o-mini-2024-07-18", "key sha256:1a2b3c4d, model gpt-4o-mini-2024-07-18"),
    ],
)  # fmt: skip
def test_ids_and_timestamps_are_left_out_of_what_is_read(text: str, shown: str) -> None:
    assert without_ids(text) == shown


def test_a_problem_is_the_clients_loss_else_the_field() -> None:
    a = NOT_FOUND.format("resp_8307690165c64f4fc9e57c0a6a40e1eb")
    b = NOT_FOUND.format("resp_9403dd136cd8bf7a8864208f3155906e").replace("()", "(stream=True)")
    assert problem_key("client.responses.create()", a) == problem_key("status", b)
    assert problem_key("choices[].message.refusal", "") == problem_key(
        "choices[].message.refusal", ""
    )
    assert problem_key("choices[].logprobs", "") != problem_key("choices[].message.refusal", "")
    assert problem_key("x", "lost 2 events") == problem_key("y", "lost 3 events")


def finding(kind: str, source: str, severity: str = "deviation", **kw: Any) -> Finding:
    values: dict[str, Any] = {
        "anchor": f"f-{kind}-{source}",
        "kind": kind,
        "path": "choices[].message.refusal",
        "label": "ollama",
        "baseline_label": "openai",
        "endpoint": "/v1/chat/completions",
        "family": "chat.completions",
        "severity": severity,
        "message": f"{kind} says so",
        "baseline": "",
        "candidate": "",
        "count": 3,
        "examples": [Example("p1", "b1", "c1"), Example("p2", "b2", "c2")],
        "source": source,
    }
    return Finding(**{**values, **kw})


def test_references_about_one_field_of_the_same_exchanges_are_one_finding() -> None:
    diff = finding("schema_missing", "baseline")
    spec = finding("conformance", "openai-openapi 2.3.0", baseline_label="")
    [one] = one_per_problem([diff, spec])
    assert one is diff and one.also == [spec]
    assert one.sources == ["baseline", "openai-openapi 2.3.0"]


@pytest.mark.parametrize(
    "change",
    [
        {"path": "choices[].logprobs"},
        {"label": "vllm"},
        {"endpoint": "/v1/responses"},
        {"examples": [Example("p9", "b9", "c9")]},  # other exchanges
    ],
)
def test_findings_about_something_else_stay_apart(change: dict[str, Any]) -> None:
    diff = finding("schema_missing", "baseline")
    other = finding("conformance", "openai-openapi 2.3.0", **change)
    assert one_per_problem([diff, other]) == [diff, other]
    assert diff.also == [] and other.also == []


def test_the_worst_finding_speaks_for_the_problem() -> None:
    loss = "`client.chat.completions.create(stream=True)`: no usage"
    grammar = finding("conformance", "stream-grammar", "breaking", path="events[chunk.usage]")
    diff = finding("event_missing", "baseline", "cosmetic", path="events[chunk.usage]", count=5)
    sdk = finding("client", "openai-python", "breaking", path="client.chat.completions.create()")
    for f in (grammar, diff, sdk):
        f.evidence = loss
    [one] = one_per_problem([diff, grammar, sdk])
    assert one is grammar and one.count == 5
    assert one.sources == ["stream-grammar", "openai-python", "baseline"]


@pytest.mark.parametrize(
    ("verdict", "outcomes", "shown"),
    [
        ("breaking", {"deviation": 3, "unsupported": 2}, {"deviation": 3, "breaking": 2}),
        ("breaking", {"breaking": 1, "unsupported": 2}, {"breaking": 3}),
        ("unsupported", {"unsupported": 3, "skipped": 2}, {"unsupported": 3, "skipped": 2}),
        ("compatible", {"ok": 4}, {"ok": 4}),
    ],
)
def test_a_cells_counts_agree_with_its_badge(
    verdict: str, outcomes: dict[str, int], shown: dict[str, int]
) -> None:
    assert agreeing(outcomes, verdict) == shown


def verdicts(*rows: tuple[str, str, str, str, int, str]) -> pd.DataFrame:
    """(label, role, family, verdict, deviations, headline) rows."""
    return pd.DataFrame(
        [
            (label, role, family, "http", verdict, [], 0, deviations, 0, 1, headline)
            for label, role, family, verdict, deviations, headline in rows
        ],
        columns=VERDICT_COLUMNS,
    )


def test_one_sentence_per_candidate() -> None:
    frame = verdicts(
        ("openai", "baseline", "chat.completions", "compatible", 0, ""),
        ("ollama", "candidate", "chat.completions", "compatible with deviations", 2, ""),
        ("ollama", "candidate", "responses", "compatible with deviations", 12, ""),
        ("lmstudio", "candidate", "chat.completions", "breaking", 1, "breaks: no usage"),
        ("lmstudio", "candidate", "responses", "unsupported", 0, "is not implemented (404)"),
        ("vllm", "candidate", "chat.completions", "compatible", 0, ""),
        ("vllm", "candidate", "responses", "breaking", 4, "lacks GET /v1/responses/{id} (404)"),
    )
    assert bottom_line(frame) == [
        "ollama can replace openai for chat.completions and responses, with 14 deviations "
        "no client notices.",
        "lmstudio cannot replace openai: chat.completions breaks: no usage; responses is not "
        "implemented (404).",
        "vllm cannot replace openai: responses lacks GET /v1/responses/{id} (404); it can for "
        "chat.completions.",
    ]
    assert bottom_line(frame[frame["label"] != "openai"]) == []  # nothing compared


def test_a_headline_cut_short_closes_what_it_opened() -> None:
    """Its brackets and its code, which the sentence after it would otherwise read as inside."""
    long = (
        "breaks: `client.chat.completions.create(stream=True)` loses usage (assumed behaviour of "
        "LM Studio (chat-only version): no usage chunk for stream_options.include_usage, which "
        "the SDK asks for and every client that counts tokens reads at the end of the stream)"
    )
    code = "breaks: " + "x" * 150 + " `client.responses.create(input=[one, two, three, four])`"
    frame = verdicts(
        ("openai", "baseline", "chat.completions", "compatible", 0, ""),
        ("lmstudio", "candidate", "chat.completions", "breaking", 1, long),
        ("vllm", "candidate", "chat.completions", "breaking", 1, code),
    )
    lmstudio, vllm = bottom_line(frame)
    assert lmstudio.endswith("asks for and ever…).") and lmstudio.count("(") == lmstudio.count(")")
    assert vllm.endswith("`client.responses.create(input=[one, two…`.")


def test_the_verdicts_name_what_stops_a_candidate_without_ids() -> None:
    """Two exchanges that fail alike, told apart only by the id in the server's words, are
    one reason counted twice; the headline says what stops the candidate."""
    base = openai_session()
    stored = [b for b in base if b["tags"]["family"] == "responses"][:2]

    def not_found(rec: Any) -> None:
        rid = f"resp_{rec['id'] * 16}"[:37]
        answer(rec).update(
            {
                "status": 404,
                "body": openai_error(
                    f"Response with id '{rid}' not found.", "invalid_request_error"
                ),
                "events": None,
            }
        )

    cands = [replay(b, id=f"c{i}", label="vllm", change=not_found) for i, b in enumerate(stored)]
    ok = replay(responses_record(id="o9"), id="c9", label="vllm")
    v = analyze([*stored, responses_record(id="o9"), *cands, ok]).verdicts
    [row] = v[(v["label"] == "vllm") & (v["family"] == "responses")].to_dict("records")
    assert row["verdict"] == "breaking", row
    assert "resp_…" in row["headline"] and "(x2)" in " ".join(row["reasons"])
    assert all("resp_c" not in r for r in row["reasons"])


STOPPED = {"kind": "proxy_shutdown", "message": "the proxy stopped before the exchange ended"}
"""The error of an exchange the capture addon records at a stop (`record.flow.PROXY_SHUTDOWN`)."""
INTERRUPTED = {
    "kind": "interrupted",
    "message": "stopped (Ctrl-C) while waiting for the answer: the target may have it",
}
"""The error of a request a replay had sent when Ctrl-C stopped it (`replay.sender`)."""


def _stopped(rec: Any, error: dict[str, str] = STOPPED) -> None:
    """As the addon records an exchange in flight at a stop: a stream with the events seen
    so far, not complete; else no answer yet. A replay records no answer."""
    rec["error"] = dict(error)
    resp = rec["response"]
    if resp is not None and resp["events"] and error is STOPPED:
        resp["events"], resp["complete"] = resp["events"][:2], False
    else:
        rec["response"] = None


@pytest.mark.parametrize("error", [STOPPED, INTERRUPTED], ids=["capture", "replay"])
def test_exchanges_a_stop_cut_count_in_no_verdict(error: dict[str, str]) -> None:
    """A candidate whose every exchange our own stop cut (the capture's, a replay's Ctrl-C) is
    not judged: no finding against it, no verdict, no bottom line; one that answered besides
    is judged by that."""
    base = openai_session()
    assert any(b["response"] and b["response"]["events"] for b in base)
    cands = [
        replay(b, id=f"c{i}", label="vllm", change=lambda r: _stopped(r, error))
        for i, b in enumerate(base)
    ]
    result = analyze([*base, *cands])
    assert not result.divergences["candidate_id"].isin({c["id"] for c in cands}).any()
    assert result.verdicts[result.verdicts["label"] == "vllm"].empty
    assert bottom_line(result.verdicts) == []
    healthy = replay(base[0], id="h0", label="vllm")
    v = analyze([*base, *cands, healthy]).verdicts
    [row] = v[(v["label"] == "vllm")].to_dict("records")
    assert (row["family"], row["verdict"]) == ("chat.completions", "compatible"), row
