"""Helpers for the client tests: the real trainlog server binary on 127.0.0.1, and scripts run in fresh interpreters."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("TRAINLOG_BIN", REPO / "target" / "release" / "trainlog"))


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


class Server:
    def __init__(self, data: Path) -> None:
        self.data = data
        self.proc: Optional[subprocess.Popen[str]] = None
        self.port = 0
        self.url = ""

    def start(self, port: int = 0, extra_args: tuple = ()) -> None:
        self.extra_args = extra_args
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
        cmd = [str(BINARY), "server", "--host", "127.0.0.1", "--port", str(port), "--data", str(self.data), *extra_args]
        cmd += postgres_meta_url(self.data.with_suffix(".meta-url"))
        # TRAINLOG_TEST_STORE (an s3:// URL, with the AWS_* variables) puts the server's files there.
        if os.environ.get("TRAINLOG_TEST_STORE"):
            if not hasattr(self, "store_url"):
                self.store_url = f"{os.environ['TRAINLOG_TEST_STORE'].rstrip('/')}/{self.data.parent.name}-{os.getpid()}"
            cmd += ["--store", self.store_url]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        deadline = time.monotonic() + 30
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            match = re.search(r"listening on (https?://127\.0\.0\.1:(\d+))", line)
            if match:
                self.url, self.port = match.group(1), int(match.group(2))
                return
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError("the server did not start")

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None

    def restart_same_port(self) -> None:
        port = self.port
        self.kill9()
        self.start(port, self.extra_args)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None




def wait_until(what: str, done: Callable[[], bool], timeout: float = 60) -> None:
    """Waits until `done()` holds, failing the test with `what` if it never does."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen in {timeout} s")
        time.sleep(0.02)


def wait_for(what: str, check: Callable[[], Any], seconds: float = 120, diagnose: Optional[Callable[[], str]] = None) -> Any:
    """Waits until `check()` answers something true and answers it, failing the test with
    `what` (and what `diagnose()` says) if it never does."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}" + (f"\n{diagnose()}" if diagnose else ""))


def run_script(code: str, env: dict, cwd: Optional[Path] = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs Python code in a fresh interpreter (the one running the tests) and waits for it."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def spawn_script(code: str, env: dict, cwd: Optional[Path] = None) -> subprocess.Popen:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    full_env.update(env)
    return subprocess.Popen([sys.executable, "-c", code], env=full_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_line(proc: subprocess.Popen, text: str, timeout: float = 30) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if text in line:
            return
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"{text!r} was not printed; stderr: {proc.stderr.read() if proc.stderr else ''}")


def write_gpus(path: Path, gpus: List[Dict[str, Any]]) -> None:
    """Writes the stand-in's readings file: one `gpu.N.key=value` line per reading."""
    lines = [f"count={len(gpus)}"]
    for index, gpu in enumerate(gpus):
        lines += [f"gpu.{index}.{key}={value}" for key, value in gpu.items()]
    # Written whole and renamed, so the library never reads half a file.
    partial = path.with_suffix(".partial")
    partial.write_text("\n".join(lines) + "\n")
    partial.replace(path)


def gpu(name: str, index: int, **readings: Any) -> Dict[str, Any]:
    base = {
        "name": name,
        "uuid": f"GPU-{index:08x}-0000-0000-0000-000000000000",
        "util": 100,
        "mem_used_bytes": 10_000_000_000,
        "mem_total_bytes": 85_520_809_984,
        "power_mw": 300_000,
        "temp_c": 60,
        "energy_mj": 1_000_000,
        "gpm": "no",
    }
    return {**base, **readings}
