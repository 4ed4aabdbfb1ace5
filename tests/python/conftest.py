"""Fixtures for the Python end-to-end tests: the real `trainlog` binary on a free port.

The binary is `TRAINLOG_BIN`, else `<repo>/target/release/trainlog` (build it with
`cargo build --release`). The server runs with `--data trainlog-data`, a path relative to its
temporary working directory, so commands meant for users ("run from the folder holding
trainlog-data") can be run there unchanged.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
READY_RE = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


def trainlog_binary() -> Path:
    env = os.environ.get("TRAINLOG_BIN")
    return Path(env) if env else REPO_ROOT / "target" / "release" / "trainlog"


def postgres_meta_url(record: Path) -> list[str]:
    """`--meta URL` for a server whose data folder `record` stands for, when the tests run on
    PostgreSQL (TRAINLOG_TEST_META=postgres, TRAINLOG_TEST_PG the server's URL): a fresh database
    per data folder, kept across restarts in the file `record`. Empty on SQLite."""
    # The record first: a test may have cleared TRAINLOG_* from its environment since the start.
    if record.is_file():
        return ["--meta", record.read_text()]
    if os.environ.get("TRAINLOG_TEST_META") != "postgres":
        return []
    admin = os.environ["TRAINLOG_TEST_PG"]
    name = f"py_{os.getpid()}_{time.monotonic_ns()}"
    subprocess.run(["psql", admin, "-q", "-c", f"CREATE DATABASE {name}"], check=True)
    url = admin.rsplit("/", 1)[0] + "/" + name
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(url)
    return ["--meta", url]


@dataclass
class TrainlogServer:
    url: str
    cwd: Path
    process: subprocess.Popen
    output: list[str] = field(default_factory=list)

    @property
    def data(self) -> Path:
        return self.cwd / "trainlog-data"

    @property
    def store(self) -> Path:
        return self.data / "store"

    def log(self) -> str:
        return "".join(self.output[-200:])


def _pump(stream, lines: queue.Queue, output: list[str]) -> None:
    """Reads the server's output to its end, so the pipe never fills and blocks the server."""
    for line in stream:
        output.append(line)
        lines.put(line)
    lines.put(None)


def start_trainlog(cwd: Path, extra_args: list[str] | None = None, env: dict[str, str] | None = None) -> TrainlogServer:
    """Starts the server in `cwd` on port 0 and waits for its ready line (fails the test if none comes)."""
    binary = trainlog_binary()
    if not binary.is_file():
        pytest.fail(f"{binary} is missing: run `cargo build --release` first, or set TRAINLOG_BIN")
    # The flags below decide; a TRAINLOG_STORE from the environment would move the store elsewhere.
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    base_env.update(env or {})
    process = subprocess.Popen(
        [
            str(binary), "server", "--host", "127.0.0.1", "--port", "0", "--data", "trainlog-data",
            *postgres_meta_url(cwd / "trainlog-meta-url"), *(extra_args or []),
        ],
        cwd=cwd,
        env=base_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    output: list[str] = []
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(process.stdout, lines, output), daemon=True).start()

    url = None
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while url is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no ready line within {READY_TIMEOUT_S} s")
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"the server exited with status {process.wait()} before its ready line")
            m = READY_RE.search(line)
            if m:
                url = m.group(1)
    except Exception as e:
        process.kill()
        process.wait()
        pytest.fail(f"trainlog did not start: {e}\n--- server output ---\n{''.join(output)}")
    return TrainlogServer(url=url, cwd=cwd, process=process, output=output)


def stop_trainlog(server: TrainlogServer) -> None:
    """SIGTERM, then fails the test unless the server stops cleanly in time."""
    process = server.process
    process.send_signal(signal.SIGTERM)
    try:
        status = process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"trainlog did not stop within {STOP_TIMEOUT_S} s of SIGTERM; killed\n{server.log()}")
    if status != 0:
        pytest.fail(f"trainlog exited with status {status} after SIGTERM\n{server.log()}")


@pytest.fixture(scope="module")
def trainlog_server(tmp_path_factory: pytest.TempPathFactory):
    """A server on port 0 in a fresh working directory, stopped with SIGTERM afterwards."""
    server = start_trainlog(tmp_path_factory.mktemp("trainlog"))
    yield server
    stop_trainlog(server)
