"""Unit tests start no process: the impact harness measures with openai-python alone (the
Node SDK's process is the e2e and clients tiers')."""

from __future__ import annotations

import pytest

from wirediff.analysis.comparison.clients.node import NODE_SDK_ENV


@pytest.fixture(autouse=True)
def no_node_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NODE_SDK_ENV, "off")
