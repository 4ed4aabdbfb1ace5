"""One run per training job, launched by torchrun itself: four DDP processes on the gloo backend,
one of which fails on the first start, and torchrun's restart of the whole group."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import trainlog

torch = pytest.importorskip("torch", reason="the test command installs PyTorch; this test needs it")

DDP_SCRIPT = textwrap.dedent(
    """
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    import trainlog

    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    # A store of its own per start: gloo's mesh did not always form again through the agent's
    # store after torchrun restarted the workers.
    dist.init_process_group("gloo", init_method=f"file://{os.environ['WORK']}/store-{restart}",
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    run = trainlog.init(project="torchrun", name="ddp-gloo", config={"lr": 0.05}, cost={"per_gpu_hour": 2.0},
                        system_metrics_interval=0.3)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(dist.get_rank())
    x = torch.randn(64, 8, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    for step in range(20):
        if restart == 0 and step == 10 and dist.get_rank() == int(os.environ["FAILING_RANK"]):
            raise RuntimeError("injected failure on the first start")
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        run.log({"loss": loss.item(), "restart": float(restart)}, step=step)
        print(f"rank {dist.get_rank()} step {step} loss {loss.item():.5f}", flush=True)
    with open(os.path.join(os.environ["WORK"], f"done-{run.rank}"), "w") as f:
        f.write(f"{run.id} {run.attempt}")
    run.finish()
    dist.destroy_process_group()
    """
)


@pytest.mark.timeout(300)
def test_torchrun_four_processes_one_failing_then_restarted_are_one_run_of_two_attempts(
    client_env: dict, tmp_path: Path
) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    env = dict(
        os.environ,
        **client_env,
        FAILING_RANK="2",
        WORK=str(tmp_path),
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
        TRAINLOG_HEARTBEAT_SECONDS="0.3",
        TRAINLOG_GPUS_PER_NODE="4",
    )
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "4",
        "--max-restarts",
        "1",
        "--monitor-interval",
        "0.2",
        str(script),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "injected failure on the first start" in done.stderr, "the first start failed as planned"
    finished = {rank: (tmp_path / f"done-{rank}").read_text().split() for rank in range(4)}
    run_id = finished[0][0]
    assert set(map(tuple, finished.values())) == {(run_id, "2")}, (
        "every rank of the restart joined attempt 2 of one run"
    )

    api = trainlog.Api(client_env["TRAINLOG_SERVER"])
    [listed] = api.runs("torchrun")
    run = api.run(listed.id)
    assert run.id == run_id
    assert run.status == "finished"
    assert run.params["lr"] == 0.05
    job = run.job
    assert job is not None
    assert (job["launcher"], job["world_size"], job["node_count"], job["attempts"], job["gpus"]) == (
        "torchrun",
        4,
        1,
        2,
        4,
    )
    assert job["job_id"], "torchrun's rendezvous id names the job"

    first, second = run.attempts
    assert first["status"] == "failed" and second["status"] == "finished"
    assert first["reason"].startswith("rank 2 failed: RuntimeError: injected failure on the first start"), first[
        "reason"
    ]
    assert "injected failure" in first["last_lines"]
    assert [p["rank"] for p in first["processes"]] == [0, 1, 2, 3]
    assert [p["rank"] for p in second["processes"]] == [0, 1, 2, 3]
    assert all(p["status"] == "finished" for p in second["processes"])
    assert [p["context"]["detected_from"]["rank"] for p in second["processes"]] == ["RANK"] * 4
    assert [p["context"]["restart"] for p in second["processes"]] == ["torchelastic=1"] * 4
    assert [n["usd_per_hour"] for n in second["nodes"]] == [8.0], "4 GPUs at 2.0 each"
    assert first["end_time"] <= second["start_time"]

    # Rank 0's loss only, one point per step; the restart replayed the steps the first start logged.
    history = api.run(run.id).history("restart")
    assert [(p["step"], p["value"]) for p in history] == [(s, 1.0) for s in range(20)]
    assert first["last_step"] is not None and first["last_step"] <= 9, first
    assert second["steps_replayed"] == first["last_step"] + 1
    assert job["steps_replayed"] == first["last_step"] + 1
    assert "sys/cpu.percent" in run.summary, "one node's system series"
    by_hand = sum(
        n["usd_per_hour"] * (n["end_time"] - n["start_time"]) / 3.6e6 for a in run.attempts for n in a["nodes"]
    )
    assert job["cost_usd"] == pytest.approx(by_hand, rel=1e-9)

    # Console: each rank's own lines in both attempts, and the failing rank's traceback found by
    # a search, tagged with its rank, attempt and the last step it logged.
    lines = run.logs()
    printed = [line for line in lines if line["text"].startswith("rank ") and " loss " in line["text"]]
    assert all(line["text"].startswith(f"rank {line['rank']} ") for line in printed)
    assert {(line["rank"], line["attempt"]) for line in printed} == {(r, a) for r in range(4) for a in (1, 2)}
    assert len([line for line in printed if line["attempt"] == 2]) == 4 * 20, "the restart printed every step once"
    # PyTorch's launcher prefixes a rank's traceback lines with `[rankN]: `.
    [failure] = run.logs(search="RuntimeError: injected failure on the first start", stream="stderr")
    assert (failure["rank"], failure["attempt"], failure["step"]) == (2, 1, 9), failure
    assert failure["text"].endswith("RuntimeError: injected failure on the first start")
    failing = [line["text"] for line in run.logs(rank=2, attempt=1, stream="stderr")]
    [traceback_at] = [i for i, text in enumerate(failing) if text.endswith("Traceback (most recent call last):")]
    assert traceback_at < failing.index(failure["text"])
    assert run.logs(search=r"(^|: )RuntimeError: injected", regex=True, tail=1)[0]["n"] == failure["n"]


EXIT_SCRIPT = textwrap.dedent(
    """
    import os
    import sys
    import time
    from pathlib import Path
    import trainlog

    run = trainlog.init(project="torchrun-exits", name=os.environ["NAME"], system_metrics_interval=None)
    for step in range(5):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
    # Both ranks have joined before either exits: a rank still starting when torchrun stops it
    # ends only by the server's liveness check, which is not what this script is about.
    ready = Path(os.environ["READY_DIR"])
    (ready / os.environ["RANK"]).touch()
    for _ in range(600):
        if len(list(ready.iterdir())) >= int(os.environ["WORLD_SIZE"]):
            break
        time.sleep(0.05)
    sys.exit(int(os.environ["CODE"]))
    """
)


@pytest.mark.frameworks
@pytest.mark.timeout(300)
def test_sys_exit_codes_end_each_rank_of_a_torchrun_job_as_the_shell_sees_them(
    client_env: dict, tmp_path: Path
) -> None:
    script = tmp_path / "exits.py"
    script.write_text(EXIT_SCRIPT)
    for name, code in (("clean", 0), ("bad-data", 3)):
        ready = tmp_path / f"ready-{name}"
        ready.mkdir()
        env = dict(os.environ, **client_env, NAME=name, CODE=str(code), OMP_NUM_THREADS="1", READY_DIR=str(ready))
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "0",
            "--monitor-interval",
            "0.2",
            str(script),
        ]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
        assert (done.returncode == 0) == (code == 0), f"{done.stdout}\n{done.stderr}"
    api = trainlog.Api(client_env["TRAINLOG_SERVER"])
    runs = {r.name: api.run(r.id) for r in api.runs("torchrun-exits")}
    assert runs["clean"].status == "finished"
    assert runs["bad-data"].status == "failed", runs["bad-data"].attempts
    [attempt] = runs["bad-data"].attempts
    # Each rank exits 3, unless torchrun, seeing the other rank fail first, stopped it before its
    # own exit (SIGTERM, nothing saying it was a preemption): the attempt fails all the same.
    ends = [(p["rank"], p["status"], p["reason"]) for p in attempt["processes"]]
    assert [rank for rank, _, _ in ends] == [0, 1]
    assert any(status == "failed" for _, status, _ in ends), ends
    for _, status, reason in ends:
        assert (status, reason) == ("failed", "exit code 3") or (status == "killed" and reason.startswith("SIGTERM")), (
            ends
        )
    assert attempt["status"] == "failed" and attempt["ended_by"].endswith("failed: exit code 3"), attempt
