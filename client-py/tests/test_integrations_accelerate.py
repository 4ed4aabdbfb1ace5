"""The Accelerate tracker: `Accelerator(log_with="trainlog")` around a small PyTorch loop on this
CPU, in a fresh interpreter against the real server; read back through `trainlog.Api()`: the
config as params, every logged value at its step, and the run's status after success, an
exception in training and SIGTERM."""

from __future__ import annotations

import json
import signal

import pytest

import trainlog
from helpers import Server, run_script, spawn_script, wait_for_line

pytestmark = [pytest.mark.timeout(240), pytest.mark.frameworks]

LOOP = """
import json, time
import torch
torch.manual_seed(0)
torch.set_num_threads(1)
import trainlog.integrations.accelerate
from accelerate import Accelerator

accelerator = Accelerator(cpu=True, log_with="trainlog")
accelerator.init_trackers(PROJECT, config={"lr": 0.05, "model": {"hidden": 8, "act": "relu"}},
                          init_kwargs={"trainlog": {"name": "loop", "system_metrics_interval": None}})
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model, optimizer = accelerator.prepare(model, optimizer)
x, y = torch.randn(64, 4), torch.randn(64, 1)
for step in range(STEPS):
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    accelerator.log({"train/loss": loss.detach(), "eval": {"norm": float(model[0].weight.norm())}, "note": "text"}, step=step)
    print("LOG", step, json.dumps([loss.item(), float(model[0].weight.norm())]), flush=True)
    time.sleep(SLEEP)
    if step == RAISE_AT:
        raise RuntimeError("diverged")
accelerator.end_training()
"""


def loop(project: str, steps: int = 10, raise_at: int = -1, sleep: float = 0.0) -> str:
    return f"PROJECT, STEPS, RAISE_AT, SLEEP = {project!r}, {steps}, {raise_at}, {sleep}\n" + LOOP


def test_the_tracker_logs_the_config_and_every_value_at_its_step(server: Server, client_env: dict) -> None:
    done = run_script(loop("acc"), client_env, timeout=180)
    assert done.returncode == 0, done.stderr
    logged = [json.loads(line.split(" ", 2)[2]) for line in done.stdout.splitlines() if line.startswith("LOG ")]
    [run] = trainlog.Api().runs("acc")
    assert run.name == "loop" and run.status == "finished"
    assert run.params["lr"] == 0.05 and run.params["model.hidden"] == 8 and run.params["model.act"] == "relu"
    loss, norm = run.history("train/loss"), run.history("eval.norm")
    assert [p["step"] for p in loss] == list(range(10)) and [p["step"] for p in norm] == list(range(10))
    assert [p["value"] for p in loss] == pytest.approx([v[0] for v in logged], rel=1e-6)
    assert [p["value"] for p in norm] == pytest.approx([v[1] for v in logged], rel=1e-6)


def test_an_exception_in_training_fails_the_run(server: Server, client_env: dict) -> None:
    failed = run_script(loop("acc-fail", raise_at=4), client_env, timeout=180)
    assert failed.returncode == 1 and "diverged" in failed.stderr, failed.stderr
    [run] = trainlog.Api().runs("acc-fail")
    assert run.status == "failed"
    assert [p["step"] for p in run.history("train/loss")] == list(range(5))


def test_sigterm_on_a_spot_instance_marks_the_run_preempted(server: Server, client_env: dict) -> None:
    proc = spawn_script(loop("acc-spot", steps=1000, sleep=0.05), {**client_env, "TRAINLOG_SPOT": "1"})
    wait_for_line(proc, "LOG 3", timeout=120)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    [run] = trainlog.Api().runs("acc-spot")
    assert run.status == "preempted"
    steps = [p["step"] for p in run.history("train/loss")]
    assert steps[:4] == list(range(4)) and len(steps) < 1000
