"""`wirediff capture` as a person runs it, and the README's forward-mode recipe for an
upstream whose certificate a private CA signed."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import WirediffCapture
from tests.readme_blocks import readme_command
from wirediff.backends.standin import standin
from wirediff.cli.capture_command import main_capture, new_session

pytestmark = pytest.mark.e2e

KEY = "sk-e2e-CAPTURE-CANARY-a40d7c"
TEAM_KEY = "team-CANARY-19be5f"


def test_prints_where_to_point_the_client_records_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    with standin("openai") as url:
        cap = WirediffCapture.start(
            ["--to", url + "/v1", "--label", "openai", "--port", "0", "--dir", "caps",
             "--", "--set", "capture_redact=x-team-key"],
            tmp_path / "out.txt",
            {**os.environ},
            cwd=tmp_path,
        )  # fmt: skip
        try:
            assert cap.base_url.startswith("http://127.0.0.1:") and cap.base_url.endswith("/v1")
            assert cap.capture_file.is_absolute() and cap.capture_file.suffix == ".jsonl"
            with openai.OpenAI(
                base_url=cap.base_url,
                api_key=KEY,
                max_retries=0,
                default_headers={"x-team-key": TEAM_KEY},
                http_client=openai.DefaultHttpxClient(trust_env=False),
            ) as client:
                client.models.list()
                client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
                )
                list(
                    client.chat.completions.create(
                        model="gpt-4o-mini",
                        messages=[{"role": "user", "content": "hi"}],
                        stream=True,
                    )
                )
            records = cap.stop()
        finally:
            cap.kill()
    port = int(cap.proxy_url.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass  # mitmdump is gone with it
    assert cap.capture_file.parent == tmp_path / "caps"  # --dir caps, absolute
    assert [r["tags"]["family"] for r in records] == ["models", *["chat.completions"] * 2]
    assert {r["label"] for r in records} == {"openai"}
    assert {r["session"] for r in records} == {cap.capture_file.stem}
    assert f"stopped: 3 exchanges recorded; {cap.capture_file} holds 3 exchanges" in cap.printed
    assert "interrupted" not in cap.printed  # Ctrl-C is how a capture ends
    # mitmdump's own line for the stream: it passed through, nothing is missing
    assert "(content missing)" not in cap.printed and "(streamed)" in cap.printed
    data = cap.capture_file.read_bytes()
    assert KEY.encode() not in data and TEAM_KEY.encode() not in data  # `--` args reached it


def test_ctrl_c_with_a_client_connected_counts_every_part_and_prints_no_traceback(
    tmp_path: Path,
) -> None:
    with standin("openai") as url:
        cap = WirediffCapture.start(
            ["--to", url + "/v1", "--port", "0", "--dir", str(tmp_path),
             "--", "--set", "capture_rotate=1KB"],
            tmp_path / "out.txt",
            {**os.environ},
        )  # fmt: skip
        try:
            with openai.OpenAI(
                base_url=cap.base_url,
                api_key=KEY,
                max_retries=0,
                http_client=openai.DefaultHttpxClient(trust_env=False),
            ) as client:
                for _ in range(3):
                    client.models.list()
                records = cap.stop()  # the client's keep-alive connection still open
        finally:
            cap.kill()
    parts = sorted(tmp_path.glob(f"{cap.capture_file.stem}*.jsonl"))
    assert len(parts) == 3 and len(records) == 3  # a part each: every record is over 1 KB
    assert (
        f"stopped: 3 exchanges recorded; {cap.capture_file} and its 2 more parts hold 3 exchanges"
        in cap.printed
    )
    assert "Traceback" not in cap.printed and "CancelledError" not in cap.printed


def test_a_capture_stopped_before_any_exchange_says_it_wrote_nothing(tmp_path: Path) -> None:
    with standin("openai") as url:
        cap = WirediffCapture.start(
            ["--to", url + "/v1", "--port", "0", "--dir", str(tmp_path)],
            tmp_path / "out.txt",
            {**os.environ},
        )
        try:
            assert cap.stop() == []
        finally:
            cap.kill()
    assert not cap.capture_file.exists()
    said = f"stopped: 0 exchanges recorded; {cap.capture_file} not written: no exchange came"
    assert said in cap.printed


def test_each_run_is_a_new_session(tmp_path: Path) -> None:
    runs = []
    with standin("openai") as url:
        for n in range(2):
            cap = WirediffCapture.start(
                ["--to", url, "--port", "0", "--dir", str(tmp_path)],
                tmp_path / f"out{n}.txt",
                {**os.environ},
            )
            try:
                assert cap.base_url.endswith("/v1")  # --to without a path: /v1 for the client
                with openai.OpenAI(base_url=cap.base_url, api_key=KEY, max_retries=0) as client:
                    client.models.list()
                runs.append((cap.capture_file, cap.stop()))
            finally:
                cap.kill()
    (first, [a]), (second, [b]) = runs
    assert first != second and first.parent == second.parent == tmp_path
    assert (a["session"], b["session"]) == (first.stem, second.stem)


def test_a_default_session_taken_in_the_same_second_gets_a_suffix(tmp_path: Path) -> None:
    now = 1_796_000_000.0
    assert new_session(tmp_path, now) == "20261130T005320Z"
    (tmp_path / "20261130T005320Z.jsonl").touch()
    (tmp_path / "20261130T005320Z-2.jsonl").touch()
    assert new_session(tmp_path, now) == "20261130T005320Z-3"


def test_a_port_in_use_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main_capture(["--to", "http://127.0.0.1:9/v1", "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2 and f"port {port} is not free" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--mode", "bogus:x"], "wirediff: error: mitmdump did not start"),
        (
            ["--set", "capture_body_cap=abc"],
            "wirediff: error: --set capture_body_cap must be a whole number of bytes, not 'abc'",
        ),
    ],
    ids=["mitmdump refuses an argument", "the addon's rule refuses a value, before mitmdump"],
)
def test_a_proxy_that_did_not_start_is_bad_usage_and_prints_no_banner(
    tmp_path: Path, extra: list[str], said: str
) -> None:
    """mitmdump listens before it loads the addon: no base URL is printed until the addon
    records, and none when it refused to. A value the addon would refuse is refused first,
    in one line, without mitmdump's."""
    argv = ["--to", "http://127.0.0.1:9/v1", "--port", "0", "--dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "wirediff", "capture", *argv, "--", *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count(said) == 1
    if "mitmdump did not start" in said:
        assert "bogus:x" in done.stdout + done.stderr  # mitmdump's own words, on the terminal
    else:
        assert done.stdout + done.stderr == said + "\n"
    assert "client base URL" not in done.stdout, done.stdout


def test_forward_mode_to_an_upstream_with_a_private_ca(mitmdump: Any, tmp_path: Path) -> None:
    """Without the upstream's CA mitmproxy answers 502; with the README's option it passes."""
    argv = readme_command("forward-private-ca")
    (trusted,) = [a for a in argv if a.startswith("ssl_verify_upstream_trusted_ca=")]
    option = trusted.split("=", 1)[0]
    with standin("openai") as backend:
        tls = mitmdump([f"reverse:{backend}"], addon=False, confdir=tmp_path / "private-ca")
        upstream_ca = tmp_path / "private-ca" / "mitmproxy-ca-cert.pem"
        plain = mitmdump(["regular"], session="plain")
        with_ca = mitmdump(["regular"], session="ca", extra=["--set", f"{option}={upstream_ca}"])
        outcomes: list[object] = []
        for proxy in (plain, with_ca):
            http_client = openai.DefaultHttpxClient(
                proxy=proxy.url,
                verify=ssl.create_default_context(cafile=proxy.ca_cert),
                trust_env=False,
            )
            with openai.OpenAI(
                base_url=f"https://127.0.0.1:{tls.port}/v1",
                api_key=KEY,
                max_retries=0,
                http_client=http_client,
            ) as client:
                try:
                    outcomes.append(len(client.models.list().data))
                except openai.APIStatusError as e:
                    outcomes.append((e.status_code, "Certificate verify failed" in e.message))
    assert outcomes == [(502, True), 2]
    (rec,) = with_ca.records(1)
    assert rec["response"]["status"] == 200 and rec["listener"].startswith("regular")
