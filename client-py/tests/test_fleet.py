"""One fleet, every way a run ends, and the report's figures computed again by hand from what the
server recorded of each run: real processes through the Python client on one server, two of
them Slurm jobs on the test cluster (one `scancel`led, one requeued with its two tasks each bound
to one of the node's two GPUs), a job SIGKILLed on every rank, a SkyPilot recovery, a SIGTERM on
a spot instance, a crash, and two finished runs of which one is archived and one deleted for good.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import textwrap
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Dict, List

import pytest
import trainlog
from helpers import Server, gpu, wait_for, write_gpus

MEMBER = textwrap.dedent(
    """
    import os, time
    import trainlog

    if "PER_GPU_HOUR" in os.environ:
        cost = {"per_gpu_hour": float(os.environ["PER_GPU_HOUR"])}
    else:
        cost = {"per_hour": float(os.environ["PER_HOUR"])}
    interval = float(os.environ["SYS_INTERVAL"]) if "SYS_INTERVAL" in os.environ else None
    run = trainlog.init(project="fleet", name=os.environ["MEMBER"], cost=cost, system_metrics_interval=interval)
    mode = os.environ["MODE"]
    if mode == "requeue":
        mode = "hold" if os.environ.get("SLURM_RESTART_COUNT", "0") == "0" else "finish"
    for step in range(5):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
    run.flush(30)
    if mode == "raise":
        raise RuntimeError("the loss diverged")
    if mode == "hold":
        print("READY", run.rank, flush=True)
        time.sleep(300)
    run.finish()
    print("DONE", flush=True)
    """
)

H100 = "NVIDIA H100 80GB HBM3"


def detail(server: str, run_id: str) -> Dict[str, Any]:
    return trainlog.Api(server)._native.run(run_id)


def cost_by_hand(run: Dict[str, Any]) -> float:
    """Each node's price × how long it ran, over every attempt."""
    return sum(
        n["usd_per_hour"] * (n["end_time"] - n["start_time"]) / 3.6e6 for a in run["attempts"] for n in a["nodes"]
    )


def gpu_hours_by_hand(run: Dict[str, Any]) -> float:
    return sum(n["gpus"] * (n["end_time"] - n["start_time"]) / 3.6e6 for a in run["attempts"] for n in a["nodes"])


def nearest_rank(values: List[float], share: float) -> float:
    ordered = sorted(values)
    rank = -(-len(ordered) * share // 1)  # ceil
    return ordered[int(rank) - 1]


def post(server: str, path: str, method: str = "POST") -> None:
    body = b"{}" if method == "POST" else None
    request = urllib.request.Request(
        server + "/api/v1" + path, data=body, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200


class Fleet:
    """The members' processes, started against one server; all killed at the end."""

    def __init__(self, folder: Path, base_env: Dict[str, str]) -> None:
        self.folder = folder
        self.base_env = base_env
        self.script = folder / "member.py"
        self.script.write_text(MEMBER)
        self.procs: List[subprocess.Popen[str]] = []

    def env(self, member: str, mode: str, **extra: str) -> Dict[str, str]:
        return dict(self.base_env, MEMBER=member, MODE=mode, **extra)

    def start(self, member: str, mode: str, **extra: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(self.script)],
            env=self.env(member, mode, **extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def sbatch(self, member: str, mode: str, tasks: str, requeue: bool = False, **extra: str) -> str:
        batch = self.folder / f"{member}.sh"
        options = tasks + (" --requeue" if requeue else "")
        out = self.folder / f"{member}-%j.txt"
        batch.write_text(f"#!/bin/bash\n#SBATCH {options} -o {out}\nsrun {tasks} {sys.executable} {self.script}\n")
        done = subprocess.run(
            ["sbatch", "--parsable", str(batch)],
            env=self.env(member, mode, **extra),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().split(";")[0]

    def output(self, member: str) -> str:
        return "".join(p.read_text() for p in self.folder.glob(f"{member}-*.txt"))

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("READY"), f"{line} {proc.stderr.read() if proc.stderr else ''}"


# Its fixture may install Slurm's packages first (up to 900 s).
@pytest.mark.timeout(1200)
def test_a_fleet_of_every_end_adds_up_to_the_report_by_hand(tmp_path: Path, slurm_conf: str, standin_dir: Path) -> None:
    server = Server(tmp_path / "data")
    server.start(extra_args=("--lost-after-s", "2"))
    url = server.url
    gpus = tmp_path / "gpus.txt"
    write_gpus(gpus, [gpu(H100, 0, util=90), gpu(H100, 1, util=90)])
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    base.update(
        TRAINLOG_SERVER=url,
        TRAINLOG_DIR=str(tmp_path / "client-state"),
        TRAINLOG_HEARTBEAT_SECONDS="0.3",
        TRAINLOG_QUIET="1",
        SLURM_CONF=slurm_conf,
        # The stand-in NVML: two H100s on this node, each at 90 % utilization.
        LD_LIBRARY_PATH=str(standin_dir),
        TRAINLOG_NVML_STANDIN=str(gpus),
    )
    fleet = Fleet(tmp_path, base)
    api = trainlog.Api(url)
    try:
        # Slurm: one job someone cancels, and one requeued whose two tasks are each bound to
        # one GPU of the node (`--gpus-per-task=1`: CUDA_VISIBLE_DEVICES=0 for rank 0).
        cancelled_job = fleet.sbatch("cancelled", "hold", "--ntasks=1", PER_HOUR="2.0")
        requeued_job = fleet.sbatch(
            "requeued",
            "requeue",
            "--ntasks=2 --gpus-per-task=1 --overcommit",
            requeue=True,
            PER_GPU_HOUR="3.44",
            SYS_INTERVAL="0.5",
        )
        # A two-rank job whose processes all vanish.
        job = uuid.uuid4().hex
        vanished = [
            fleet.start(
                "vanished",
                "hold",
                PER_HOUR="4.0",
                TRAINLOG_JOB_ID=job,
                TRAINLOG_RANK=str(rank),
                TRAINLOG_WORLD_SIZE="2",
                CUDA_VISIBLE_DEVICES="",
            )
            for rank in range(2)
        ]
        # A SkyPilot managed job on on-demand capacity, recovered on another cluster.
        task_id = f"sky-managed-2026_11_28-10-00-00-000000_fleet_{uuid.uuid4().hex[:6]}-0"

        def skypilot(attempt: int, zone: str) -> Dict[str, str]:
            info = {
                "cluster_name": f"fleet-{attempt}",
                "cloud": "AWS",
                "region": zone[:-1],
                "zone": zone,
                "num_nodes": 1,
            }
            return dict(
                PER_HOUR="1.0",
                CUDA_VISIBLE_DEVICES="",
                SKYPILOT_TASK_ID=task_id,
                SKYPILOT_NODE_RANK="0",
                SKYPILOT_NUM_NODES="1",
                SKYPILOT_NODE_IPS="10.0.0.1",
                SKYPILOT_CLUSTER_INFO=json.dumps(info),
            )

        recovered = fleet.start("recovered", "hold", **skypilot(1, "us-east-1a"))
        spot = fleet.start("spot", "hold", PER_HOUR="1.5", TRAINLOG_SPOT="1", CUDA_VISIBLE_DEVICES="0")
        crashed = fleet.start("crashed", "raise", PER_HOUR="1.0", CUDA_VISIBLE_DEVICES="")
        kept = fleet.start("kept", "finish", PER_HOUR="1.0", CUDA_VISIBLE_DEVICES="")
        gone = fleet.start("gone", "finish", PER_HOUR="1.0", CUDA_VISIBLE_DEVICES="")

        for proc in [*vanished, recovered, spot]:
            ready(proc)
        wait_for(
            "the Slurm tasks to join",
            lambda: fleet.output("cancelled").count("READY") == 1 and fleet.output("requeued").count("READY") == 2,
            120,
            lambda: fleet.output("cancelled") + fleet.output("requeued"),
        )
        for proc in vanished:
            proc.send_signal(signal.SIGKILL)
        for proc in (recovered, spot):
            proc.send_signal(signal.SIGTERM)
        subprocess.run(["scancel", cancelled_job], env=base, check=True, timeout=60)
        subprocess.run(["scontrol", "requeue", requeued_job], env=base, check=True, timeout=60)
        for proc in (recovered, spot, crashed, kept, gone, *vanished):
            proc.wait(timeout=60)
        assert recovered.returncode != 0 and crashed.returncode != 0 and kept.returncode == gone.returncode == 0
        fleet.start("recovered", "finish", **skypilot(2, "us-west-2b")).wait(timeout=60)

        by_name = lambda: {r.name: r for r in api.runs("fleet")}  # noqa: E731
        ends = {
            "vanished": "lost",
            "cancelled": "killed",
            "requeued": "finished",
            "recovered": "finished",
            "spot": "preempted",
            "crashed": "failed",
            "kept": "finished",
            "gone": "finished",
        }
        runs = wait_for(
            "every run to end as expected",
            lambda: (r := by_name()) and {n: x.status for n, x in r.items()} == ends and r,
            180,
            lambda: json.dumps({n: x.status for n, x in by_name().items()}) + fleet.output("requeued"),
        )
        detailed = {name: detail(url, r.id) for name, r in runs.items()}

        # What decided each end.
        ended_by = {name: [a["ended_by"] for a in d["attempts"]] for name, d in detailed.items()}
        assert re.fullmatch(
            r"rank [01] lost: no heartbeat from any process of its attempt for 2 s", ended_by["vanished"][0]
        ), ended_by
        assert ended_by["cancelled"][0].startswith("rank 0 killed: SIGTERM; Slurm says the job is "), ended_by
        assert ended_by["cancelled"][0].endswith(", not preempted"), ended_by
        requeued = detailed["requeued"]["attempts"]
        assert [a["status"] for a in requeued] == ["preempted", "finished"], ended_by
        # Slurm's state when its SIGTERM arrives may not say requeue yet; the start that follows does.
        assert requeued[0]["ended_by"].startswith(
            "preempted: its launcher started the job again (restart=slurm=0 -> restart=slurm=1)"
        ), ended_by
        recovered_attempts = detailed["recovered"]["attempts"]
        assert [a["status"] for a in recovered_attempts] == ["preempted", "finished"]
        assert recovered_attempts[0]["ended_by"].startswith("preempted: its launcher started the job again ("), ended_by
        assert recovered_attempts[0]["ended_by"].endswith("after it ended killed"), ended_by
        assert ended_by["spot"] == ["rank 0 preempted: SIGTERM on a spot instance"]

        # Every GPU the requeued job held on its node: two, priced at 2 × $3.44.
        for attempt in requeued:
            [node] = attempt["nodes"]
            assert (node["gpus"], node["usd_per_hour"]) == (2, 6.88), node
            assert node["gpus_source"] == "SLURM_GPUS_ON_NODE=2, as NVML shows", node
        # A job whose processes all vanished: all of its time is lost work at its price.
        [lost] = detailed["vanished"]["attempts"]
        assert lost["lost_usd"] == pytest.approx(4.0 * (lost["end_time"] - lost["start_time"]) / 3.6e6, rel=1e-9)
        assert detailed["vanished"]["job"]["usd_per_hour"] == 0

        # The report, by hand from the records.
        total = api.report(projects=["fleet"])["total"]
        assert total["runs"] == 8
        assert (
            total["inputs"]["finished"],
            total["infra_failures"],
            total["code_failures"],
            total["inputs"]["killed"],
        ) == (4, 2, 1, 1), total
        # Finished over ended (finished, failed, preempted, lost); the cancelled run is neither.
        assert total["job_success_rate"] == pytest.approx(4 / 7, rel=1e-12)
        cost = sum(cost_by_hand(d) for d in detailed.values())
        assert total["cost_usd"] == pytest.approx(cost, rel=1e-9)
        gpu_hours = sum(gpu_hours_by_hand(d) for d in detailed.values())
        assert total["inputs"]["provisioned_gpu_hours"] == pytest.approx(gpu_hours, rel=1e-9)
        # Samples count only inside the attempt they were taken in: the requeue's gap is not active.
        assert 0 < total["inputs"]["active_gpu_hours"] <= gpu_hours
        # The spot run's GPU-hours over all; its price was given by the job, so no on-demand
        # price is known and no dollars saved are guessed.
        assert total["spot_savings_rate"] == pytest.approx(gpu_hours_by_hand(detailed["spot"]) / gpu_hours, rel=1e-9)
        assert total["spot_savings_usd"] is None
        assert total["reasons"]["spot_savings_usd"] == "the catalog has no on-demand price for the 1 spot run(s)"
        # Time to result: submission (Slurm's SubmitTime, else the first start) to the end of each finished run.
        seconds = []
        for d in detailed.values():
            if d["status"] == "finished":
                first = d["attempts"][0]
                seconds.append((d["end_time"] - (first["submitted_time"] or first["start_time"])) / 1000)
        assert total["time_to_result_median_s"] == pytest.approx(statistics.median(seconds), rel=1e-9)
        assert total["time_to_result_p90_s"] == pytest.approx(nearest_rank(seconds, 0.9), rel=1e-9)

        # Archived and deleted for good: the money was spent all the same.
        post(url, f"/runs/{runs['kept'].id}/archive")
        post(url, f"/runs/{runs['gone'].id}/archive")
        post(url, f"/runs/{runs['gone'].id}", method="DELETE")
        after = api.report(projects=["fleet"])
        assert after["total"]["cost_usd"] == pytest.approx(cost, rel=1e-9)
        assert after["deleted_for_good"]["runs"] == 1
        assert after["deleted_for_good"]["cost_usd"] == pytest.approx(cost_by_hand(detailed["gone"]), rel=1e-9)
    finally:
        fleet.kill_all()
        for job_id in ("cancelled_job", "requeued_job"):
            value = locals().get(job_id)
            if value:
                subprocess.run(["scancel", value], env=base, timeout=60)
        server.stop()
