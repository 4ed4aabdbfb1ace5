"""One run per training job: ranks started as torchrun starts them, and a spot job preempted and
restarted elsewhere, each process a fresh interpreter against the real server."""

from __future__ import annotations

import datetime
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List

import pytest

import trainlog
from helpers import wait_for

RANK_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import trainlog
    time.sleep(float(os.environ["START_DELAY"]))
    run = trainlog.init(project="ddp", name="resnet-ddp", config={"lr": 0.1, "batch": 64},
                        cost={"per_gpu_hour": 2.0}, system_metrics_interval=0.3)
    for step in range(20):
        run.log({"loss": 1.0 / (step + 1), "rank_seen": run.rank}, step=step)
    time.sleep(1.5)
    report = run.finish()
    assert report is not None and report["unsaved"] == 0, report
    print("RANK", run.rank, "RUN", run.id, "ATTEMPT", run.attempt, flush=True)
    """
)


def torchrun_env(base: Dict[str, str], rank: int, per_node: int, nodes: int, run_id: str) -> Dict[str, str]:
    """Exactly the variables torchrun sets for one worker."""
    node = rank // per_node
    return dict(
        base,
        RANK=str(rank),
        LOCAL_RANK=str(rank % per_node),
        WORLD_SIZE=str(per_node * nodes),
        LOCAL_WORLD_SIZE=str(per_node),
        GROUP_RANK=str(node),
        GROUP_WORLD_SIZE=str(nodes),
        ROLE_RANK=str(rank),
        ROLE_WORLD_SIZE=str(per_node * nodes),
        ROLE_NAME="default",
        TORCHELASTIC_RUN_ID=run_id,
        TORCHELASTIC_RESTART_COUNT="0",
        TORCHELASTIC_MAX_RESTARTS="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29500",
    )


def run_detail(env: Dict[str, str], run_id: str) -> Dict[str, Any]:
    return trainlog.Api(env["TRAINLOG_SERVER"])._native.run(run_id)


def keys_of(detail: Dict[str, Any]) -> List[str]:
    return sorted(detail["summary"])


@pytest.mark.timeout(240)
def test_eight_ranks_on_two_nodes_started_in_random_order_are_one_run(client_env: dict, tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    base = dict(os.environ, **client_env, TRAINLOG_HEARTBEAT_SECONDS="0.3", TRAINLOG_GPUS_PER_NODE="4")
    job = uuid.uuid4().hex
    order = list(range(8))
    random.Random(7).shuffle(order)
    procs = []
    for position, rank in enumerate(order):
        env = torchrun_env(base, rank, per_node=4, nodes=2, run_id=job)
        env["START_DELAY"] = f"{random.Random(rank).uniform(0.0, 1.5) + 0.05 * position:.3f}"
        procs.append((rank, subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    runs = set()
    for rank, proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"rank {rank}: {out}\n{err}"
        words = out.split()
        runs.add(words[words.index("RUN") + 1])
        assert words[words.index("ATTEMPT") + 1] == "1", out
    assert len(runs) == 1, runs
    run_id = runs.pop()
    listed = trainlog.Api(client_env["TRAINLOG_SERVER"]).runs("ddp")
    assert [r.id for r in listed] == [run_id], "every rank joined the one run"

    detail = run_detail(client_env, run_id)
    assert detail["status"] == "finished"
    assert detail["name"] == "resnet-ddp"
    assert detail["params"]["lr"] == 0.1
    job_view = detail["job"]
    assert (job_view["launcher"], job_view["job_id"]) == ("torchrun", job)
    assert (job_view["world_size"], job_view["node_count"], job_view["attempts"], job_view["gpus"]) == (8, 2, 1, 8)
    [attempt] = detail["attempts"]
    assert attempt["status"] == "finished" and attempt["ranks"] == 8
    assert [n["node_rank"] for n in attempt["nodes"]] == [0, 1]
    assert [n["processes"] for n in attempt["nodes"]] == [4, 4]
    assert [n["usd_per_hour"] for n in attempt["nodes"]] == [8.0, 8.0], "4 GPUs × 2.0 per node"
    assert (attempt["first_step"], attempt["last_step"]) == (0, 19)

    # Only rank 0 logged: 20 points of loss, all written by rank 0.
    api = trainlog.Api(client_env["TRAINLOG_SERVER"])
    loss = api.run(run_id).history("loss")
    assert [p["step"] for p in loss] == list(range(20))
    assert {p["value"] for p in api.run(run_id).history("rank_seen")} == {0.0}
    keys = keys_of(detail)
    assert not [k for k in keys if k.startswith("rank/")]
    # Each node's system series once, under its node's keys.
    for node in (0, 1):
        assert f"sys/node/{node}/cpu.percent" in keys, keys
    assert "sys/cpu.percent" not in keys

    # The cost: each node's price × how long it ran, summed; the live series ends near it.
    by_hand = sum(n["usd_per_hour"] * (n["end_time"] - n["start_time"]) / 3.6e6 for n in attempt["nodes"])
    assert job_view["cost_usd"] == pytest.approx(by_hand, rel=1e-9)
    assert attempt["cost_usd"] == pytest.approx(by_hand, rel=1e-9)
    assert job_view["cost_usd"] > 0
    series_last = detail["summary"]["cost/usd"]["last"]
    assert series_last == pytest.approx(by_hand, rel=0.25), (series_last, by_hand)


SPOT_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import trainlog
    attempt = int(os.environ["ATTEMPT"])
    total, extra = 60, int(os.environ["EXTRA_STEPS"])
    run = trainlog.init(project="spot", name="llm-spot", config={"lr": 3e-4})
    checkpoint = run.latest_checkpoint()
    start = checkpoint["step"] + 1 if checkpoint else 0
    print("RESUMED", start, flush=True)
    ckpt = os.path.join(os.environ["WORK"], f"ckpt-{attempt}")
    os.makedirs(ckpt, exist_ok=True)
    step = start
    saved = None
    while step < total:
        run.log({"loss": step + 1000 * attempt}, step=step)
        if step % 10 == 9:
            with open(os.path.join(ckpt, "model.bin"), "w") as f:
                f.write(str(step))
            run.log_checkpoint(ckpt, step=step)
            saved = step
            if extra >= 0 and step >= start + 5:
                break
        step += 1
    if extra >= 0:
        for more in range(1, extra + 1):
            run.log({"loss": saved + more + 1000 * attempt}, step=saved + more)
        run.flush(30)
        # Two heartbeats carry the last step before the end comes.
        time.sleep(1.5)
        print("READY", saved, flush=True)
        time.sleep(600)
    run.finish()
    print("DONE", flush=True)
    """
)


@pytest.mark.timeout(300)
def test_a_spot_job_preempted_three_times_is_one_run_of_four_attempts(client_env: dict, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SPOT_SCRIPT)
    task_id = "sky-managed-2026_11_24-10-00-00-000000_llm_7-0"
    # Each attempt: zone, price per hour, steps logged after the last checkpoint, how it ends.
    plan = [("us-east-1a", 3.0, 4, signal.SIGTERM), ("us-east-1c", 2.5, 6, signal.SIGKILL), ("us-west-2b", 4.0, 3, signal.SIGTERM), ("us-west-2a", 2.0, -1, None)]
    base = dict(os.environ, **client_env, TRAINLOG_HEARTBEAT_SECONDS="0.3", WORK=str(tmp_path))
    measured = []
    for attempt, (zone, price, extra, sig) in enumerate(plan, start=1):
        region = zone[:-1]
        env = dict(
            base,
            ATTEMPT=str(attempt),
            EXTRA_STEPS=str(extra),
            SKYPILOT_TASK_ID=task_id,
            SKYPILOT_NODE_RANK="0",
            SKYPILOT_NUM_NODES="1",
            SKYPILOT_NODE_IPS="10.0.0.1",
            SKYPILOT_NUM_GPUS_PER_NODE="1",
            SKYPILOT_CLUSTER_INFO=json.dumps({"cluster_name": f"llm-{attempt}", "cloud": "AWS", "region": region, "zone": zone, "num_nodes": 1, "provider_name": "aws"}),
            TRAINLOG_COST_PER_HOUR=str(price),
            TRAINLOG_SPOT="1",
        )
        started = time.time()
        proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        lines = []
        while True:
            line = proc.stdout.readline()
            assert line, f"attempt {attempt} ended early: {''.join(lines)} {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line)
            if line.startswith(("READY", "DONE")):
                break
        if sig is not None:
            proc.send_signal(sig)
        proc.wait(timeout=60)
        measured.append(time.time() - started)
        assert lines[0].split() == ["RESUMED", "0" if attempt == 1 else lines[0].split()[1]]

    api = trainlog.Api(client_env["TRAINLOG_SERVER"])
    [listed] = api.runs("spot")
    detail = run_detail(client_env, listed.id)
    assert detail["status"] == "finished"
    attempts = detail["attempts"]
    # The SIGKILLed attempt fell silent; SkyPilot's recovery (another cluster) says it was preempted.
    assert [a["status"] for a in attempts] == ["preempted", "preempted", "preempted", "finished"]
    assert attempts[0]["ended_by"] == "rank 0 preempted: SIGTERM on a spot instance", attempts[0]
    assert "after it ended lost" in attempts[1]["ended_by"], attempts[1]
    assert [a["zone"] for a in attempts] == [p[0] for p in plan]
    assert [a["cloud"] for a in attempts] == ["aws"] * 4
    assert [a["usd_per_hour"] for a in attempts] == [p[1] for p in plan], "each attempt keeps its own price"
    assert all(a["spot"] is True for a in attempts)
    for a, seconds in zip(attempts, measured):
        assert a["end_time"] is not None
        # The recorded span is the attempt's own, within the time a process takes to start and stop.
        assert abs((a["end_time"] - a["start_time"]) / 1000 - seconds) < 5, (a, seconds)

    # Cost: the sum over attempts of each one's price × its duration.
    by_hand = sum(a["usd_per_hour"] * (a["end_time"] - a["start_time"]) / 3.6e6 for a in attempts)
    job = detail["job"]
    assert job["attempts"] == 4
    assert job["cost_usd"] == pytest.approx(by_hand, rel=1e-9)
    # Lost work: the steps after each interrupted attempt's last checkpoint, redone by the next.
    for a, (_, _, extra, _) in zip(attempts[:3], plan):
        assert a["lost_steps"] == extra, a
        assert a["last_step"] - a["last_checkpoint_step"] == extra
        lost_hours = (a["end_time"] - a["last_checkpoint_time"]) / 3.6e6
        assert a["lost_usd"] == pytest.approx(a["usd_per_hour"] * lost_hours, rel=1e-9)
        assert a["lost_gpu_hours"] == pytest.approx(lost_hours, rel=1e-9), "one GPU"
    assert [a["steps_replayed"] for a in attempts] == [0] + [p[2] for p in plan[:3]], [(a["first_step"], a["last_step"], a["last_checkpoint_step"]) for a in attempts]
    assert job["steps_replayed"] == sum(p[2] for p in plan[:3])
    assert job["lost_usd"] == pytest.approx(sum(a["lost_usd"] for a in attempts), rel=1e-9)
    assert detail["summary"]["cost/lost_usd"]["last"] == pytest.approx(job["lost_usd"], rel=1e-6)
    # Search reads the same figures.
    assert [r.id for r in api.runs("spot", filter="attempts > 1 and lost_usd > 0")] == [listed.id]
    assert [r.id for r in api.runs("spot", filter=f"steps_replayed = {job['steps_replayed']} and gpus = 1")] == [listed.id]
    assert api.runs("spot", filter="attempts > 4") == []

    # The metric continues without duplicates: one point per step, the latest attempt's value.
    loss = api.run(listed.id).history("loss")
    assert [p["step"] for p in loss] == list(range(60))
    last_writer = {}
    for number, a in enumerate(attempts, start=1):
        for step in range(a["first_step"], a["last_step"] + 1):
            last_writer[step] = number
    assert [p["value"] for p in loss] == [step + 1000 * last_writer[step] for step in range(60)]


SLURM_TASK = textwrap.dedent(
    """
    import os, sys, time
    import trainlog
    run = trainlog.init(project="slurm-jobs", name="bert-slurm", config={"lr": 0.01}, cost={"per_gpu_hour": 1.5})
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    for step in range(10):
        run.log({"loss": 1.0 / (step + 1), "restart": float(restart)}, step=step)
    run.flush(30)
    if restart == "0":
        # The first start waits to be requeued (bounded: the test requeues it).
        print("JOINED", run.rank, run.id, flush=True)
        time.sleep(300)
    run.finish()
    print("DONE", run.rank, run.id, run.attempt, flush=True)
    """
)


def slurm(env: Dict[str, str], *args: str) -> str:
    done = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{args}: {done.stdout} {done.stderr}"
    return done.stdout


# Its fixture may install Slurm's packages first (up to 900 s).
@pytest.mark.timeout(1200)
def test_srun_tasks_are_one_run_and_a_requeue_is_its_second_attempt(client_env: dict, tmp_path: Path, slurm_conf: str) -> None:
    task = tmp_path / "task.py"
    task.write_text(SLURM_TASK)
    batch = tmp_path / "job.sh"
    batch.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --ntasks=4 --overcommit --requeue -o {tmp_path}/out-%j.txt\n"
        f"srun --ntasks=4 --overcommit {sys.executable} {task}\n"
    )
    env = dict(os.environ, **client_env, SLURM_CONF=slurm_conf, TRAINLOG_HEARTBEAT_SECONDS="0.5", TRAINLOG_GPUS_PER_NODE="2")
    job = slurm(env, "sbatch", "--parsable", str(batch)).strip().split(";")[0]
    api = trainlog.Api(client_env["TRAINLOG_SERVER"])

    def joined_run() -> Any:
        try:
            runs = api.runs("slurm-jobs")
        except trainlog.NotFoundError:
            return None
        if len(runs) != 1:
            return None
        detail = run_detail(client_env, runs[0].id)
        return detail if detail["attempts"] and detail["attempts"][-1]["ranks"] == 4 else None

    def diagnose() -> str:
        outputs = "".join(p.read_text() for p in tmp_path.glob("out-*.txt"))
        queue = subprocess.run(["squeue", "-j", job], env=env, capture_output=True, text=True).stdout
        try:
            details = [json.dumps(run_detail(client_env, r.id)["attempts"], indent=1) for r in api.runs("slurm-jobs")]
        except trainlog.NotFoundError:
            details = ["no run"]
        return f"{queue}\n{outputs}\n{details}"

    first = wait_for("4 tasks to join", joined_run, diagnose=diagnose)
    assert first["job"]["launcher"] == "slurm" and first["job"]["world_size"] == 4 and first["job"]["node_count"] == 1
    assert first["job"]["job_id"].endswith(job), first["job"]
    # Its queue wait: from Slurm's SubmitTime (as scontrol says it, in UTC) to the first start.
    shown = slurm(dict(env, TZ="UTC"), "scontrol", "show", "job", "-o", job)
    submit = next(kv.split("=", 1)[1] for kv in shown.split() if kv.startswith("SubmitTime="))
    submitted_ms = int(datetime.datetime.fromisoformat(submit).replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)
    attempt = first["attempts"][0]
    assert attempt["submitted_time"] == submitted_ms, (attempt, shown)
    assert attempt["start_time"] >= submitted_ms
    # Requeue: Slurm stops the tasks (SIGTERM) and starts the job again with SLURM_RESTART_COUNT=1.
    slurm(env, "scontrol", "requeue", job)
    # It starts again once its credential expired (10 s on the test cluster).
    done = wait_for("the second attempt to finish", lambda: (d := run_detail(client_env, first["id"]))["status"] == "finished" and d, 180, diagnose)

    assert [r.id for r in api.runs("slurm-jobs")] == [first["id"]], "one run for the job and its requeue"
    report = api.report(projects=["slurm-jobs"])["total"]
    assert report["queue_wait_s"] == (attempt["start_time"] - submitted_ms) / 1000, report
    assert report["covers"]["queue_wait_s"] == 1
    attempts = done["attempts"]
    assert [a["status"] for a in attempts] == ["preempted", "finished"]
    assert [a["ranks"] for a in attempts] == [4, 4]
    assert [len(a["nodes"]) for a in attempts] == [1, 1]
    assert attempts[0]["nodes"][0]["gpus"] == 2 and attempts[0]["nodes"][0]["usd_per_hour"] == 3.0
    assert attempts[0]["nodes"][0]["gpus_source"] == "TRAINLOG_GPUS_PER_NODE=2; NVML shows none", attempts[0]["nodes"]
    assert done["job"]["attempts"] == 2
    # Rank 0's metrics only, the second attempt's values over the first's; one node's system series.
    history = api.run(first["id"]).history("restart")
    assert [(p["step"], p["value"]) for p in history] == [(s, 1.0) for s in range(10)]
    keys = sorted(done["summary"])
    assert "sys/cpu.percent" in keys and not [k for k in keys if k.startswith(("sys/node/", "rank/"))], keys


PER_RANK_SCRIPT = textwrap.dedent(
    """
    import trainlog
    run = trainlog.init(project="per-rank", rank_metrics=True, system_metrics_interval=None, cost=False)
    for step in range(5):
        run.log({"grad_norm": 10.0 * run.rank + step}, step=step)
    run.finish()
    """
)


@pytest.mark.timeout(120)
def test_per_rank_series_and_trainlog_variables(client_env: dict, tmp_path: Path) -> None:
    script = tmp_path / "per_rank.py"
    script.write_text(PER_RANK_SCRIPT)
    base = dict(os.environ, **client_env, TRAINLOG_JOB_ID="my-job-7", TRAINLOG_WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, str(script)], env=dict(base, TRAINLOG_RANK=str(r)), stderr=subprocess.PIPE, text=True) for r in (1, 0)]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    [run] = trainlog.Api(client_env["TRAINLOG_SERVER"]).runs("per-rank")
    detail = run_detail(client_env, run.id)
    assert (detail["job"]["launcher"], detail["job"]["job_id"], detail["job"]["world_size"]) == ("trainlog", "my-job-7", 2)
    assert detail["status"] == "finished"
    keys = [k for k in keys_of(detail) if not k.startswith(("sys/", "cost/"))]
    assert keys == ["grad_norm", "rank/0/grad_norm", "rank/1/grad_norm"]
    api = trainlog.Api(client_env["TRAINLOG_SERVER"])
    assert [p["value"] for p in api.run(run.id).history("rank/1/grad_norm")] == [10.0, 11.0, 12.0, 13.0, 14.0]
    assert [p["value"] for p in api.run(run.id).history("grad_norm")] == [0.0, 1.0, 2.0, 3.0, 4.0]
    # What was detected, and from where, is recorded with each process.
    processes = detail["attempts"][0]["processes"]
    assert [p["rank"] for p in processes] == [0, 1]
    assert all(p["status"] == "finished" for p in processes)
    context = processes[1]["context"]
    assert (context["rank"], context["job_id"], context["detected_from"]["rank"]) == (1, "my-job-7", "TRAINLOG_RANK")


FAILING_RANK_SCRIPT = textwrap.dedent(
    """
    import os
    import trainlog
    run = trainlog.init(project="failing", system_metrics_interval=None, cost={"per_gpu_hour": 1.0})
    for step in range(8):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
        if run.rank == int(os.environ["FAILING_RANK"]) and step == 4:
            run.flush(30)
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
    run.finish()
    """
)


@pytest.mark.timeout(120)
def test_a_failed_rank_fails_the_run_and_its_attempt_says_which_and_why(client_env: dict, tmp_path: Path) -> None:
    script = tmp_path / "failing.py"
    script.write_text(FAILING_RANK_SCRIPT)
    base = dict(os.environ, **client_env, TRAINLOG_JOB_ID="bert-ft-3", TRAINLOG_WORLD_SIZE="4", TRAINLOG_GPUS_PER_NODE="4", FAILING_RANK="2")
    procs = [(r, subprocess.Popen([sys.executable, str(script)], env=dict(base, TRAINLOG_RANK=str(r), TRAINLOG_LOCAL_RANK=str(r)), stderr=subprocess.PIPE, text=True)) for r in (3, 0, 2, 1)]
    codes = {}
    for rank, proc in procs:
        _, err = proc.communicate(timeout=90)
        codes[rank] = (proc.returncode, err)
    assert codes[2][0] != 0 and "illegal memory access" in codes[2][1], "rank 2 died of its exception"
    assert all(codes[r][0] == 0 for r in (0, 1, 3)), codes

    # Read through the public API, as a user would.
    api = trainlog.Api(client_env["TRAINLOG_SERVER"])
    [listed] = api.runs("failing")
    run = api.run(listed.id)
    assert run.status == "failed"
    assert run.job is not None and (run.job["launcher"], run.job["job_id"], run.job["world_size"]) == ("trainlog", "bert-ft-3", 4)
    [attempt] = run.attempts
    assert attempt["status"] == "failed"
    assert attempt["reason"] == "rank 2 failed: RuntimeError: CUDA error: an illegal memory access was encountered", attempt
    assert "Traceback" in attempt["last_lines"] and attempt["last_lines"].rstrip().endswith("illegal memory access was encountered")
    statuses = {p["rank"]: p["status"] for p in attempt["processes"]}
    assert statuses == {0: "finished", 1: "finished", 2: "failed", 3: "finished"}
    failed = next(p for p in attempt["processes"] if p["rank"] == 2)
    assert failed["reason"].startswith("RuntimeError")
    assert [p["step"] for p in run.history("loss")] == list(range(8)), "rank 0 logged every step"
