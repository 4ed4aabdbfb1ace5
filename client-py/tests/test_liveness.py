"""How a job's end is classified, from evidence: the server ends `lost` a job whose processes all
stopped sending heartbeats, and a SIGTERM is a preemption only where something says so (`scancel`
on Slurm is someone cancelling the job)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Dict

import pytest

import trainlog
from helpers import BINARY, Server, wait_for

HOLDING_RANK = textwrap.dedent(
    """
    import time
    import trainlog

    run = trainlog.init(project="liveness", name="vanishing", system_metrics_interval=None)
    for step in range(5):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
    run.flush()
    print("READY", flush=True)
    time.sleep(600)
    """
)


def detail(server: str, run_id: str) -> Dict[str, Any]:
    return trainlog.Api(server)._native.run(run_id)


@pytest.mark.timeout(180)
def test_a_job_killed_on_every_rank_ends_lost_and_counts_as_an_infrastructure_failure(client_env: dict, tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    server.start(extra_args=("--lost-after-s", "2"))
    procs = []
    try:
        script = tmp_path / "rank.py"
        script.write_text(HOLDING_RANK)
        job = uuid.uuid4().hex
        for rank in range(2):
            env = dict(
                os.environ,
                **{**client_env, "TRAINLOG_SERVER": server.url},
                TRAINLOG_JOB_ID=job,
                TRAINLOG_RANK=str(rank),
                TRAINLOG_WORLD_SIZE="2",
                TRAINLOG_COST_PER_HOUR="4.0",
                TRAINLOG_HEARTBEAT_SECONDS="0.3",
            )
            procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY", proc.stderr and proc.stderr.read()
        api = trainlog.Api(server.url)
        [listed] = api.runs("liveness")
        assert detail(server.url, listed.id)["status"] == "running"
        for proc in procs:
            proc.send_signal(signal.SIGKILL)  # no process says anything more: a vanished VM
            proc.wait(timeout=30)

        run = wait_for("the server to end the run lost", lambda: (d := detail(server.url, listed.id))["status"] == "lost" and d)
        [attempt] = run["attempts"]
        assert attempt["status"] == "lost"
        assert attempt["ended_by"].endswith("no heartbeat from any process of its attempt for 2 s"), attempt
        assert [p["status"] for p in attempt["processes"]] == ["lost", "lost"]
        assert all(p["end_time"] == p["seen_time"] for p in attempt["processes"]), "each ends at its last heartbeat"
        assert attempt["end_time"] == max(p["seen_time"] for p in attempt["processes"]) == run["end_time"]
        # No checkpoint: all of the attempt is lost work, at its node's price.
        hours = (attempt["end_time"] - attempt["start_time"]) / 3.6e6
        assert attempt["lost_usd"] == pytest.approx(4.0 * hours, rel=1e-9)
        assert run["job"]["usd_per_hour"] == 0, "no price per hour shows for a job that ended"
        assert math.copysign(1.0, run["job"]["usd_per_hour"]) == 1.0, "0, not -0.0"

        report = wait_for("the report to count it", lambda: (t := api.report(projects=["liveness"])["total"])["infra_failures"] == 1 and t, 90)
        assert (report["inputs"]["finished"], report["code_failures"], report["inputs"]["killed"]) == (0, 0, 0), report
        assert report["job_success_rate"] == 0.0
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
        assert re.search(r"^trainlog_runs_lost_total 1$", metrics, re.M), metrics
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        server.stop()


SLURM_TASK = textwrap.dedent(
    """
    import time
    import trainlog

    run = trainlog.init(project="slurm-cancel", name="cancelled", system_metrics_interval=None)
    for step in range(3):
        run.log({"loss": 1.0}, step=step)
    run.flush()
    print("READY", flush=True)
    time.sleep(600)
    """
)


# Its fixture may install Slurm's packages first (up to 900 s).
@pytest.mark.timeout(1200)
def test_scancel_ends_the_run_killed_not_preempted(client_env: dict, tmp_path: Path, slurm_conf: str) -> None:
    task = tmp_path / "task.py"
    task.write_text(SLURM_TASK)
    batch = tmp_path / "job.sh"
    batch.write_text(f"#!/bin/bash\n#SBATCH --ntasks=1 -o {tmp_path}/out-%j.txt\nsrun {sys.executable} {task}\n")
    env = dict(os.environ, **client_env, SLURM_CONF=slurm_conf, TRAINLOG_HEARTBEAT_SECONDS="0.5")
    submitted = subprocess.run(["sbatch", "--parsable", str(batch)], env=env, capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    out = tmp_path / f"out-{job}.txt"
    wait_for("the task to log", lambda: out.is_file() and "READY" in out.read_text())
    cancelled = subprocess.run(["scancel", job], env=env, capture_output=True, text=True, timeout=60)
    assert cancelled.returncode == 0, cancelled.stderr
    api = trainlog.Api(client_env["TRAINLOG_SERVER"])
    [listed] = api.runs("slurm-cancel")
    run = wait_for("the run to end", lambda: (d := detail(client_env["TRAINLOG_SERVER"], listed.id))["status"] != "running" and d, 60)
    assert run["status"] == "killed", json.dumps(run["attempts"], indent=1) + out.read_text()
    [attempt] = run["attempts"]
    # Slurm shows the cancelled job CANCELLED, or COMPLETING while its steps stop: not PREEMPTED.
    assert re.fullmatch(r"rank 0 killed: SIGTERM; Slurm says the job is [A-Z_]+, not preempted", attempt["ended_by"]), attempt
    report = wait_for("the report to count it", lambda: (t := api.report(projects=["slurm-cancel"])["total"])["inputs"]["killed"] == 1 and t, 90)
    assert (report["infra_failures"], report["code_failures"]) == (0, 0), report
    assert report["job_success_rate"] is None, "a cancelled run is neither a success nor a failure"
    # The report's table has cancelled runs on their own line, beside the two kinds of failure.
    shown = subprocess.run([str(BINARY), "report", "--projects", "slurm-cancel"], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    header, total = shown.stdout.splitlines()[:2]
    columns = dict(zip(header.split(), total.split()))
    assert (columns["infra"], columns["code"], columns["cancelled"]) == ("0", "0", "1"), shown.stdout
