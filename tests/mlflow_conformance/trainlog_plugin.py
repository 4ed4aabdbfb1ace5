"""Pytest plugin: MLflow's REST test modules, served by trainlog instead of MLflow's server."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
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

import mlflow
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
        # MLflow's server fixtures serve the store that MLflow's conftest also points the fluent
        # API at (`db_uri`); here that store is this server, so the fluent API talks to it.
        self.previous_uri = _fluent_uri()
        mlflow.set_tracking_uri(self.server.url)
        return self.server.url

    def __exit__(self, *exc) -> None:
        mlflow.set_tracking_uri(self.previous_uri)
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
    config.addinivalue_line("markers", "asyncio: coroutine test (run by this plugin without pytest-asyncio)")
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


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """Runs `@pytest.mark.asyncio` coroutine tests when pytest-asyncio is not installed."""
    if pyfuncitem.config.pluginmanager.hasplugin("asyncio"):
        return None
    if not (inspect.iscoroutinefunction(pyfuncitem.obj) and pyfuncitem.get_closest_marker("asyncio")):
        return None
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True


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
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _fluent_uri() -> str | None:
    from mlflow.tracking import _tracking_service

    return _tracking_service.utils._tracking_uri


@pytest.fixture(autouse=True)
def _fresh_fluent_state(db_uri: str):
    """What MLflow's conftest does around each test: the fluent API starts on a store of the test's
    own, with no active experiment or run left by an earlier test (whose server is gone)."""
    from mlflow.tracking import fluent

    environ = {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")}
    mlflow.set_tracking_uri(db_uri)
    yield
    for key in [k for k in os.environ if k.startswith("MLFLOW_")]:
        del os.environ[key]
    os.environ.update(environ)
    fluent._active_run_stack.set([])
    fluent._last_active_run_id.set(None)
    fluent._active_experiment_id = None
    mlflow.set_tracking_uri(None)
