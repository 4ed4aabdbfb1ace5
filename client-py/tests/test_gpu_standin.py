"""The GPU collector end to end, over the stand-in NVML library of tests/nvml-standin: a training
process loads it in place of the driver's libnvidia-ml.so.1, and its readings come from a file the
test rewrites while the run goes. The run is read back from the server."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest
import trainlog
from helpers import gpu, wait_for, write_gpus

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"

# Logs until the test creates the stop file, so the test decides when the run ends.
TRAINING = """
import os, time
from pathlib import Path
import trainlog
run = trainlog.init(project="gpu-standin", system_metrics_interval=0.1)
Path(os.environ["RUN_ID_FILE"]).write_text(run.id)
stop = Path(os.environ["STOP_FILE"])
step = 0
while not stop.exists():
    run.log({"loss": 1.0 / (step + 1)}, step=step)
    step += 1
    time.sleep(0.05)
run.finish()
"""


class Training:
    """A training process using the stand-in library, and the run it logs to."""

    def __init__(
        self, folder: Path, client_env: dict, standin: Path, gpu_file: Path, extra_env: Dict[str, str]
    ) -> None:
        self.folder = folder
        self.run_id_file = folder / "run-id"
        self.stop_file = folder / "stop"
        self.output = folder / "training.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINLOG_", "SLURM_", "CUDA_VISIBLE_DEVICES"))}
        env.update(client_env)
        env.update(
            LD_LIBRARY_PATH=str(standin),
            TRAINLOG_NVML_STANDIN=str(gpu_file),
            RUN_ID_FILE=str(self.run_id_file),
            STOP_FILE=str(self.stop_file),
            TRAINLOG_QUIET="1",
        )
        env.update(extra_env)
        with self.output.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-c", TRAINING], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self.api = trainlog.Api(client_env["TRAINLOG_SERVER"])
        self.run_id = wait_for("the training to start its run", self.started_run, diagnose=self.diagnose)

    def started_run(self) -> Any:
        if self.process.poll() is not None:
            raise AssertionError(f"the training exited early:\n{self.diagnose()}")
        return self.run_id_file.exists() and self.run_id_file.read_text()

    def diagnose(self) -> str:
        return self.output.read_text()

    def run(self) -> trainlog.ApiRun:
        return self.api.run(self.run_id)

    def values(self, key: str) -> List[float]:
        return [point["value"] for point in self.run().history(key)]

    def wait_for_last(self, key: str, expected: float) -> List[float]:
        """Waits until the series' last value is `expected`; answers the whole series."""

        def arrived() -> Any:
            values = self.values(key) if key in self.run().summary else []
            return values if values and values[-1] == expected else None

        return wait_for(
            f"{key} to read {expected}",
            arrived,
            diagnose=lambda: f"{key}: {self.values(key) if key in self.run().summary else 'absent'}\n{self.diagnose()}",
        )

    def count(self, key: str) -> int:
        return int(self.run().summary.get(key, {}).get("count", 0))

    def finish(self) -> trainlog.ApiRun:
        self.stop_file.write_text("")
        assert self.process.wait(timeout=60) == 0, self.diagnose()
        return self.run()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Trainings:
    """Starts trainings over the stand-in, all reading `gpu_file`."""

    def __init__(self, folder: Path, client_env: dict, standin: Path) -> None:
        self.folder = folder
        self.client_env = client_env
        self.standin = standin
        self.gpu_file = folder / "gpus.txt"
        self.started: List[Training] = []

    def start(self, gpus: List[Dict[str, Any]], extra_env: Optional[Dict[str, str]] = None) -> Training:
        write_gpus(self.gpu_file, gpus)
        folder = self.folder / f"training-{len(self.started)}"
        folder.mkdir()
        self.started.append(Training(folder, self.client_env, self.standin, self.gpu_file, extra_env or {}))
        return self.started[-1]


@pytest.fixture
def trainings(tmp_path: Path, client_env: dict, standin_dir: Path) -> Iterator[Trainings]:
    """Trainings over the stand-in; any still running at the end are killed."""
    made = Trainings(tmp_path, client_env, standin_dir)
    yield made
    for t in made.started:
        t.kill()


@pytest.mark.timeout(180)
def test_sm_activity_tells_tiny_kernels_from_work_where_util_reads_100_for_both(trainings: Trainings) -> None:
    # As measured on an H200: NVML's util reads 100 for a GPU that runs one tiny kernel at a time as
    # for one doing matmuls; SM activity tells them apart. The A100 has no GPM.
    tiny_kernels = gpu(H100, 0, gpm="yes", sm_active=2, sm_occupancy=1.5, tensor_active=0, power_mw=120_000)
    busy = gpu(H100, 1, gpm="yes", sm_active=95, sm_occupancy=40.25, tensor_active=89.1, power_mw=620_000)
    no_gpm = gpu(A100, 2, gpm="no", power_mw=400_000)
    t = trainings.start([tiny_kernels, busy, no_gpm])

    t.wait_for_last("sys/gpu.0.sm_active", 2.0)
    t.wait_for_last("sys/gpu.1.sm_active", 95.0)
    wait_for("ten samples of the A100", lambda: t.count("sys/gpu.2.util") >= 10, diagnose=t.diagnose)
    summary = t.run().summary
    for i in (0, 1, 2):
        assert summary[f"sys/gpu.{i}.util"]["min"] == summary[f"sys/gpu.{i}.util"]["max"] == 100, summary
    assert set(t.values("sys/gpu.0.sm_active")) == {2.0}
    assert set(t.values("sys/gpu.1.sm_active")) == {95.0}
    assert (summary["sys/gpu.0.sm_occupancy"]["last"], summary["sys/gpu.0.tensor_active"]["last"]) == (1.5, 0.0)
    assert (summary["sys/gpu.1.sm_occupancy"]["last"], summary["sys/gpu.1.tensor_active"]["last"]) == (40.25, 89.1)
    assert summary["sys/gpu.2.power_w"]["last"] == 400.0
    assert not [
        k
        for k in summary
        if k.startswith("sys/gpu.2.") and k.split(".")[-1] in ("sm_active", "sm_occupancy", "tensor_active")
    ], summary
    devices = t.run().metadata["environment"]["gpu"]["devices"]
    assert [(d["name"], d["gpm"]) for d in devices] == [(H100, True), (H100, True), (A100, False)], devices

    # The tiny kernels give way to work: the next interval's reading follows.
    write_gpus(trainings.gpu_file, [{**tiny_kernels, "sm_active": 96.6}, busy, no_gpm])
    t.wait_for_last("sys/gpu.0.sm_active", 96.6)
    assert t.finish().status == "finished"


@pytest.mark.timeout(180)
def test_energy_is_the_counter_since_the_run_started_and_survives_a_counter_reset(trainings: Trainings) -> None:
    start_mj = 7_000_000_000  # the driver loaded long before the run: its counter is far from 0
    t = trainings.start([gpu(H100, 0, energy_mj=start_mj)])
    t.wait_for_last("sys/gpu.0.energy_j", 0.0)

    write_gpus(trainings.gpu_file, [gpu(H100, 0, energy_mj=start_mj + 1_234_567)])
    t.wait_for_last("sys/gpu.0.energy_j", (1_234_567) / 1000)

    # The driver reloads: the counter starts again from near 0. No energy is taken back.
    before = t.count("sys/gpu.0.energy_j")
    write_gpus(trainings.gpu_file, [gpu(H100, 0, energy_mj=500)])
    wait_for("samples after the reset", lambda: t.count("sys/gpu.0.energy_j") >= before + 5, diagnose=t.diagnose)
    assert t.values("sys/gpu.0.energy_j")[before:] == [1_234_567 / 1000] * (t.count("sys/gpu.0.energy_j") - before)
    write_gpus(trainings.gpu_file, [gpu(H100, 0, energy_mj=500 + 10_000)])
    t.wait_for_last("sys/gpu.0.energy_j", (1_234_567 + 10_000) / 1000)

    run = t.finish()
    series = t.values("sys/gpu.0.energy_j")
    assert series == sorted(series), "energy never decreases"
    assert run.summary["sys/gpu.0.energy_j"]["last"] == (1_234_567 + 10_000) / 1000


@pytest.mark.timeout(180)
def test_a_task_bound_to_one_gpu_records_and_samples_both_gpus_of_its_node(trainings: Trainings) -> None:
    # Slurm's per-task binding: the job holds GPUs 0 and 1 of the node, this task sees only GPU 1.
    slurm = {
        "SLURM_JOB_ID": str(uuid.uuid4().int % 10**9),
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_NODEID": "0",
        "SLURM_NNODES": "1",
        "SLURM_JOB_GPUS": "0,1",
        "SLURM_GPUS_ON_NODE": "2",
        "CUDA_VISIBLE_DEVICES": "1",
    }
    t = trainings.start([gpu(H100, 0, util=37), gpu(H100, 1, util=81)], slurm)

    t.wait_for_last("sys/gpu.0.util", 37.0)
    t.wait_for_last("sys/gpu.1.util", 81.0)
    node = wait_for(
        "the node of the run's attempt",
        lambda: (a := t.run().attempts) and a[0]["nodes"] and a[0]["nodes"][0],
        diagnose=t.diagnose,
    )
    assert node["gpus"] == 2, node
    assert node["gpus_source"] == "SLURM_GPUS_ON_NODE=2, as NVML shows", node
    # The process itself sees one GPU: its environment record says so.
    devices = t.run().metadata["environment"]["gpu"]["devices"]
    assert [d["nvml_index"] for d in devices] == [1], devices
    assert t.finish().status == "finished"


@pytest.mark.timeout(180)
def test_processes_bound_to_one_gpu_each_count_as_many_gpus_as_the_node_runs(trainings: Trainings) -> None:
    # torchrun's two processes on a node of two GPUs, each bound to its own by CUDA_VISIBLE_DEVICES.
    torchrun = {
        "TORCHELASTIC_RUN_ID": str(uuid.uuid4()),
        "RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    t = trainings.start([gpu(H100, 0, util=50), gpu(H100, 1, util=60)], torchrun)
    node = wait_for(
        "the node of the run's attempt",
        lambda: (a := t.run().attempts) and a[0]["nodes"] and a[0]["nodes"][0],
        diagnose=t.diagnose,
    )
    assert node["gpus"] == 2, node
    assert node["gpus_source"] == "LOCAL_WORLD_SIZE=2 used; NVML shows 1 (watching 0) disagrees", node
    t.kill()


@pytest.mark.timeout(180)
def test_a_resumed_run_adds_its_energy_to_what_the_run_had_used(trainings: Trainings) -> None:
    first = trainings.start([gpu(H100, 0, energy_mj=2_000_000)])
    first.wait_for_last("sys/gpu.0.energy_j", 0.0)
    write_gpus(trainings.gpu_file, [gpu(H100, 0, energy_mj=2_005_000)])
    first.wait_for_last("sys/gpu.0.energy_j", 5.0)
    assert first.finish().status == "finished"

    # Resumed on another machine, whose counter stands elsewhere.
    resume = {"TRAINLOG_RUN_ID": first.run_id, "TRAINLOG_RESUME": "must"}
    second = trainings.start([gpu(H100, 0, energy_mj=9_000_000)], resume)
    assert second.run_id == first.run_id
    written = second.count("sys/gpu.0.energy_j")
    wait_for(
        "the resumed run's samples", lambda: second.count("sys/gpu.0.energy_j") > written + 2, diagnose=second.diagnose
    )
    assert second.values("sys/gpu.0.energy_j")[-1] == 5.0
    write_gpus(trainings.gpu_file, [gpu(H100, 0, energy_mj=9_002_000)])
    second.wait_for_last("sys/gpu.0.energy_j", 7.0)
    series = second.values("sys/gpu.0.energy_j")
    assert series == sorted(series), series
    assert second.finish().summary["sys/gpu.0.energy_j"]["last"] == 7.0
