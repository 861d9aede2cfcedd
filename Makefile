# One entry point for people and CI. `make demo` and `make test` set themselves up.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test check lint typecheck peers bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	rm -f $(VENV)/.installed-*; touch $@

demo: $(STAMP)
	$(VENV)/bin/wirediff demo --out wirediff-demo

test: $(STAMP)
	$(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

check: lint typecheck

clean:
	rm -rf $(VENV) wirediff-demo captures
