"""Stopping a run from outside it: a training loop stopped through the API (KeyboardInterrupt in
its main thread) and through `trainlog stop`, a run whose `on_stop` hook ends the training
itself, and a job of two processes on every rank; each run ends `killed` within a heartbeat,
saying who stopped it, and a run that already ended cannot be stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import trainlog
from helpers import BINARY, Server, wait_for

LOOP = textwrap.dedent(
    """
    import os, sys, time
    import trainlog

    def stop_gently(run):
        print("ON_STOP", run.stopped, flush=True)
        global stopping
        stopping = True

    stopping = False
    hook = stop_gently if os.environ.get("HOOK") else None
    run = trainlog.init(project="stoppable", name=os.environ["NAME"], system_metrics_interval=None, on_stop=hook)
    try:
        for step in range(3000):
            run.log({"loss": 1.0 / (step + 1)}, step=step)
            if step == 2:
                run.flush()
                print("READY", run.id, flush=True)
            if stopping:
                print("STOPPING AT", step, flush=True)
                run.finish()
                sys.exit(0)
            time.sleep(0.05)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        raise
    """
)


def start(env: dict, name: str, **extra: str) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    full.update(env, NAME=name, TRAINLOG_HEARTBEAT_SECONDS="0.3", **extra)
    return subprocess.Popen(
        [sys.executable, "-c", LOOP], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def ready(proc: subprocess.Popen) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("READY"), f"{line} {proc.stderr.read() if proc.stderr else ''}"
    return line.split()[1]


def ended(server: Server, run_id: str) -> dict:
    return wait_for(
        "the run to end", lambda: (d := trainlog.Api(server.url)._native.run(run_id))["status"] != "running" and d, 30
    )


@pytest.mark.timeout(120)
def test_a_training_loop_stopped_from_the_api_ends_killed_saying_who(server: Server, client_env: dict) -> None:
    proc = start(client_env, "loop")
    try:
        run_id = ready(proc)
        stop = trainlog.Api().run(run_id).stop("GPUs idle")
        assert stop["by"] == "someone" and stop["reason"] == "GPUs idle"
        out, err = proc.communicate(timeout=60)
        assert "INTERRUPTED" in out and "KeyboardInterrupt" in err, (out, err)
        assert proc.returncode != 0
        run = ended(server, run_id)
        assert run["status"] == "killed"
        [attempt] = run["attempts"]
        assert attempt["ended_by"] == "rank 0 killed: stopped by someone: GPUs idle", attempt
        # An ended run has nothing to stop.
        with pytest.raises(trainlog.ConflictError, match="not running: there is nothing to stop"):
            trainlog.Api().run(run_id).stop()
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.timeout(120)
def test_trainlog_stop_calls_the_runs_on_stop_hook_instead(server: Server, client_env: dict) -> None:
    proc = start(client_env, "hooked", HOOK="1")
    try:
        run_id = ready(proc)
        asked = subprocess.run(
            [str(BINARY), "stop", run_id, "--reason", "budget", "--server", server.url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert asked.returncode == 0 and f"asked run {run_id} to stop" in asked.stdout, asked.stderr
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "ON_STOP stopped by someone: budget" in out and "STOPPING AT" in out and "INTERRUPTED" not in out
        run = ended(server, run_id)
        # The training finished the run itself; a stop asked of it still makes it `killed`.
        assert run["status"] == "killed"
        assert run["attempts"][0]["ended_by"] == "rank 0 killed: stopped by someone: budget"
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.timeout(120)
def test_every_rank_of_a_job_stops(server: Server, client_env: dict) -> None:
    job = uuid.uuid4().hex
    procs = [
        start(client_env, "job", TRAINLOG_JOB_ID=job, TRAINLOG_RANK=str(rank), TRAINLOG_WORLD_SIZE="2")
        for rank in range(2)
    ]
    try:
        [first, second] = [ready(p) for p in procs]
        assert first == second, "one run"
        trainlog.Api().run(first).stop()
        for proc in procs:
            out, _ = proc.communicate(timeout=60)
            assert "INTERRUPTED" in out
        run = ended(server, first)
        assert run["status"] == "killed"
        [attempt] = run["attempts"]
        assert [p["status"] for p in attempt["processes"]] == ["killed", "killed"]
        assert all(p["reason"] == "stopped by someone" for p in attempt["processes"]), attempt["processes"]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


TORCHRUN_LOOP = textwrap.dedent(
    """
    import os, time
    import trainlog
    run = trainlog.init(project="stoppable", name="torchrun", system_metrics_interval=None)
    rank = int(os.environ["RANK"])
    try:
        for step in range(3000):
            run.log({"loss": 1.0 / (step + 1)}, step=step)
            if step == 2:
                run.flush()
                print("READY", rank, run.id, flush=True)
            time.sleep(0.05)
    except KeyboardInterrupt:
        print("INTERRUPTED", rank, flush=True)
        raise
    """
)


@pytest.mark.timeout(180)
def test_a_torchrun_job_stopped_from_the_api_ends_killed_on_every_rank(
    server: Server, client_env: dict, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(TORCHRUN_LOOP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    env.update(client_env, TRAINLOG_HEARTBEAT_SECONDS="0.3", TRAINLOG_QUIET="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready: dict = {}
        while len(ready) < 2:
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else "torchrun ended"
            if line.startswith("READY"):
                _, rank, run_id = line.split()
                ready[rank] = run_id
        [run_id] = set(ready.values())
        trainlog.Api().run(run_id).stop("the loss plateaued")
        out, err = proc.communicate(timeout=90)
        # A rank that sees the stop raises KeyboardInterrupt; torchrun then ends the job's other
        # ranks itself when it sees one fail, so not every rank need see the stop first.
        assert out.count("INTERRUPTED") >= 1, (out, err)
        run = ended(server, run_id)
        assert run["status"] == "killed"
        [attempt] = run["attempts"]
        assert attempt["launcher"] == "torchrun", attempt
        assert [p["status"] for p in attempt["processes"]] == ["killed", "killed"], attempt["processes"]
        # Whichever rank ended first says it.
        assert attempt["ended_by"] in {f"rank {r} killed: stopped by someone: the loss plateaued" for r in (0, 1)}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
