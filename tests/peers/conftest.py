"""The `peers` tier: real third-party OpenAI-compatible servers on loopback.

They are installed by `scripts/install-peers.sh` into their own virtualenvs under `.peers/`
(their pins conflict with mitmproxy's); without them the tier skips, telling you to run it
(with `WIREDIFF_REQUIRED=1`, as `make test` sets it, it fails instead).

Peers take seconds to start, so one of each serves the whole session:

    client ─► A ─► LiteLLM ─► B ─► stand-in (openai profile, answers only key K2)
              └── one mitmdump, two reverse listeners: both hops land in one capture

`litellm.two_hop` is that mitmdump for models that carry the gateway's own upstream key;
`auth_dropped_capture` is a second one holding one call through a model configured without
an upstream key, which the stand-in rejects: the fixture for the `auth_dropped_by_hop`
diagnosis. Single-hop tests put the per-test `mitmdump` factory of tests/conftest.py in
front of `litellm.url` or `fakellm.url`.

llama-cpp-python serves a tiny random-weight model written at the start of the session
(`tiny_gguf.py`, no download), which answers every prompt with "Hello tiny world!";
open-responses-server (ORS) serves the Responses API over the llama server's chat
completions, and two more ORS instances have a broken upstream: none listening, and one
that rejects their key.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.conftest import CAPTURE_ADDON, MITMDUMP, Mitmdump, missing, wait_port
from wirediff._types import Record
from wirediff.backends.standin import standin
from wirediff.cli.netutil import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PEERS_DIR = Path(os.environ.get("WIREDIFF_PEERS_DIR") or ROOT / ".peers")
INSTALL_HINT = "run scripts/install-peers.sh"

LITELLM_CONFIG = HERE / "litellm.yaml"
FAKELLM_CONFIG = HERE / "fakellm.yaml"
LITELLM_MODELS = ("mock-chat", "standin-chat", "hop-chat", "hop-openai", "hop-nokey")
CLIENT_KEY = "sk-wirediff-K1-client-5e0c2f7a91d3"
"""K1: what the client sends to LiteLLM (its master key)."""
UPSTREAM_KEY = "sk-wirediff-K2-upstream-b84d16c9e2a7"
"""K2: what LiteLLM sends upstream, and the only key the upstream stand-in accepts."""
UPSTREAM_MODEL = "gpt-4o-mini"  # served by the openai stand-in
LITELLM_PLACEHOLDER_KEY = "fake-api-key"  # hosted_vllm/ sends this when it has no key
DROPPED_MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "auth-dropped: does my key reach the upstream?"}
]
START_TIMEOUT = {"litellm": 120.0, "fakellm": 30.0, "llama": 60.0, "ors": 60.0}
TINY_ANSWER = "Hello tiny world!"  # what the tiny model says to any prompt
LLAMA_CTX = 2048
"""`--n_ctx` of the llama peer: the tiny model's trained context, `N_CTX_TRAIN` of
tiny_gguf.py. Its tokenizer makes a token of each byte, so a request with tools (a long
template) or a history through ORS takes hundreds. A streamed prompt past the context gets
an empty stream, then the server closes the connection: ORS's next request on it, from its
pool, would get no answer."""
LLAMA_KEY = "sk-wirediff-llama-3e8a61c0"
"""The key the keyed llama server accepts (`--api_key`)."""
ORS_KEY = "sk-wirediff-ors-upstream-9b2d"
"""The key ORS sends upstream (`OPENAI_API_KEY`): the keyed llama server rejects it."""


def peer_command(name: str, command: str | None = None) -> Path:
    """The peer's executable in `.peers/<name>/bin/`, or skip (fail when required)."""
    path = PEERS_DIR / name / "bin" / (command or name)
    if not os.access(path, os.X_OK):
        missing(f"{name} is not installed in {PEERS_DIR}: {INSTALL_HINT}")
    return path


def free_ports(n: int) -> list[int]:
    """Pick `n` distinct loopback ports, each free when picked (`free_port`)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def loopback_env(**extra: str) -> dict[str, str]:
    """This environment without proxy settings (peers talk to 127.0.0.1 only)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
    }
    return {**env, "NO_PROXY": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1", **extra}


def http_get(
    url: str, headers: dict[str, str] | None = None, timeout: float = 2.0
) -> tuple[int, bytes] | None:
    """`(status, body)` of a GET, or None while nothing answers."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r:
            return int(r.status), bytes(r.read())
    except urllib.error.HTTPError as e:
        with e:
            return int(e.code), bytes(e.read())
    except OSError:
        return None


def sdk(base_url: str, api_key: str = CLIENT_KEY) -> openai.OpenAI:
    """The real openai SDK, without retries (every exchange on the wire is one call)."""
    return openai.OpenAI(
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        timeout=30.0,
        http_client=openai.DefaultHttpxClient(trust_env=False),
    )


@dataclass
class PeerProcess:
    """A peer server started by this tier (its own process group, log in `log`)."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_bytes()[-n:].decode("utf-8", "replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start_peer(
    name: str,
    argv: list[str],
    *,
    port: int,
    workdir: Path,
    env: dict[str, str],
    ready: Callable[[PeerProcess], bool],
) -> PeerProcess:
    """Start a peer and poll `ready` until it holds, the process dies, or the deadline."""
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=workdir,
            start_new_session=True,
        )
    peer = PeerProcess(name, proc, port, log)
    timeout = START_TIMEOUT[name]
    deadline = time.monotonic() + timeout
    try:
        while not ready(peer):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with status {proc.returncode} before it was ready:\n"
                    + peer.log_tail()
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not ready after {timeout:.0f}s:\n{peer.log_tail()}")
            time.sleep(0.1)
    except BaseException:
        peer.stop()
        raise
    return peer


def spawn_capture(
    modes: list[tuple[str, int]], workdir: Path, session: str, label: str = ""
) -> Mitmdump:
    """Start `mitmdump -s addons/capture.py` with one listener per `(mode, port)`; see
    `await_capture`. Without `label` each record is labelled with its upstream host, so
    each hop names its own backend.

    The tier's long-lived captures need their ports before LiteLLM starts (its config
    names them), so unlike the `mitmdump` factory of tests/conftest.py the caller picks
    the ports.
    """
    capture_dir, confdir = workdir / "captures", workdir / f"mitmconf-{session}"
    log = workdir / f"mitmdump-{session}.log"
    cmd = [MITMDUMP, "-q", "--listen-host", "127.0.0.1", "--set", f"confdir={confdir}"]
    for mode, port in modes:
        cmd += ["--mode", f"{mode}@{port}"]
    cmd += ["-s", CAPTURE_ADDON, "--set", f"capture_dir={capture_dir}"]
    cmd += ["--set", f"capture_session={session}"]
    if label:
        cmd += ["--set", f"capture_label={label}"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=loopback_env()
        )
    return Mitmdump(proc, [p for _, p in modes], capture_dir, session, confdir, log)


def await_capture(m: Mitmdump) -> Mitmdump:
    """Wait until every listener of `m` accepts (stop it and fail with its log if not)."""
    try:
        for port in m.ports:
            wait_port(port, 30, m.proc)
    except Exception:
        m.stop()
        raise RuntimeError(f"mitmdump failed to start: {m.log.read_text()[-2000:]}") from None
    return m


def listener_url(m: Mitmdump, i: int) -> str:
    return f"http://127.0.0.1:{m.ports[i]}"


@dataclass
class LiteLLM:
    """The session's LiteLLM proxy and the two captures whose second hop it calls through."""

    peer: PeerProcess
    upstream: str
    two_hop: Mitmdump
    dropped: Mitmdump

    @property
    def url(self) -> str:
        return self.peer.url

    @functools.cached_property
    def version(self) -> str:
        """The installed litellm distribution's version (what `x-litellm-version` says)."""
        out = subprocess.run(
            [str(PEERS_DIR / "litellm" / "bin" / "python"), "-c",
             "import importlib.metadata as m; print(m.version('litellm'))"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return out.stdout.strip()


def _litellm_ready(peer: PeerProcess) -> bool:
    got = http_get(f"{peer.url}/v1/models", {"Authorization": f"Bearer {CLIENT_KEY}"})
    if got is None or got[0] != 200:
        return False
    ids = {m.get("id") for m in json.loads(got[1]).get("data", [])}
    return ids >= set(LITELLM_MODELS)


@pytest.fixture(scope="session")
def upstream() -> Iterator[str]:
    """The stand-in behind LiteLLM: openai profile, accepts only UPSTREAM_KEY."""
    with standin("openai", delay=0.0, api_key=UPSTREAM_KEY) as url:
        yield url


@pytest.fixture(scope="session")
def litellm(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiteLLM]:
    exe = peer_command("litellm")
    upstream: str = request.getfixturevalue("upstream")
    work = tmp_path_factory.mktemp("litellm")
    port, hop_a, hop_b, drop_a, drop_b = free_ports(5)
    gateway, inner = f"reverse:http://127.0.0.1:{port}", f"reverse:{upstream}"
    with contextlib.ExitStack() as stack:
        # The captures start while LiteLLM does: it calls its upstreams only when asked to.
        two_hop = spawn_capture([(gateway, hop_a), (inner, hop_b)], work, "two-hop")
        stack.callback(two_hop.stop)
        dropped = spawn_capture([(gateway, drop_a), (inner, drop_b)], work, "auth-dropped")
        stack.callback(dropped.stop)
        env = loopback_env(
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            WIREDIFF_LITELLM_KEY=CLIENT_KEY,
            WIREDIFF_UPSTREAM_KEY=UPSTREAM_KEY,
            WIREDIFF_STANDIN_BASE=f"{upstream}/v1",
            WIREDIFF_HOP_BASE=f"{listener_url(two_hop, 1)}/v1",
            WIREDIFF_DROP_BASE=f"{listener_url(dropped, 1)}/v1",
        )
        argv = [str(exe), "--config", str(LITELLM_CONFIG), "--host", "127.0.0.1"]
        argv += ["--port", str(port)]
        peer = start_peer("litellm", argv, port=port, workdir=work, env=env, ready=_litellm_ready)
        stack.callback(peer.stop)
        await_capture(two_hop)
        await_capture(dropped)
        yield LiteLLM(peer, upstream, two_hop, dropped)


@pytest.fixture(scope="session")
def auth_dropped_capture(litellm: LiteLLM) -> Path:
    """A `wirediff/1` capture of one chat call whose key a gateway hop did not pass on.

    The client sends K1 to LiteLLM (listener A), which accepts it and forwards the call to
    the stand-in (listener B) for a model that has no upstream key configured: LiteLLM
    sends its placeholder `Bearer fake-api-key`, the stand-in answers 401 invalid_api_key,
    and LiteLLM relays a 401 to the client. Exactly two records, both complete.
    """
    m = litellm.dropped
    with sdk(listener_url(m, 0) + "/v1") as client, pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="hop-nokey", messages=DROPPED_MESSAGES)
    m.records(2)
    return m.capture_file


@dataclass
class Fakellm:
    peer: PeerProcess

    @property
    def url(self) -> str:
        return self.peer.url


@pytest.fixture(scope="session")
def fakellm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fakellm]:
    exe = peer_command("fakellm")
    work = tmp_path_factory.mktemp("fakellm")
    (port,) = free_ports(1)
    argv = [str(exe), "serve", "--config", str(FAKELLM_CONFIG), "--host", "127.0.0.1"]
    argv += ["--port", str(port)]

    def ready(peer: PeerProcess) -> bool:
        got = http_get(f"{peer.url}/_fakellm/stats")
        return got is not None and got[0] == 200

    peer = start_peer("fakellm", argv, port=port, workdir=work, env=loopback_env(), ready=ready)
    try:
        yield Fakellm(peer)
    finally:
        peer.stop()


def by_listener(records: list[Record], m: Mitmdump, i: int) -> list[Record]:
    """The records that came through listener `i` of `m` (its `--mode` spec + port)."""
    port = f"@{m.ports[i]}"
    return [r for r in records if str(r["listener"]).endswith(port)]


@dataclass
class Llama:
    """The session's llama-cpp-python servers on the tiny model: `peer` as is (no key, no
    embeddings), `keyed` with `--api_key LLAMA_KEY`."""

    peer: PeerProcess
    keyed: PeerProcess
    model_path: Path

    @property
    def url(self) -> str:
        return self.peer.url


def _models_answered(peer: PeerProcess) -> bool:
    """Any answer to `GET /v1/models` (the keyed server's is a 401)."""
    return http_get(f"{peer.url}/v1/models") is not None


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Llama]:
    python = peer_command("llama", "python")
    work = tmp_path_factory.mktemp("llama")
    model = work / "tiny.gguf"
    subprocess.run(
        [str(python), str(HERE / "tiny_gguf.py"), str(model)],
        check=True, capture_output=True, env=loopback_env(),
    )  # fmt: skip
    port, keyed_port = free_ports(2)
    argv = [str(python), "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1"]
    # By default a request that arrives while another streams cuts that stream short, and
    # whether its `[DONE]` still goes out is a race (sse-starlette's task group): requests wait
    # their turn instead, so every stream of the probe's concurrent requests ends as it should.
    argv += ["--n_ctx", str(LLAMA_CTX), "--interrupt_requests", "False"]
    with contextlib.ExitStack() as stack:
        env = loopback_env()
        peer = start_peer("llama", [*argv, "--port", str(port)], port=port, workdir=work,
                          env=env, ready=_models_answered)  # fmt: skip
        stack.callback(peer.stop)
        keyed_argv = [*argv, "--port", str(keyed_port), "--api_key", LLAMA_KEY]
        keyed_dir = work / "keyed"
        keyed_dir.mkdir()
        keyed = start_peer("llama", keyed_argv, port=keyed_port, workdir=keyed_dir, env=env,
                           ready=_models_answered)  # fmt: skip
        stack.callback(keyed.stop)
        yield Llama(peer, keyed, model)


@dataclass
class Ors:
    """The session's open-responses-server instances: `peer` over the llama server,
    `no_upstream` over a port nothing listens on, `rejected` over the keyed llama server
    (which refuses ORS's key)."""

    peer: PeerProcess
    no_upstream: PeerProcess
    rejected: PeerProcess

    @property
    def url(self) -> str:
        return self.peer.url


def start_ors(name: str, upstream: str, work: Path) -> PeerProcess:
    """ORS on `upstream` (its base URL, without /v1); it writes ./log/ in its directory."""
    exe = peer_command("ors", "uvicorn")
    (port,) = free_ports(1)
    workdir = work / name
    workdir.mkdir()
    env = loopback_env(OPENAI_BASE_URL_INTERNAL=upstream, OPENAI_API_KEY=ORS_KEY)
    argv = [str(exe), "open_responses_server.server_entrypoint:app", "--host", "127.0.0.1"]
    argv += ["--port", str(port)]

    def ready(peer: PeerProcess) -> bool:
        got = http_get(f"{peer.url}/health")
        return got is not None and got[0] == 200

    return start_peer("ors", argv, port=port, workdir=workdir, env=env, ready=ready)


@pytest.fixture(scope="session")
def ors(llama: Llama, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ors]:
    peer_command("ors", "uvicorn")
    work = tmp_path_factory.mktemp("ors")
    (nobody,) = free_ports(1)
    with contextlib.ExitStack() as stack:
        started = []
        for name, upstream in (
            ("ors", llama.url),
            ("ors-no-upstream", f"http://127.0.0.1:{nobody}"),
            ("ors-rejected", llama.keyed.url),
        ):
            peer = start_ors(name, upstream, work)
            stack.callback(peer.stop)
            started.append(peer)
        yield Ors(*started)
