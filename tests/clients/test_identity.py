"""Who sent it: each real client of the tier runs its workload (tests/clients/probe/)
through `wirediff capture`, and every record's `tags.sdk` names it as
`wirediff/profiles/clients.yaml` and `record/tags.sdk_identity` say, with its version — from
the user agent it really sends, whatever call made the request."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests.clients.conftest import npm_version, pip_version
from tests.clients.probe_workloads import WORKLOADS_BY_NAME, Workload, capture_client_workload
from tests.fixtures.records import sdk_of
from wirediff._types import Record
from wirediff.cli.report import main_report

pytestmark = pytest.mark.clients

HERE = Path(__file__).resolve().parent
PYDANTIC_AI = Workload(
    "pydantic-ai",
    "pydantic-ai",
    lambda client, work: [str(client / "bin/python"), str(HERE / "identity/pydantic_ai_app.py")],
)
"""pydantic-ai is no client of the probe: its workload is here."""
INSTRUCTOR = Workload(
    "instructor",
    "instructor",
    lambda client, work: [str(client / "bin/python"), str(HERE / "identity/instructor_app.py")],
)
"""instructor patches an openai client the app made: its workload is here."""
IDENTITY = {w.name: w for w in (PYDANTIC_AI, INSTRUCTOR)}


def captured(name: str, tmp_path: Path) -> tuple[Path, list[Record]]:
    w = IDENTITY.get(name) or WORKLOADS_BY_NAME[name]
    client, got = capture_client_workload(w, tmp_path / name)
    assert got.records
    return client, got.records


def clients(records: list[Record]) -> set[tuple[str | None, str | None]]:
    return {(sdk_of(r).get("client"), sdk_of(r).get("client_version")) for r in records}


def test_the_vercel_ai_sdk_is_one_client_whichever_call_sent_it(tmp_path: Path) -> None:
    """generateText sends `ai/<ai> ai-sdk-provider-utils/<utils> node.js/…`, streamText the
    provider's `ai-sdk-openai/<provider> ai-sdk-provider-utils/<utils> …`: one client."""
    client, records = captured("vercel-ai", tmp_path)
    agents = {sdk_of(r)["user_agent"] or "" for r in records}
    ai, provider = npm_version(client, "ai"), npm_version(client, "@ai-sdk/openai")
    assert any(a.startswith(f"ai/{ai} ") for a in agents)
    assert any(a.startswith(f"ai-sdk-openai/{provider} ") for a in agents)
    assert clients(records) == {("ai-sdk", npm_version(client, "@ai-sdk/provider-utils"))}
    assert all("lang" not in sdk_of(r) for r in records)  # no X-Stainless-*: not an OpenAI SDK
    # and the report lists it once, with every exchange it sent
    summary = tmp_path / "summary.json"
    path = tmp_path / "vercel.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert main_report([str(path), "-o", str(tmp_path / "r.html"), "--json", str(summary)]) == 0
    (backend,) = json.loads(summary.read_text(encoding="utf-8"))["backends"]
    listed = [c for cap in backend["captures"] for c in cap["clients"]]
    assert [(c["client"], c["exchanges"]) for c in listed] == [("ai-sdk", len(records))]


def test_the_agents_sdk_says_who_it_is(tmp_path: Path) -> None:
    client, records = captured("openai-agents", tmp_path)
    version = pip_version(client, "openai-agents").strip()
    assert {sdk_of(r)["user_agent"] for r in records} == {f"Agents/Python {version}"}
    assert clients(records) == {("openai-agents", version)}
    # the openai SDK underneath still says what it is in its X-Stainless-* headers
    assert {(sdk_of(r)["lang"], sdk_of(r)["async"]) for r in records} == {("python", True)}


def test_pydantic_ai_says_who_it_is(tmp_path: Path) -> None:
    """`pydantic-ai/<version>` replaces the openai SDK's user agent; its X-Stainless-*
    headers stay, with `async:asyncio` for async."""
    client, records = captured("pydantic-ai", tmp_path)
    version = pip_version(client, "pydantic-ai-slim").strip()
    assert {r["tags"]["family"] for r in records} == {"chat.completions", "responses"}
    assert {sdk_of(r)["user_agent"] for r in records} == {f"pydantic-ai/{version}"}
    assert clients(records) == {("pydantic-ai", version)}
    assert {(sdk_of(r)["lang"], sdk_of(r)["async"]) for r in records} == {("python", True)}


def test_instructor_sends_the_openai_sdks_user_agent(tmp_path: Path) -> None:
    """instructor calls the openai client the app made and adds no header of its own: its
    traffic is openai-python's, with openai's version, and names no client."""
    client, records = captured("instructor", tmp_path)
    version = pip_version(client, "openai").strip()
    assert {sdk_of(r)["user_agent"] for r in records} == {f"OpenAI/Python {version}"}
    assert clients(records) == {(None, None)}
    assert {(sdk_of(r)["lang"], sdk_of(r)["version"]) for r in records} == {("python", version)}
    # both of its modes sent their request: tools, then JSON
    bodies = [r["request"]["body"] for r in records]
    assert [("tools" in b, b.get("response_format", {}).get("type")) for b in bodies] == [
        (True, None),
        (False, "json_object"),
    ]


def test_codex_names_itself_by_its_originator(tmp_path: Path) -> None:
    client, records = captured("codex", tmp_path)
    assert clients(records) == {("codex_exec", npm_version(client, "@openai/codex"))}


@pytest.mark.parametrize("name", ["openai-python", "openai-node", "langchain", "llamaindex"])
def test_the_sdks_and_what_does_not_say_who_it_is_name_no_client(name: str, tmp_path: Path) -> None:
    """The OpenAI SDKs name themselves as an SDK (`OpenAI/Python 2.54.0`), and LangChain and
    LlamaIndex send the openai SDK's user agent unchanged: no client."""
    _, records = captured(name, tmp_path)
    assert clients(records) == {(None, None)}
    lang = "js" if name == "openai-node" else "python"
    assert {sdk_of(r)["lang"] for r in records} == {lang}
    if name == "openai-python":
        assert {sdk_of(r)["version"] for r in records} == {openai.__version__}
