"""Fixtures: the real trainlog server binary with a temporary data folder, and a client pointed at it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from helpers import REPO, Server


@pytest.fixture(scope="session")
def slurm_conf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A single-node Slurm cluster on 127.0.0.1 with two fake GPUs (installed and started here)."""
    folder = tmp_path_factory.mktemp("slurm")
    started = subprocess.run([str(REPO / "tests/slurm/start-local-slurm.sh"), str(folder)], capture_output=True, text=True, timeout=900)
    assert started.returncode == 0, started.stdout + started.stderr
    yield str(folder / "slurm.conf")
    subprocess.run([str(REPO / "tests/slurm/stop-local-slurm.sh"), str(folder)], timeout=60)


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


@pytest.fixture(scope="session")
def standin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding the stand-in libnvidia-ml.so.1: scripts/test.sh's build, else one built here."""
    given = os.environ.get("TRAINLOG_NVML_STANDIN_DIR")
    if given:
        folder = Path(given)
    else:
        folder = tmp_path_factory.mktemp("nvml-standin")
        source = REPO / "tests/nvml-standin/nvml_standin.c"
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-O2", "-o", str(folder / "libnvidia-ml.so.1"), str(source)],
            check=True,
            timeout=120,
        )
    assert (folder / "libnvidia-ml.so.1").is_file(), folder
    return folder
