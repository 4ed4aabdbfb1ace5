"""Pytest plugin: MLflow's REST test modules, served by trainlog instead of MLflow's server."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_RE = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30

# Tests left out on purpose, each with its reason (matched against the test's node id).
DESELECT = {
    "[file]": "MLflow's file backend: trainlog is one backend, run once (the sqlalchemy instance)",
    "[file-": "MLflow's file backend: trainlog is one backend, run once (the sqlalchemy instance)",
    "-file]": "MLflow's file backend: trainlog is one backend, run once (the sqlalchemy instance)",
}


def _binary() -> Path:
    env = os.environ.get("TRAINLOG_BIN")
    return Path(env) if env else REPO_ROOT / "target" / "release" / "trainlog"


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


class Trainlog:
    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="trainlog-mlflow-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
        for attempt in range(3):
            self.process = subprocess.Popen(
                [str(_binary()), "server", "--host", "127.0.0.1", "--port", "0", "--data", "data"],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            lines: queue.Queue = queue.Queue()
            threading.Thread(target=_pump, args=(self.process.stdout, lines), daemon=True).start()
            self.url = self._await_ready(lines)
            if self.url:
                return
            self.process.kill()
            self.process.wait()
            time.sleep(2)
        raise RuntimeError("trainlog did not start")

    def _await_ready(self, lines: queue.Queue) -> str | None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:
                return None
            if m := READY_RE.search(line):
                return m.group(1)
        return None

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


class TrainlogServerThread:
    """Stands in for MLflow's ServerThread(app, port): a context manager yielding the URL."""

    def __init__(self, *args, **kwargs) -> None:
        self.server: Trainlog | None = None

    def __enter__(self) -> str:
        self.server = Trainlog()
        return self.server.url

    def __exit__(self, *exc) -> None:
        self.server.stop()


@contextlib.contextmanager
def trainlog_init_server(*args, **kwargs):
    """Stands in for MLflow's _init_server(backend_uri, root_artifact_uri, ...)."""
    server = Trainlog()
    try:
        yield server.url
    finally:
        server.stop()


def _install_shims() -> None:
    if "mlflow.utils.time_utils" not in sys.modules:
        import mlflow.utils.time

        sys.modules["mlflow.utils.time_utils"] = mlflow.utils.time
    import mlflow.utils.providers

    if not hasattr(mlflow.utils.providers, "_PROVIDER_BACKEND_AVAILABLE"):
        mlflow.utils.providers._PROVIDER_BACKEND_AVAILABLE = False
    import tests.tracking.integration_test_utils as itu

    itu.ServerThread = TrainlogServerThread
    itu._init_server = trainlog_init_server


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "allow_infer_pip_requirements_fallback: MLflow marker")
    if not _binary().is_file():
        raise pytest.UsageError(f"{_binary()} is missing")
    _install_shims()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, dropped = [], []
    for item in items:
        reason = next((why for key, why in DESELECT.items() if key in item.nodeid), None)
        (dropped if reason else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(autouse=True)
def _trainlog_server_stand_ins(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    module = request.module
    for name, stand_in in [
        ("ServerThread", TrainlogServerThread),
        ("_init_server", trainlog_init_server),
        ("initialize_backend_stores", lambda *a, **k: None),
    ]:
        if hasattr(module, name):
            monkeypatch.setattr(module, name, stand_in)
    yield


@pytest.fixture
def db_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'unused.db'}"
