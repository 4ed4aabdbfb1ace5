"""Rules the server checks on its own, end to end, with real processes: a training stopped with
SIGSTOP fires `stalled`; a priced run whose GPU (the stand-in NVML) goes idle fires the idle rule
with its dollars per hour; the idle-shutdown policy warns, then stops an idle run, which ends
`killed` saying so; a spike and a plateau fire from the series as they arrive; a budget at 80%
fires once and at 100% stops the project's runs; the fleet rules fire on a fleet with a long
queue wait, failures and a spend spike, built through the API as a launcher reports jobs (a
week of history cannot be lived in a test), and stay quiet on one without them; a real Slurm job
held in the queue fires the queue wait rule (its span scaled to seconds) and one started at once
does not; a job SIGKILLed on every rank fires `lost` within the liveness bound."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest
import trainlog
from helpers import BINARY, Server, gpu, run_script, wait_for, write_gpus

H100 = "NVIDIA H100 80GB HBM3"

TRAINING = textwrap.dedent(
    """
    import os, time
    from pathlib import Path
    import trainlog
    run = trainlog.init(project=os.environ["PROJECT"], name=os.environ["NAME"],
                        cost={"per_gpu_hour": float(os.environ["PER_GPU_HOUR"])}, system_metrics_interval=0.2)
    print("RUN", run.id, flush=True)
    stop = Path(os.environ["STOP_FILE"])
    step = 0
    try:
        while not stop.exists():
            run.log({"loss": 1.0 / (step + 1)}, step=step)
            step += 1
            time.sleep(0.05)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        raise
    run.finish()
    """
)


class Training:
    """A training process on the stand-in NVML, priced per GPU-hour, logging until told to stop."""

    def __init__(self, folder: Path, env: dict, standin: Path, project: str, name: str, util: int, price: float):
        folder.mkdir(parents=True, exist_ok=True)
        self.gpus = folder / "gpus.txt"
        self.stop_file = folder / "stop"
        self.set_util(util)
        full = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINLOG_", "SLURM_", "CUDA_VISIBLE"))}
        full.update(
            env,
            PROJECT=project,
            NAME=name,
            PER_GPU_HOUR=str(price),
            STOP_FILE=str(self.stop_file),
            LD_LIBRARY_PATH=str(standin),
            TRAINLOG_NVML_STANDIN=str(self.gpus),
            TRAINLOG_HEARTBEAT_SECONDS="0.3",
            TRAINLOG_QUIET="1",
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", TRAINING], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("RUN"), line + (self.process.stderr.read() if self.process.stderr else "")
        self.run_id = line.split()[1]

    def set_util(self, util: int) -> None:
        write_gpus(self.gpus, [gpu(H100, 0, util=util)])

    def alerts(self) -> List[Dict[str, Any]]:
        return trainlog.Api().run(self.run_id).alerts

    def finish(self) -> None:
        self.stop_file.touch()
        self.process.communicate(timeout=60)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=30)


def cli(server: Server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BINARY), "alerts", *args, "--server", server.url], capture_output=True, text=True, timeout=60
    )


def add_rules(server: Server, project: str, *rules: str) -> None:
    for rule in rules:
        added = cli(server, "rule", "add", project, rule)
        assert added.returncode == 0, (rule, added.stderr)


def call(server: Server, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{server.url}/api/v1{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def project_alerts(server: Server, project: str) -> List[Dict[str, Any]]:
    return call(server, "GET", f"/projects/{project}/alerts")["alerts"]


@pytest.fixture
def fast_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """A server checking the project rules every second, and a client pointed at it."""
    s = Server(tmp_path / "server-data")
    s.start(extra_args=("--project-rules-every-s", "1"))
    for key in list(os.environ):
        if key.startswith("TRAINLOG_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("TRAINLOG_SERVER", s.url)
    monkeypatch.setenv("TRAINLOG_DIR", str(tmp_path / "client-state"))
    yield s
    s.stop()


@pytest.mark.timeout(180)
def test_a_stopped_process_fires_stalled_and_idle_gpus_fire_with_their_price(
    server: Server, client_env: dict, standin_dir: Path, tmp_path: Path
) -> None:
    trainlog.init(project="babysat", name="setup", system_metrics_interval=None).finish()
    add_rules(server, "babysat", "stalled 3s", "idle < 10% for 4s")
    training = Training(tmp_path / "t", client_env, standin_dir, "babysat", "busy", util=95, price=3.44)
    try:
        # Busy GPUs and steps: nothing fires while both go on.
        time.sleep(6)
        assert training.alerts() == []
        training.set_util(2)
        idle = wait_for("the idle rule", lambda: [a for a in training.alerts() if a["rule"].startswith("idle")], 30)
        assert idle[0]["title"].startswith("$3.44/h of 1 GPU(s) idle for "), idle
        assert "below 10.0% for" in idle[0]["text"] or "below 10% for" in idle[0]["text"], idle
        assert idle[0]["level"] == "warn"
        # SIGSTOP: no step, no heartbeat, no sample: stalled, once.
        training.process.send_signal(signal.SIGSTOP)
        stalled = wait_for("the stalled rule", lambda: [a for a in training.alerts() if a["rule"] == "stalled 3s"], 30)
        assert stalled[0]["title"] == "stalled: no new step for 3 s", stalled
        assert stalled[0]["text"].startswith("no new step for "), stalled
        assert stalled[0]["step"] is not None and stalled[0]["level"] == "error"
        time.sleep(5)
        assert [a["count"] for a in training.alerts() if a["rule"] == "stalled 3s"] == [1], "once an episode"
        training.process.send_signal(signal.SIGCONT)
        training.set_util(95)
        training.finish()
        assert trainlog.Api().run(training.run_id).status == "finished"
    finally:
        training.process.send_signal(signal.SIGCONT)
        training.kill()


@pytest.mark.timeout(180)
def test_the_idle_shutdown_policy_warns_then_stops_an_idle_priced_run(
    server: Server, client_env: dict, standin_dir: Path, tmp_path: Path
) -> None:
    trainlog.init(project="frugal", name="setup", system_metrics_interval=None).finish()
    add_rules(server, "frugal", "idle < 10% for 8s then stop")
    training = Training(tmp_path / "t", client_env, standin_dir, "frugal", "forgotten", util=0, price=2.5)
    try:
        out, err = training.process.communicate(timeout=90)
        assert "INTERRUPTED" in out and "KeyboardInterrupt" in err, (out, err)
        run = trainlog.Api().run(training.run_id)
        assert run.status == "killed"
        alerts = sorted(run.alerts, key=lambda a: a["time"])
        assert [a["level"] for a in alerts] == ["warn", "error"], alerts
        # The warning half-way (a span under 20 minutes), then the stop at the policy's span.
        assert alerts[0]["title"].startswith("GPUs idle for ") and alerts[0]["title"].endswith(": stopping at 8 s")
        assert alerts[1]["title"].startswith("$2.50/h of 1 GPU(s) idle for "), alerts
        attempts = trainlog.Api()._native.run(training.run_id)["attempts"]
        assert (
            "stopped by rule: `idle < 10% for 8s then stop`: $2.50/h of 1 GPU(s) idle for" in attempts[-1]["ended_by"]
        )
    finally:
        training.kill()


SERIES = textwrap.dedent(
    """
    import math, random
    import trainlog
    random.seed(7)
    run = trainlog.init(project="series-rules", name="wobbly", system_metrics_interval=None)
    for step in range(300):
        loss = 1.0 + random.gauss(0, 0.01) + (5.0 if step == 200 else 0.0)
        acc = min(0.8, step / 100)
        run.log({"train/loss": loss, "eval/acc": acc}, step=step)
    run.finish()
    print("RUN", run.id, flush=True)
    """
)


@pytest.mark.timeout(120)
def test_a_spike_and_a_plateau_fire_from_the_series_as_they_arrive(server: Server, client_env: dict) -> None:
    trainlog.init(project="series-rules", name="setup", system_metrics_interval=None).finish()
    add_rules(server, "series-rules", "train/loss spike > 6", "eval/acc no improvement for 50 steps")
    done = run_script(SERIES, client_env, timeout=60)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split("RUN ", 1)[1].split()[0]
    alerts = wait_for("both rules", lambda: len(a := trainlog.Api().run(run_id).alerts) >= 2 and a, 30)
    by_rule = {a["rule"]: a for a in alerts}
    spike = by_rule["train/loss spike > 6"]
    assert (spike["title"], spike["step"], spike["count"]) == ("train/loss spiked", 200, 1), spike
    plateau = by_rule["eval/acc no improvement for 50 steps"]
    # acc reaches its best, 0.8, at step 80; step 130 is the 50th without better.
    assert (plateau["title"], plateau["step"]) == ("eval/acc no better for 50 steps", 130), plateau
    assert "no better than 0.8 (step 80) for 50 steps" in plateau["text"]


BURNING = textwrap.dedent(
    """
    import os, time
    import trainlog
    cost = {"per_hour": 7200.0}
    run = trainlog.init(project="capped", name=os.environ["NAME"], cost=cost, system_metrics_interval=None)
    print("RUN", run.id, flush=True)
    try:
        for step in range(2400):
            run.log({"loss": 1.0}, step=step)
            time.sleep(0.05)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        raise
    run.finish()
    """
)


@pytest.mark.timeout(180)
def test_a_budget_at_80_percent_fires_once_and_at_100_percent_stops_the_projects_runs(fast_server: Server) -> None:
    trainlog.init(project="capped", name="setup", system_metrics_interval=None).finish()
    call(fast_server, "PUT", "/projects/capped/budget", {"monthly_usd": 20.0})
    add_rules(fast_server, "capped", "budget 80%", "budget 100% then stop")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    env.update(
        TRAINLOG_SERVER=fast_server.url,
        TRAINLOG_DIR=os.environ["TRAINLOG_DIR"],
        TRAINLOG_HEARTBEAT_SECONDS="0.3",
        TRAINLOG_QUIET="1",
        NAME="burner",
    )
    # $2 a second: 80% of $20 after 8 s, all of it after 10 s.
    proc = subprocess.Popen(
        [sys.executable, "-c", BURNING], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=120)
        assert "INTERRUPTED" in out, (out, err)
        run_id = out.split("RUN ", 1)[1].split()[0]
        run = trainlog.Api().run(run_id)
        assert run.status == "killed"
        attempts = trainlog.Api()._native.run(run_id)["attempts"]
        assert "stopped by rule: `budget 100% then stop`: budget 100% spent in 20" in attempts[-1]["ended_by"]
        time.sleep(4)  # more rounds of the rules, over budget all along
        alerts = project_alerts(fast_server, "capped")
        assert sorted((a["rule"], a["count"]) for a in alerts) == [("budget 100% then stop", 1), ("budget 80%", 1)], (
            alerts
        )
        eighty = next(a for a in alerts if a["rule"] == "budget 80%")
        assert eighty["run"] is None and eighty["title"].startswith("budget 80% spent in 20")
        assert "of the $20.00 monthly budget spent in" in eighty["text"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


HOUR = 3_600_000


def launched_job(
    server: Server,
    project: str,
    name: str,
    start_ms: int,
    hours: float,
    usd_per_hour: float,
    status: str = "finished",
    queued_ms: int = 600_000,
    util: Optional[float] = None,
) -> str:
    """A job as a launcher reports it: one process on one priced H100 node, with its submit time,
    and its GPU's utilization samples when given; ended `status` after `hours`."""
    end_ms = start_ms + int(hours * HOUR)
    process = {
        "rank": 0,
        "world_size": 1,
        "host": f"node-{name}",
        "launcher": "slurm",
        "job_id": name,
        "started_ms": start_ms,
        "submitted_ms": start_ms - queued_ms,
        "node": {"gpus": 1, "gpu_names": [H100], "usd_per_hour": usd_per_hour, "price_source": "launcher"},
    }
    created = call(
        server, "POST", "/runs", {"project": project, "name": name, "start_time": start_ms, "process": process}
    )
    run_id = created["id"]
    if util is not None:
        points = [
            {"key": "sys/gpu.0.util", "step": i, "value": util, "timestamp": start_ms + i * 60_000}
            for i in range(int(hours * 60))
        ]
        call(server, "POST", f"/runs/{run_id}/metrics", {"points": points})
    call(
        server,
        "POST",
        f"/runs/{run_id}/finish",
        {"status": status, "end_time": end_ms, "process": {"rank": 0, "time": end_ms}},
    )
    return run_id


def build_fleet(server: Server, project: str, troubled: bool) -> None:
    now = int(time.time() * 1000)
    trailing_usd = 0.0
    # Seven days of steady work: 18 one-hour jobs at $4/h, two of them failing in a troubled fleet.
    for i in range(18):
        status = "failed" if troubled and i in (3, 11) else "finished"
        start = now - (2 + i * 9) * HOUR
        launched_job(server, project, f"{project}-{i}", start, 1.0, 4.0, status=status, util=5 if troubled else 90)
        trailing_usd += 4.0
    average = trailing_usd / (7 * 24)
    # The last hour: one job 3 h in the queue costing 11x the hourly average (troubled), or a
    # short job after a short wait costing less than the average. A troubled fleet's GPUs idle
    # at 5% (below the report's 10% threshold of an active GPU-second).
    recent = now - 40 * 60_000
    if troubled:
        launched_job(server, project, f"{project}-late", recent, 0.5, 22 * average, queued_ms=3 * HOUR, util=5)
    else:
        launched_job(server, project, f"{project}-late", recent, 0.5, 0.5 * average, util=90)
    launched_job(server, project, f"{project}-ok", now - 30 * 60_000, 0.25, 0.5 * average, util=90)


FLEET_RULES = ("utilization < 50% for 6h", "queue wait > 2h", "failure rate > 5% over 7d", "cost spike")


@pytest.mark.timeout(180)
def test_the_fleet_rules_fire_on_a_troubled_fleet_and_stay_quiet_on_a_healthy_one(fast_server: Server) -> None:
    for project, troubled in (("troubled", True), ("healthy", False)):
        build_fleet(fast_server, project, troubled)
        add_rules(fast_server, project, *FLEET_RULES)
    alerts = wait_for(
        "the troubled fleet's alerts", lambda: len(a := project_alerts(fast_server, "troubled")) >= 4 and a, 60
    )
    time.sleep(4)  # more rounds: each fires once, and the healthy fleet stays quiet
    alerts = project_alerts(fast_server, "troubled")
    by_rule = {a["rule"]: a for a in alerts}
    assert sorted(by_rule) == sorted(FLEET_RULES) and all(a["count"] == 1 for a in alerts), alerts
    assert by_rule["queue wait > 2h"]["text"].startswith("a run that started in the last 24 h queued for 3 h")
    assert by_rule["failure rate > 5% over 7d"]["text"].startswith("2 of the 20 run(s) that started in the last 7 d")
    # In the last 6 h: a 1 h and a 0.5 h job idle, a 0.25 h job busy.
    assert by_rule["utilization < 50% for 6h"]["text"].startswith("14% of the GPU-hours of the 3 run(s)")
    spike = by_rule["cost spike"]["text"]
    assert spike.startswith("the runs that started in the last hour cost $") and "x the hourly average" in spike
    assert project_alerts(fast_server, "healthy") == []


HOLD = textwrap.dedent(
    """
    import os, time
    import trainlog
    run = trainlog.init(project="vanishing", name="job", cost={"per_hour": 4.0}, system_metrics_interval=None)
    for step in range(10):
        run.log({"loss": 1.0}, step=step)
    run.flush()
    print("READY", run.id, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.timeout(120)
def test_a_job_killed_on_every_rank_fires_lost_within_the_liveness_bound(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    server.start(extra_args=("--lost-after-s", "2"))
    procs: List[subprocess.Popen] = []
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
        env.update(
            TRAINLOG_SERVER=server.url,
            TRAINLOG_DIR=str(tmp_path / "client-state"),
            TRAINLOG_HEARTBEAT_SECONDS="0.3",
            TRAINLOG_QUIET="1",
            TRAINLOG_JOB_ID="vanishing-job",
            TRAINLOG_WORLD_SIZE="2",
        )
        call(server, "POST", "/runs", {"project": "vanishing", "name": "setup"})
        add_rules(server, "vanishing", "lost")
        procs.extend(
            subprocess.Popen(
                [sys.executable, "-c", HOLD],
                env=dict(env, TRAINLOG_RANK=str(rank)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for rank in range(2)
        )
        run_ids = set()
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("READY"), line + (proc.stderr.read() if proc.stderr else "")
            run_ids.add(line.split()[1])
        [run_id] = run_ids
        killed_at = time.monotonic()
        for proc in procs:
            proc.kill()
            proc.wait()
        alerts = wait_for("the lost rule", lambda: call(server, "GET", f"/runs/{run_id}/alerts")["alerts"], 30)
        elapsed = time.monotonic() - killed_at
        assert [(a["rule"], a["title"], a["level"]) for a in alerts] == [("lost", "run lost", "error")]
        assert alerts[0]["text"].startswith(f"run {run_id} ended lost in attempt 1; $"), alerts[0]["text"]
        print(f"lost alert {elapsed:.1f} s after the kill (bound 2 s, checked every third of it; rules every 2 s)")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        server.stop()


SLURM_JOB = textwrap.dedent(
    """
    import os
    import trainlog
    run = trainlog.init(project=os.environ["PROJECT"], name="job", system_metrics_interval=None)
    for step in range(5):
        run.log({"loss": 1.0}, step=step)
    run.finish()
    """
)


# Its fixture may install Slurm's packages first (up to 900 s).
@pytest.mark.timeout(1200)
def test_a_slurm_job_that_waited_in_the_queue_fires_the_queue_wait_rule(
    fast_server: Server, slurm_conf: str, tmp_path: Path
) -> None:
    script = tmp_path / "job.py"
    script.write_text(SLURM_JOB)
    for project in ("queued", "prompt"):
        call(fast_server, "POST", "/runs", {"project": project, "name": "setup"})
        # The rule's span scaled down from hours to seconds, as the test's jobs wait seconds.
        add_rules(fast_server, project, "queue wait > 15s")

    def sbatch(project: str, *options: str) -> None:
        batch = tmp_path / f"{project}.sh"
        out = tmp_path / f"{project}-%j.txt"
        batch.write_text(f"#!/bin/bash\n#SBATCH --ntasks=1 -o {out}\nsrun --ntasks=1 {sys.executable} {script}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINLOG_", "SLURM_"))}
        env.update(
            TRAINLOG_SERVER=fast_server.url,
            TRAINLOG_DIR=str(tmp_path / f"client-{project}"),
            TRAINLOG_QUIET="1",
            SLURM_CONF=slurm_conf,
            PROJECT=project,
        )
        done = subprocess.run(
            ["sbatch", "--parsable", *options, str(batch)], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr

    # One job Slurm holds 25 s before it may start; one it starts at once.
    sbatch("queued", "--begin=now+25")
    sbatch("prompt")
    alerts = wait_for("the queue wait rule", lambda: project_alerts(fast_server, "queued"), 120)
    [alert] = alerts
    assert (alert["rule"], alert["title"]) == ("queue wait > 15s", "queue wait above 15 s"), alert
    assert alert["text"].startswith("a run that started in the last 24 h queued for "), alert["text"]

    def prompt_finished() -> bool:
        runs = call(fast_server, "GET", "/projects/prompt/runs")["runs"]
        return any(r["name"] == "job" and r["status"] == "finished" for r in runs)

    wait_for("the prompt job to finish", prompt_finished, 120)
    time.sleep(4)  # rounds of the rules after the prompt job's row is in the report
    assert project_alerts(fast_server, "prompt") == []
    # The report shows the wait the rule read: Slurm's SubmitTime to the job's start.
    report = call(fast_server, "GET", "/report?projects=queued&since=1d")
    assert report["total"]["queue_wait_s"] > 15, report["total"]
