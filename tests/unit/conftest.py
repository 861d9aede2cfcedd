"""Unit tests run the engine's steps over many small pieces and buckets: what walks the
index a piece at a time (`Columns.pieces`) or a bucket at a time (`Buckets`) is checked
across their bounds on every fixture, not only on a million rows. They start no process:
the impact harness measures with openai-python alone (the Node SDK's process is the e2e and
clients tiers')."""

from __future__ import annotations

import pytest

from wirediff.analysis.comparison.clients.node import NODE_SDK_ENV
from wirediff.engine import columns

SMALL_PIECES = 5


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columns, "PIECE_ROWS", SMALL_PIECES)


@pytest.fixture(autouse=True)
def no_node_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NODE_SDK_ENV, "off")
