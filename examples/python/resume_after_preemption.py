"""Resuming after a spot preemption, end to end.

Run without arguments, this script plays the whole story against a trainlog server
(`TRAINLOG_SERVER`, else local): it starts a trainer, sends it SIGTERM in the middle (as a cloud
provider does before reclaiming a spot instance), starts it again with the same run id, and
checks that training resumed from the latest checkpoint and that the metrics continue with no
duplicate and no gap. `--worker` runs the trainer alone.

    python examples/python/resume_after_preemption.py [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trainlog


def loss_at(step: int) -> float:
    """The trainer's loss is a deterministic function of the step, so a resumed run can be checked."""
    return 1.0 / (1.0 + 0.05 * step)


def worker(steps: int, every: int, work_dir: Path) -> None:
    run = trainlog.init(project="preemption-demo", config={"lr": 0.01, "steps": steps}, system_metrics_interval=None)
    state = {"step": -1, "weights": [0.0, 0.0]}
    latest = run.latest_checkpoint()
    if latest is not None:
        restored = work_dir / f"restored-{os.getpid()}"
        trainlog.restore_checkpoint(run.id, str(restored))
        state = json.loads((restored / "state.json").read_text())
        print(f"resumed from step {state['step']}", flush=True)
    for step in range(state["step"] + 1, steps):
        state["step"] = step
        state["weights"] = [w + 0.01 for w in state["weights"]]
        run.log({"train/loss": loss_at(step)}, step=step)
        if step % every == every - 1:
            ckpt = work_dir / f"ckpt-{step}"
            ckpt.mkdir(parents=True, exist_ok=True)
            (ckpt / "state.json").write_text(json.dumps(state))
            run.log_checkpoint(ckpt, step=step, keep_last=2)
            print(f"checkpoint {step}", flush=True)
        time.sleep(0.005)
    run.finish()
    print("done", flush=True)


def wait_for(proc: subprocess.Popen, text: str, timeout: float = 60) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if text in line:
            return line
        if not line and proc.poll() is not None:
            break
    raise SystemExit(f"the trainer never printed {text!r}")


def demo(steps: int, every: int) -> None:
    run_id = f"preempt-{uuid.uuid4().hex[:8]}"
    # On a spot instance (TRAINLOG_SPOT says so, or the launcher's job context) a SIGTERM is a
    # preemption. Without such evidence it would end the run `killed` (someone stopped it).
    env = {**os.environ, "TRAINLOG_RUN_ID": run_id, "TRAINLOG_SPOT": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, __file__, "--worker", "--steps", str(steps), "--every", str(every), "--dir", tmp]
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        wait_for(first, f"checkpoint {2 * every - 1}")
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
        status = trainlog.Api().run(run_id).status
        print(f"preempted: exit {first.returncode}, run status {status}")
        assert status == "preempted", status

        second = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        resumed = wait_for(second, "resumed from step")
        wait_for(second, "done", timeout=120)
        second.wait(timeout=60)
        assert second.returncode == 0
    resumed_step = int(resumed.split()[-1])
    run = trainlog.Api().run(run_id)
    history = run.history("train/loss")
    steps_seen = [p["step"] for p in history]
    assert steps_seen == list(range(steps)), "no duplicate and no gap"
    assert all(p["value"] == loss_at(p["step"]) for p in history)
    assert run.status == "finished"
    assert len(run.checkpoints()) == 2, "keep_last=2"
    print(f"run {run_id}: resumed from step {resumed_step}, {len(history)} steps, no duplicate, no gap, status {run.status}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.every, Path(args.dir or tempfile.mkdtemp()))
    else:
        demo(args.steps, args.every)


if __name__ == "__main__":
    main()
