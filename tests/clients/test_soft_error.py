"""What each real client does with a soft error — LM Studio's 200 `{"error": "Unexpected
endpoint or method. (POST /v1/responses)"}` from the `lmstudio` stand-in — is what
`wirediff/profiles/clients.yaml` says under `soft_error_200`, call by call: the
`soft_error_200` diagnosis quotes it, so it must be what the clients do, measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.clients.conftest import client_dir, client_env, run_client
from wirediff.backends.standin import standin
from wirediff.profiles import load_clients

pytestmark = pytest.mark.clients

HERE = Path(__file__).resolve().parent / "soft_error"
MODEL = "qwen2.5-7b-instruct"  # served by the lmstudio stand-in (its chat completions)
KEY = "sk-clients-SOFT-CANARY-0a4c"
PYTHON = {
    "openai-python": None,
    "openai-agents": "agents",
    "langchain": "langchain",
    "llamaindex": "llamaindex",
    "pydantic-ai": "pydantic-ai",
}
"""Python clients: the `.clients/` directory each runs in (None: this project's venv)."""
NODE = {"openai-node": "node", "ai-sdk": "vercel"}


def measured(name: str, tmp_path: Path) -> dict[str, str]:
    """What the client's calls did, as `raises X` / `returns Y`."""
    if name in NODE:
        install = client_dir(NODE[name], "node_modules")
        app = tmp_path / "node_clients.mjs"
        app.write_text((HERE / "node_clients.mjs").read_text(encoding="utf-8"), encoding="utf-8")
        (tmp_path / "node_modules").symlink_to(install / "node_modules")
        argv = ["node", str(app)]
    else:
        where = PYTHON[name]
        exe = (
            Path(sys.executable)
            if where is None
            else client_dir(where, "bin/python") / "bin/python"
        )
        argv = [str(exe), str(HERE / "python_clients.py")]
    with standin("lmstudio") as url:
        env = client_env(BASE=url + "/v1", MODEL=MODEL, OPENAI_API_KEY=KEY, CLIENT=name)
        out = run_client(argv, cwd=tmp_path, env=env)
    got = json.loads(out.strip().splitlines()[-1])
    assert isinstance(got, dict) and got
    return {str(k): str(v) for k, v in got.items()}


@pytest.mark.parametrize("name", [*PYTHON, *NODE])
def test_what_each_client_does_with_a_soft_error(name: str, tmp_path: Path) -> None:
    said = load_clients()[name]["soft_error_200"]
    assert measured(name, tmp_path) == said
