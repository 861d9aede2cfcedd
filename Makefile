# One entry point for people and CI. `make demo` and `make test` set themselves up.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test check lint typecheck imports peers clients browser bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	rm -f $(VENV)/.installed-*; touch $@

demo: $(STAMP)
	$(VENV)/bin/wirediff demo --out wirediff-demo

# Third-party OpenAI-compatible servers (LiteLLM proxy, fakellm), each in its own venv.
peers:
	scripts/install-peers.sh

# Real OpenAI-API clients (npm openai and @openai/codex with the machine's Node.js and npm;
# LangChain and LlamaIndex each in its own venv).
clients:
	scripts/install-clients.sh

# Debian's Chromium for the report's browser test (never a downloaded browser build).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Everything: unit, e2e (real mitmdump + openai SDK), peers, clients and the browser test.
# Installed means required: a missing peer, client or Chromium fails instead of skipping.
# The peers, the clients and Chromium install side by side (a build and downloads); each
# skips what is already installed, so a later run goes straight to the tests.
# The tests run in TEST_WORKERS processes (pytest-xdist): most of them wait on sockets and
# child processes, so one more worker than cores keeps the cores busy.
TEST_WORKERS ?= 3
test: $(STAMP)
	@$(MAKE) --no-print-directory -j3 peers clients browser
	WIREDIFF_REQUIRED=1 $(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist worksteal

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The layers and the addon's pandas-free import closure (pyproject.toml, [tool.importlinter]).
imports: $(STAMP)
	$(VENV)/bin/lint-imports

check: lint typecheck imports

bench: $(STAMP)
	$(PY) bench/mitmdump_startup.py
	$(PY) bench/capture_overhead.py
	$(PY) bench/long_event.py
	$(PY) bench/replay_throughput.py
	$(PY) bench/shadow_latency.py
	$(PY) bench/analysis_scale.py
	$(PY) bench/probe_speed.py

clean:
	rm -rf $(VENV) .peers .clients wirediff-demo captures
