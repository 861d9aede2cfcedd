"""Unit tests start no process: the impact harness measures with openai-python alone (the
Node SDK's process is the e2e and clients tiers')."""

from __future__ import annotations

import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Callable
from typing import NoReturn

import pytest

from wirediff.analysis.comparison.clients.node import NODE_SDK_ENV


@pytest.fixture(autouse=True)
def no_node_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NODE_SDK_ENV, "off")


def _refuse(what: str) -> Callable[..., NoReturn]:
    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(f"a unit test {what}: it belongs in tests/e2e")

    return refuse


@pytest.fixture(autouse=True)
def no_process_socket_or_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a unit test that starts a process, opens a network socket or a Dask cluster.

    The unit tier stays fast and runs anywhere because of it; such tests go to tests/e2e.
    """
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("starts a process"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", _refuse("starts a process"))
    monkeypatch.setattr(os, "fork", _refuse("forks"))
    monkeypatch.setattr(socket.socket, "bind", _refuse("binds a socket"))
    monkeypatch.setattr(socket.socket, "connect", _refuse("connects a socket"))
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse("connects a socket"))
