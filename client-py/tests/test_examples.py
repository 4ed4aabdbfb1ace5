"""The examples run against a spawned server and leave the runs they describe."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

import trainlog
from helpers import REPO


def run_example(cmd: "list[str]", env: dict) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, env={**env, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_the_dependency_free_python_example(server, client_env: dict) -> None:
    out = run_example([sys.executable, "examples/python/train.py", "--steps", "300"], client_env)
    run_id = out.stdout.split()[1].rstrip(":")
    run = trainlog.Api().run(run_id)
    assert run.status == "finished" and run.params == {"lr": 0.05, "model.kind": "linear"}
    loss = run.history("train/loss")
    assert len(loss) == 300 and loss[-1]["value"] < 0.02 < loss[0]["value"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.timeout(900)  # trains on the CPU; run_example gives it up to 600 s
def test_the_pytorch_example(server, client_env: dict) -> None:
    out = run_example([sys.executable, "examples/python/pytorch_train.py", "--epochs", "2"], client_env)
    run_id = out.stdout.split()[1]
    run = trainlog.Api().run(run_id)
    assert run.status == "finished" and len(run.history("train/loss")) == 64
    assert run.history("val/accuracy")[-1]["value"] > 0.6


def test_the_rust_example(server, client_env: dict) -> None:
    binary = REPO / "target" / "release" / "examples" / "train"
    assert binary.exists(), "build it with cargo test --release --workspace (or cargo build --release -p trainlog --example train)"
    out = run_example([str(binary)], client_env)
    run_id = out.stdout.split()[1].rstrip(":")
    run = trainlog.Api().run(run_id)
    assert run.status == "finished" and run.tags == {"example": ""}
    loss = run.history("train/loss")
    assert len(loss) == 500 and loss[-1]["value"] < 1e-3


def test_resume_after_preemption_example(server, client_env: dict) -> None:
    out = run_example([sys.executable, "examples/python/resume_after_preemption.py", "--steps", "200", "--every", "20"], client_env)
    assert "no duplicate, no gap, status finished" in out.stdout, out.stdout
    assert "preempted: exit" in out.stdout


def test_the_sweep_example(server, client_env: dict, tmp_path) -> None:
    text = (REPO / "examples/sweep.yaml").read_text()
    text = text.replace("command: [python,", f"command: [{sys.executable},").replace("run_cap: 12", "run_cap: 6")
    (tmp_path / "sweep.yaml").write_text(text)
    cli = str(REPO / ".venv/bin/trainlog") if (REPO / ".venv/bin/trainlog").exists() else "trainlog"
    out = run_example([cli, "sweep", "run", str(tmp_path / "sweep.yaml"), "--cpu-slots", "2"], client_env)
    sweep_id = out.stderr.split("created sweep ")[1].split()[0]
    import json
    import urllib.request

    with urllib.request.urlopen(f"{client_env['TRAINLOG_SERVER']}/api/v1/sweeps/{sweep_id}", timeout=10) as r:
        sweep = json.loads(r.read())
    assert (sweep["state"], sweep["ended_reason"], sweep["trial_count"]) == ("finished", "run_cap", 6)
    assert set(sweep["counts"]) <= {"finished", "pruned"} and sweep["counts"].get("finished", 0) >= 1
    assert sweep["best"]["value"] < 0.1
