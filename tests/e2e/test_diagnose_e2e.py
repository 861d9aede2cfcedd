"""Diagnoses and the CI gate on captures made through a real mitmdump, from the real openai
SDK, against the stand-ins on loopback.

Each test provokes one failure a user meets when switching backends, captures it with the
capture addon, and checks that `diagnose` (and `wirediff diagnose`) names it.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import openai
import pandas as pd
import pytest

from tests.fixtures.analysed import diagnose
from wirediff.backends.standin import standin
from wirediff.cli import main
from wirediff.cli.replay import main_replay

pytestmark = pytest.mark.e2e

KEY = "sk-e2e-diagnose-CANARY-3f9a1c"
MODEL = "gpt-4o-mini"
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


def sdk(base_url: str, **http: Any) -> openai.OpenAI:
    """The real openai SDK without retries, so each call is one exchange on the wire; its
    default httpx client follows redirects (`follow_redirects=True`)."""
    return openai.OpenAI(
        base_url=base_url,
        api_key=KEY,
        max_retries=0,
        timeout=30.0,
        http_client=openai.DefaultHttpxClient(trust_env=False, **http),
    )


def only_chain(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """The diagnoses of the one failing chain, by code."""
    assert df["chain_id"].nunique() == 1, df[["chain_id", "code"]]
    return {str(row["code"]): {str(k): v for k, v in row.items()} for row in df.to_dict("records")}


def test_lmstudio_responses_is_a_soft_error_for_a_missing_endpoint(mitmdump: Any) -> None:
    with standin("lmstudio") as url:
        m = mitmdump([f"reverse:{url}"])
        with sdk(m.url + "/v1") as client:
            # LM Studio answers 200 {"error": …}: the SDK raises nothing.
            client.responses.create(model="qwen2.5-7b-instruct", input="Say hello.")
        (rec,) = m.records(1)
    assert rec["response"]["status"] == 200 and rec["tags"]["soft_error"]

    df = only_chain(diagnose([rec]))
    assert set(df) == {"soft_error_200", "endpoint_not_implemented"}
    assert {row["provider"] for row in df.values()} == {"lmstudio"}
    row = df["endpoint_not_implemented"]
    assert row["endpoint"] == "/v1/responses" and "LM Studio" in row["summary"]
    assert "chat.completions" in row["remedy"]
    assert "200" in df["soft_error_200"]["summary"]


WEATHER_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_unrelated_failed_calls_are_failed_chains_of_their_own(
    mitmdump: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A live session against a chat-only LM Studio: three Responses calls that ask
    different things (one streamed, one with a tool), each refused with LM Studio's 200
    soft error, then a chat call that asks something else again. Nothing fell back: each
    refused call is a failed chain, none recovered. The same client then asks the refused
    question again of chat completions: that one is a fallback, recovered."""
    model = "qwen2.5-7b-instruct"
    with standin("lmstudio") as url:
        m = mitmdump([f"reverse:{url}"])
        with sdk(m.url + "/v1") as client:
            client.responses.create(model=model, input="Say hello.")
            assert (
                list(client.responses.create(model=model, input="Count to 3.", stream=True)) == []
            )
            client.responses.create(model=model, input=ASK, tools=[WEATHER_TOOL])
            chat = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Name a colour."}]
            )
            assert chat.choices[0].message.content
            records = m.records(4)
            client.responses.create(model=model, input="Name a fruit.")
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Name a fruit."}]
            )
            records = m.records(6)
    assert [r["tags"]["soft_error"] for r in records] == [True, True, True, False, True, False]

    df = diagnose(records)
    chains = {tuple(ids): g for ids, g in df.groupby(df["exchange_ids"].map(tuple))}
    # each refused call its own chain, with LM Studio's two diagnoses, not recovered
    assert sorted(chains) == sorted((records[k]["id"],) for k in (0, 1, 2, 4))
    for k in (0, 1, 2):
        g = chains[(records[k]["id"],)]
        assert set(g["code"]) == {"soft_error_200", "endpoint_not_implemented"}
        assert not g["recovered"].any()
    assert chains[(records[4]["id"],)]["recovered"].all()
    # the engine behind `wirediff diagnose` links the same
    assert main(["diagnose", "--json", str(m.capture_file)]) == 0
    rows = json.loads(capsys.readouterr().out)
    got = {(tuple(r["exchange_ids"]), r["code"], r["recovered"]) for r in rows}
    assert got == {
        (tuple(row["exchange_ids"]), row["code"], bool(row["recovered"]))
        for row in df.to_dict("records")
    }


def test_http_to_https_redirect_turns_the_post_into_a_get(mitmdump: Any) -> None:
    """`http://old` answers 301 to `https://new`; the SDK's httpx client follows it and, as
    browsers and most HTTP clients do after a 301/302, repeats the POST as a GET.

    Both hops pass one capturing mitmdump in regular (forward proxy) mode: the plain HTTP
    request as is, the HTTPS one through CONNECT with the mitmproxy CA trusted. The HTTPS
    server is a bare mitmdump reverse listener (no addon) that terminates TLS in front of
    an openai stand-in.
    """
    with standin("openai") as target:
        tls = mitmdump([f"reverse:{target}"], addon=False)
        with standin("openai", redirect=f"https://127.0.0.1:{tls.port}") as old:
            proxy = mitmdump(["regular"], extra=["--set", "ssl_insecure=true"])
            verify = ssl.create_default_context(cafile=str(proxy.ca_cert))
            with (
                sdk(old + "/v1", proxy=proxy.url, verify=verify) as client,
                pytest.raises(openai.APIStatusError) as raised,
            ):
                client.chat.completions.create(model=MODEL, messages=ASK)
            post, get = proxy.records(2)
    assert raised.value.status_code == 405
    assert (post["request"]["method"], post["response"]["status"]) == ("POST", 301)
    assert post["request"]["url"].startswith("http://127.0.0.1:")
    assert (get["request"]["method"], get["response"]["status"]) == ("GET", 405)
    assert get["request"]["url"] == f"https://127.0.0.1:{tls.port}/v1/chat/completions"

    df = only_chain(diagnose([post, get]))
    assert set(df) == {"redirect_method_change"}  # the 405 is explained
    row = df["redirect_method_change"]
    assert row["exchange_ids"] == [post["id"], get["id"]]
    assert "GET" in row["summary"] and f"https://127.0.0.1:{tls.port}" in row["remedy"]


def test_doubled_v1_in_the_base_url(mitmdump: Any) -> None:
    with standin("openai") as url:
        m = mitmdump([f"reverse:{url}"])
        with sdk(m.url + "/v1/v1") as client, pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=MODEL, messages=ASK)
        (rec,) = m.records(1)
    assert rec["request"]["path"] == "/v1/v1/chat/completions"
    df = only_chain(diagnose([rec]))
    assert "path_prefix" in df and "model_not_found" not in df
    assert "drop one /v1" in df["path_prefix"]["remedy"]


def test_stream_answered_with_json(mitmdump: Any) -> None:
    with standin("openai") as url:
        m = mitmdump([f"reverse:{url}"])
        with sdk(m.url + "/v1") as client:
            stream = client.chat.completions.create(
                model="fault-json-stream", messages=ASK, stream=True
            )
            assert list(stream) == []  # the SDK yields nothing and raises nothing
        (rec,) = m.records(1)
    assert rec["tags"]["stream"] and rec["response"]["events"] is None
    df = only_chain(diagnose([rec]))
    assert set(df) == {"stream_not_honoured"}
    assert "application/json" in df["stream_not_honoured"]["summary"]


def test_wirediff_diagnose_prints_and_dumps_json(
    mitmdump: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with standin("ollama") as url:
        m = mitmdump([f"reverse:{url}"])
        with sdk(m.url + "/v1") as client:
            client.chat.completions.create(model="llama3.2", messages=ASK)  # healthy
            with pytest.raises(openai.NotFoundError):
                client.chat.completions.create(model=MODEL, messages=ASK)  # not pulled
        m.records(2)
    assert main(["diagnose", str(m.capture_file)]) == 0
    text = capsys.readouterr().out
    assert "model_not_found" in text and "ollama pull gpt-4o-mini" in text
    assert text.endswith("1 diagnosis in 1 chain\n")

    assert main(["diagnose", "--json", str(m.capture_file)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["code"], row["provider"], row["recovered"]) == ("model_not_found", "ollama", False)
    assert KEY not in json.dumps(row)


@pytest.fixture
def baseline(mitmdump: Any) -> Path:
    """A small session against the openai stand-in: chat, chat stream, Responses."""
    with standin("openai") as url:
        m = mitmdump([f"reverse:{url}"], label="openai")
        with sdk(m.url + "/v1") as client:
            client.chat.completions.create(model=MODEL, messages=ASK)
            for _ in client.chat.completions.create(model=MODEL, messages=ASK, stream=True):
                pass
            client.responses.create(model=MODEL, input="Say hello.")
        m.records(3)
    return Path(m.capture_file)


def replay(capture: Path, profile: str, model: str, tmp_path: Path, label: str = "") -> Path:
    out = tmp_path / f"replay.{profile}.jsonl"
    with standin(profile) as url:
        argv = [str(capture), "--to", url + "/v1", "--label", label or profile, "-o", str(out)]
        assert main_replay([*argv, "--model-map", f"{MODEL}={model}"]) == 0
    return out


def test_wirediff_check_exit_codes(
    baseline: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = replay(baseline, "openai", MODEL, tmp_path, label="openai-again")
    ollama = replay(baseline, "ollama", "llama3.2", tmp_path)
    capsys.readouterr()

    assert main(["check", str(baseline), str(same)]) == 0
    out = capsys.readouterr().out
    assert "3 replayed exchanges compared" in out and "compatible" in out

    # Ollama's answers deviate from the spec (no `refusal`, no `logprobs`…) but nothing
    # breaks the SDK: it passes the default gate (breaking), not a stricter one
    assert main(["check", str(baseline), str(ollama)]) == 0
    out = capsys.readouterr().out
    assert "ok    ollama       chat.completions         compatible with deviations" in out
    assert main(["check", str(baseline), str(ollama), "--fail-on-severity", "deviation"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  ollama" in out and "not compatible: ollama chat.completions" in out
    # a kind named fails the gate whatever its severity: its missing headers are cosmetic
    assert main(["check", str(baseline), str(ollama), "--fail-on", "header"]) == 1
    capsys.readouterr()
    # the openai stand-in's answers conform to every reference
    assert main(["check", str(baseline), str(same), "--fail-on", "conformance,header"]) == 0
    capsys.readouterr()

    assert main(["check", str(baseline), str(same), "--fail-on", "status,bogus"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("wirediff: error: --fail-on: unknown kind bogus") and "\n" not in err

    # a candidate that pairs with nothing of the baseline is bad input, not "compatible":
    # a copy of it (the same exchanges, read once), or the baseline itself, named as such
    copy = baseline.with_name("copy.jsonl")
    copy.write_bytes(baseline.read_bytes())
    assert main(["check", str(baseline), str(copy)]) == 2
    assert f"{copy}: every exchange repeats one read before, by its id" in capsys.readouterr().err
    assert main(["check", str(baseline), str(baseline)]) == 2
    assert "the baseline itself" in capsys.readouterr().err
