"""Real servers' bugs as tests: each stand-in of `wirediff/profiles/bugs/` plays one public
bug report on the wire, one change away from a spec-clean base; the controls play what
honest servers differ in.

The real openai SDK (`workload.py`) runs through the real capture (mitmdump with
`addons/capture.py`) against the base stand-in; `wirediff replay` sends the capture to
every bug stand-in; the analysis grades each. A case's premise — the real SDK breaks on the
bug, or it does not — is checked live against the stand-ins, and the grade must follow it:
`breaking` exactly where a client call changes its result, and no cosmetic finding where it
does.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pandas as pd
import pytest

from tests.bugs.workload import (
    MODEL,
    PROMPT,
    RESPONSES_WEATHER,
    STEP_HEADER,
    TIME,
    WEATHER,
    run_workload,
)
from tests.conftest import launch_mitmdump, missing
from tests.fixtures.analysed import pair_frame, records_of
from wirediff._types import Record
from wirediff.analysis.comparison.clients import node
from wirediff.analysis.comparison.impact import impact
from wirediff.analysis.index.analyze import Analysis, analyze
from wirediff.backends.standin import make_standin
from wirediff.cli.replay import main_replay
from wirediff.profiles import Profile, load_bugs, profile
from wirediff.record.store import load_records

pytestmark = pytest.mark.bugs

EXCHANGES = 14
"""What the workload sends: its 13 steps, one of them two turns."""


@dataclass(frozen=True)
class Case:
    """One bug report: where it shows, how it is graded, and whether the SDK breaks on it."""

    profile: str
    steps: tuple[str, ...]
    family: str
    severity: str
    """The worst finding on the steps' exchanges."""
    verdict: str
    """The label's verdict for the steps' family."""
    breaks: bool
    """The premise: a client call returns something else (or raises) on the bug."""
    baseline: str = "openai"
    node: bool = False
    """The premise is the npm `openai` package's (measured when Node and it are found)."""


CHAT, RESPONSES = "chat.completions", "responses"
CASES = [
    Case("llamacpp-20198", ("chat-tool", "chat-stream-tools"), CHAT, "breaking", "breaking", True),
    Case("ollama-15457", ("chat-stream-tools",), CHAT, "breaking", "breaking", True),
    Case("ollama-7881", ("chat-stream-tools",), CHAT, "breaking", "breaking", True),
    Case("litellm-22900", ("chat-stream-tools",), CHAT, "breaking", "breaking", True),
    Case("llamacpp-14566", ("chat-stream-overflow",), CHAT, "breaking", "breaking", True),
    Case("vllm-12886", ("chat-overflow",), CHAT, "breaking", "breaking", True, node=True),
    Case("ollama-6646", ("chat-unknown-model",), CHAT, "cosmetic", "compatible", False),
    Case("vllm-27755", ("chat", "chat-stream"), CHAT, "breaking", "breaking", True,
         baseline="control-reasoning-content"),
    Case("newapi-6822", ("responses-stream",), RESPONSES, "cosmetic", "compatible", False),
    Case("litellm-36356", ("responses-stream-text-tool",), RESPONSES, "cosmetic",
         "compatible", False),
    Case("ogx-5309", ("responses-stream",), RESPONSES, "deviation",
         "compatible with deviations", False),
    Case("semantic-router-2446", ("responses-stream",), RESPONSES, "breaking", "breaking", True),
    Case("lmstudio-1188", ("responses-stream-continued",), RESPONSES, "breaking", "breaking", True),
    Case("newapi-5221", ("responses-stream",), RESPONSES, "breaking", "breaking", True),
    Case("newapi-4362", ("responses-stream",), RESPONSES, "breaking", "breaking", True),
]  # fmt: skip
CONTROLS = ["control-noise", "control-vllm-extras", "control-reasoning-content"]
BASELINES = {"openai": [c.profile for c in CASES if c.baseline == "openai"] + CONTROLS}
BASELINES["control-reasoning-content"] = [c.profile for c in CASES if c.baseline != "openai"]


def stand_in(name: str) -> Profile:
    return profile(name) if name == "openai" else load_bugs()[name]


def _capture(directory: Path, baseline: str) -> Path:
    """The workload through mitmdump (reverse mode) against the baseline's stand-in."""
    directory.mkdir(parents=True)
    with make_standin(stand_in(baseline)) as backend:
        proxy = launch_mitmdump(
            directory, [f"reverse:{backend.url}"], session="bugs", label=baseline
        )
        try:
            run_workload(proxy.url + "/v1")
            proxy.records(EXCHANGES, timeout=60)
        finally:
            proxy.stop()
    return proxy.capture_file


def _replay(capture: Path, name: str) -> Path:
    out = capture.with_name(f"bugs.{name}.jsonl")
    with make_standin(stand_in(name)) as backend:
        code = main_replay(
            [str(capture), "--to", backend.url + "/v1", "--label", name, "-o", str(out)]
        )
    assert code == 0
    return out


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Analysis]:
    """Per baseline: the analysis of its capture and of the replays to its candidates."""
    root = tmp_path_factory.mktemp("bugs")
    out = {}
    for baseline, candidates in BASELINES.items():
        capture = _capture(root / baseline, baseline)
        files = [capture, *(_replay(capture, name) for name in candidates)]
        out[baseline] = analyze(load_records(files))
    return out


def _step(record: Record) -> str:
    return next(
        (str(v) for k, v in record["request"]["headers"] if str(k).lower() == STEP_HEADER), ""
    )


def pairs_of(analysis: Analysis, label: str, steps: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """`(baseline id, candidate id)` of the label's exchanges (of these steps)."""
    pairs = pair_frame(analysis.exchanges, analysis.pairs)
    pairs = pairs[pairs["label"] == label]
    by_id = records_of(analysis)
    return [
        (b, c)
        for b, c in zip(pairs["baseline_id"], pairs["candidate_id"], strict=True)
        if not steps or _step(by_id[b]) in steps
    ]


def findings(analysis: Analysis) -> pd.DataFrame:
    return analysis.frame()


RANK = {"breaking": 0, "deviation": 1, "cosmetic": 2}


def test_every_bug_profile_is_a_case_or_a_control() -> None:
    named = {c.profile for c in CASES} | set(CONTROLS)
    assert set(load_bugs()) == named
    for case in CASES:
        assert load_bugs()[case.profile]["report"].startswith("https://github.com/")


@pytest.mark.parametrize("case", CASES, ids=[c.profile for c in CASES])
def test_each_bug_gets_the_severity_and_verdict_its_premise_implies(
    tier: dict[str, Analysis], case: Case
) -> None:
    if case.node and isinstance(node.node_sdk(), str):
        missing(f"the Node SDK is not found: {node.node_sdk()}")
    analysis = tier[case.baseline]
    ids = {c for _, c in pairs_of(analysis, case.profile, case.steps)}
    assert len(ids) == len(case.steps)
    found = findings(analysis)
    mine = found[found["candidate_id"].isin(ids)]
    worst = min(mine["severity"], key=RANK.__getitem__, default="none")
    shown = mine[["kind", "path", "severity", "evidence"]].to_string()
    assert worst == case.severity, shown
    assert (case.severity == "breaking") == case.breaks
    cells = analysis.verdicts
    cell = cells[(cells["label"] == case.profile) & (cells["family"] == case.family)]
    assert list(cell["verdict"]) == [case.verdict], cell.to_string()


@pytest.mark.parametrize("control", CONTROLS)
def test_controls_are_compatible_with_no_deviation(tier: dict[str, Analysis], control: str) -> None:
    """Other ids, timestamps, fingerprints, usage numbers, texts and key order, and the keys
    vendors add, change nothing a client reads."""
    analysis = tier["openai"]
    cells = analysis.verdicts[analysis.verdicts["label"] == control]
    assert set(cells["verdict"]) == {"compatible"}, cells.to_string()
    ids = {c for _, c in pairs_of(analysis, control)}
    assert len(ids) == EXCHANGES
    found = findings(analysis)
    mine = found[found["candidate_id"].isin(ids)]
    assert set(mine["severity"]) <= {"cosmetic"}, mine[["kind", "path", "severity"]].to_string()


NOTHING = frozenset({"none", "empty", "absent", "0", "nothing"})
"""Observed values that hold nothing an app could lose."""


def calls_changed(base: Record, cand: Record) -> list[str]:
    """What the real clients' calls return otherwise on the candidate's answer: a value the
    baseline's gave that is gone or altered, a raise or refusal the baseline's had not, a
    failure it had not (a value gained, such as an extra key's text, changes nothing an app
    relied on)."""
    b, c = impact(base), impact(cand)
    before, after = dict(b.observed), dict(c.observed)
    out = [
        f"{k}: {v} -> {after.get(k)}"
        for k, v in before.items()
        if v not in NOTHING and after.get(k) != v
    ]
    out += [
        f"{k}: {v}"
        for k, v in after.items()
        if k not in before and k.endswith(("raises", "refused"))
    ]
    known = {(f.probe, f.client, f.error) for f in b.failures}
    out += [f.evidence for f in c.failures if (f.probe, f.client, f.error) not in known]
    return out


def test_no_finding_is_cosmetic_where_a_client_call_changes_its_result(
    tier: dict[str, Analysis],
) -> None:
    """Every finding of every candidate, against the harness: where the real clients' calls
    return anything else on the candidate's answer than on the baseline's, the pair has a
    breaking finding and none of its findings (headers aside) is cosmetic; where they
    return the same, none is breaking."""
    wrong = []
    for analysis in tier.values():
        found = findings(analysis)
        by_id = records_of(analysis)
        for label in sorted(set(pair_frame(analysis.exchanges, analysis.pairs)["label"])):
            for b, c in pairs_of(analysis, label):
                changed = calls_changed(by_id[b], by_id[c])
                mine = found[(found["candidate_id"] == c) & (found["kind"] != "header")]
                severities = set(mine["severity"])
                step = f"{label} {_step(by_id[b])}"
                if changed and ("cosmetic" in severities or "breaking" not in severities):
                    wrong.append(f"{step}: {sorted(severities)} though {changed}")
                if not changed and "breaking" in severities:
                    wrong.append(f"{step}: breaking though no call changed")
    assert wrong == []


# --- the premises, live: the real SDK against the stand-ins ---------------------------------


def _kind(value: Any) -> str:
    return (
        "none"
        if value is None
        else ("text" if value else "empty")
        if isinstance(value, str)
        else type(value).__name__
    )


def _calls(calls: Any) -> list[tuple[str, str]]:
    out = []
    for call in calls or []:
        try:
            parsed = json.loads(call.function.arguments)
            out.append((call.function.name, type(parsed).__name__))
        except (TypeError, ValueError) as e:
            out.append((call.function.name, f"json.loads raises {type(e).__name__}"))
    return out


def _chat_final(client: openai.OpenAI, **kw: Any) -> tuple[Any, ...]:
    with client.chat.completions.stream(messages=PROMPT, **kw) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    choice = final.choices[0]
    reasoning = getattr(choice.message, "reasoning_content", None)
    return (
        choice.finish_reason,
        _kind(choice.message.content),
        _kind(reasoning),
        _calls(choice.message.tool_calls),
    )


def _responses_final(client: openai.OpenAI, **kw: Any) -> tuple[Any, ...]:
    with client.responses.stream(input="Hi", **kw) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    return (final.status, _kind(final.output_text), [item.type for item in final.output])


def _chain(client: openai.OpenAI) -> tuple[Any, ...]:
    first = client.responses.create(model=MODEL, input="Hi")
    return _responses_final(client, model=MODEL, previous_response_id=first.id)


def _created(client: openai.OpenAI) -> tuple[Any, ...]:
    message = (
        client.chat.completions.create(model=MODEL, messages=PROMPT, tools=[WEATHER])
        .choices[0]
        .message
    )
    return (_kind(message.content), _calls(message.tool_calls))


def _overflow(client: openai.OpenAI) -> tuple[Any, ...]:
    for _ in client.chat.completions.create(
        model="scenario-context-overflow", messages=PROMPT, stream=True
    ):
        pass
    return ("no error",)


def _node_error(url: str) -> tuple[Any, ...]:
    """What an app using the npm package sees of the over-long prompt's error."""
    sdk = node.node_sdk()
    assert not isinstance(sdk, str)
    script = Path(__file__).with_name("node_error.mjs")
    done = subprocess.run(
        [sdk.node, str(script), str(sdk.directory), url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    raised = json.loads(done.stdout)
    return (raised["class"], "maximum context length" in raised["message"])


def _unknown_model(client: openai.OpenAI) -> tuple[Any, ...]:
    client.chat.completions.create(model="no-such-model", messages=PROMPT)
    return ("no error",)


PREMISES: dict[str, Callable[[openai.OpenAI], tuple[Any, ...]]] = {
    "llamacpp-20198": _created,
    "ollama-15457": lambda c: _chat_final(c, model="scenario-parallel-tools", tools=[WEATHER, TIME]),
    "ollama-7881": lambda c: _chat_final(c, model="scenario-parallel-tools", tools=[WEATHER, TIME]),
    "litellm-22900": lambda c: _chat_final(c, model="scenario-parallel-tools", tools=[WEATHER, TIME]),
    "llamacpp-14566": _overflow,
    "ollama-6646": _unknown_model,
    "vllm-27755": lambda c: _chat_final(c, model=MODEL),
    "newapi-6822": lambda c: _responses_final(c, model=MODEL),
    "litellm-36356": lambda c: _responses_final(c, model="scenario-text-and-tool", tools=[RESPONSES_WEATHER]),
    "ogx-5309": lambda c: _responses_final(c, model=MODEL),
    "semantic-router-2446": lambda c: _responses_final(c, model=MODEL),
    "lmstudio-1188": _chain,
    "newapi-5221": lambda c: _responses_final(c, model=MODEL),
    "newapi-4362": lambda c: _responses_final(c, model=MODEL),
}  # fmt: skip


def _observe(name: str, case: Case) -> tuple[Any, ...]:
    with make_standin(stand_in(name)) as backend:
        if case.node:
            return _node_error(backend.url + "/v1")
        client = openai.OpenAI(base_url=backend.url + "/v1", api_key="sk-premise", max_retries=0)
        try:
            return PREMISES[case.profile](client)
        except openai.APIStatusError as e:
            return ("raises", type(e).__name__)
        except Exception as e:
            return ("raises", type(e).__name__)
        finally:
            client.close()


@pytest.mark.parametrize("case", CASES, ids=[c.profile for c in CASES])
def test_the_premise_holds_for_the_real_sdk(case: Case) -> None:
    """The real SDK, live against the base stand-in and the bug's: what an app reads differs
    exactly when the case says the bug breaks it."""
    if case.node and isinstance(node.node_sdk(), str):
        missing(f"the Node SDK is not found: {node.node_sdk()}")
    base, bug = _observe(case.baseline, case), _observe(case.profile, case)
    assert (base != bug) == case.breaks, (base, bug)
