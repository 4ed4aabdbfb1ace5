"""Fixtures: the real trainlog server binary with a temporary data folder, and a client pointed at it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from helpers import Server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path / "server-data")
    s.start()
    yield s
    s.stop()


@pytest.fixture
def client_env(server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Points the client at the test server, with its own spool folder."""
    env = {"TRAINLOG_SERVER": server.url, "TRAINLOG_DIR": str(tmp_path / "client-state")}
    for key in list(os.environ):
        if key.startswith("TRAINLOG_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env
