"""The Hugging Face `Trainer` callback: a 2-layer GPT-2 built from a config (no hub download)
trains a few steps on this CPU in a fresh interpreter against the real server; read back through
`trainlog.Api()`: the arguments, model config and size as params, every `on_log` value at its
step, the checkpoints with the trainer's retention, and the run's status after success, an
exception in training and SIGTERM; a restart resumes the same run from its latest checkpoint,
and a torchrun job of two processes, restarted after one failed, is one run that rank 0 logs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import trainlog
from helpers import Server, gpu, run_script, spawn_script, wait_for_line, write_gpus

pytestmark = [pytest.mark.timeout(300), pytest.mark.frameworks]

SETUP = """
import json, os, sys, time
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
torch.manual_seed(0)
torch.set_num_threads(1)
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
import trainlog
from trainlog.integrations.hf import TrainlogCallback, resume_checkpoint

class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        self.ids = torch.randint(0, 100, (n, 16), generator=torch.Generator().manual_seed(seed))
    def __len__(self):
        return len(self.ids)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

class Record(TrainerCallback):
    # What the trainer itself logged, printed for the test to compare with what arrived.
    def on_log(self, args, state, control, logs=None, **kwargs):
        print("LOG", state.global_step, json.dumps(logs), flush=True)
    def on_step_end(self, args, state, control, **kwargs):
        print("step", state.global_step, flush=True)
        time.sleep(SLEEP)
        if state.global_step == RAISE_AT:
            raise RuntimeError("loss went to the moon")

def trainer(callback, steps=20, wrap=lambda model: model):
    model = wrap(GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=32)))
    print("PARAMS", model.num_parameters(), flush=True)
    args = TrainingArguments(
        output_dir=OUT, max_steps=steps, per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=2,
        eval_strategy="steps", eval_steps=5, save_steps=5, save_total_limit=2, use_cpu=True,
        report_to="none", seed=0, run_name="tiny-gpt2", disable_tqdm=True,
    )
    return Trainer(model=model, args=args, train_dataset=Tokens(64, 1), eval_dataset=Tokens(8, 2),
                   callbacks=[callback, Record()])
"""


def script(body: str, out: Path, raise_at: int = -1, sleep: float = 0.0) -> str:
    return f"OUT, RAISE_AT, SLEEP = {str(out)!r}, {raise_at}, {sleep}\n" + SETUP + body


def logged(stdout: str) -> List[Tuple[int, Dict[str, float]]]:
    """The (step, logs) the trainer passed to its callbacks, in order."""
    return [(int(line.split()[1]), json.loads(line.split(" ", 2)[2])) for line in stdout.splitlines() if line.startswith("LOG ")]


def expected_series(logs: List[Tuple[int, Dict[str, float]]]) -> Dict[str, List[Tuple[int, float]]]:
    series: Dict[str, List[Tuple[int, float]]] = {}
    for step, values in logs:
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            name = f"eval/{key[5:]}" if key.startswith("eval_") else f"test/{key[5:]}" if key.startswith("test_") else f"train/{key}"
            series.setdefault(name, []).append((step, float(value)))
    return series


def test_a_training_logs_params_every_metric_and_its_checkpoints(server: Server, client_env: dict, tmp_path: Path) -> None:
    body = """
t = trainer(TrainlogCallback(project="hf", system_metrics_interval=None))
t.train()
t.evaluate()
"""
    done = run_script(script(body, tmp_path / "out"), client_env, timeout=240)
    assert done.returncode == 0, done.stderr
    [run] = trainlog.Api().runs("hf")
    assert run.status == "finished" and run.name == "tiny-gpt2"
    params = run.params
    assert "args.learning_rate" in params, (sorted(params)[:20], done.stderr[-3000:])
    assert params["args.learning_rate"] == 0.001 and params["args.max_steps"] == 20 and params["args.save_total_limit"] == 2
    assert params["model.n_layer"] == 2 and params["model.n_embd"] == 32 and params["model.model_type"] == "gpt2"
    count = int(done.stdout.split("PARAMS ", 1)[1].split()[0])
    assert params["model.num_parameters"] == count and params["model.num_trainable_parameters"] == count
    series = expected_series(logged(done.stdout))
    assert {"train/loss", "train/learning_rate", "train/grad_norm", "eval/loss", "train/train_runtime"} <= set(series)
    for key, points in series.items():
        got = {p["step"]: p["value"] for p in run.history(key)}
        # A step logged twice (`epoch` comes with the training and the evaluation logs, the
        # evaluation after training logs at the last step again) keeps its last value.
        want = dict(points)
        assert sorted(got) == sorted(want), key
        assert [got[s] for s in sorted(got)] == pytest.approx([want[s] for s in sorted(want)], rel=1e-6), key
    assert [p["step"] for p in run.history("train/loss")] == list(range(2, 21, 2))
    # save_total_limit=2: the server keeps the last two of the four checkpoints.
    checkpoints = run.checkpoints()
    assert sorted(c["step"] for c in checkpoints) == [15, 20]
    for c in checkpoints:
        assert c["files"] == [] and c["metadata"]["local_path"] == str(tmp_path / "out" / f"checkpoint-{c['step']}")
        assert c["metadata"]["framework"] == "transformers"


def test_an_exception_in_training_fails_the_run_after_what_it_logged(server: Server, client_env: dict, tmp_path: Path) -> None:
    body = """
trainer(TrainlogCallback(project="hf-fail", system_metrics_interval=None)).train()
"""
    failed = run_script(script(body, tmp_path / "out", raise_at=7), client_env, timeout=240)
    assert failed.returncode == 1 and "loss went to the moon" in failed.stderr, failed.stderr
    [run] = trainlog.Api().runs("hf-fail")
    assert run.status == "failed"
    assert [p["step"] for p in run.history("train/loss")] == [2, 4, 6]
    assert [c["step"] for c in run.checkpoints()] == [5]


def test_sigterm_preempts_the_run_and_a_restart_resumes_it_from_its_latest_checkpoint(
    server: Server, client_env: dict, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first = """
trainer(TrainlogCallback(project="hf-spot", run_id="hf-spot-1", upload_checkpoints=True, system_metrics_interval=None)).train()
"""
    proc = spawn_script(script(first, out, sleep=0.3), {**client_env, "TRAINLOG_SPOT": "1"})
    wait_for_line(proc, "step 12", timeout=180)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    run = trainlog.Api().run("hf-spot-1")
    assert run.status == "preempted"
    assert max(c["step"] for c in run.checkpoints()) == 10
    # The new machine has none of the old one's disk: the checkpoint comes from the server.
    shutil.rmtree(out)
    second = """
run = trainlog.init(project="hf-spot", run_id="hf-spot-1", resume="must", system_metrics_interval=None)
folder = resume_checkpoint(run)
print("RESUMED", folder, flush=True)
trainer(TrainlogCallback()).train(resume_from_checkpoint=folder)
assert not run.finished, "the callback leaves a run it joined to its owner"
run.finish()
"""
    done = run_script(script(second, out), client_env, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("RESUMED ", 1)[1].split()[0] == str(out / "checkpoint-10")
    resumed = logged(done.stdout)
    assert resumed[0][0] == 12, "training went on after the checkpoint's step"
    run = trainlog.Api().run("hf-spot-1")
    assert run.status == "finished"
    history = run.history("train/loss")
    assert sorted({p["step"] for p in history}) == list(range(2, 21, 2))
    last_by_step = {p["step"]: p["value"] for p in history}
    for step, value in expected_series(resumed)["train/loss"]:
        assert last_by_step[step] == pytest.approx(value, rel=1e-6), step
    assert sorted(c["step"] for c in run.checkpoints()) == [15, 20]


def test_without_init_arguments_the_callback_joins_the_started_run(server: Server, client_env: dict, tmp_path: Path) -> None:
    body = """
run = trainlog.init(project="hf-joined", name="mine", config={"dataset": "tokens"}, system_metrics_interval=None)
trainer(TrainlogCallback(log_checkpoints=False), steps=4).train()
assert not run.finished
run.log({"after": 1.0}, step=100)
run.finish()
"""
    done = run_script(script(body, tmp_path / "out"), client_env, timeout=240)
    assert done.returncode == 0, done.stderr
    [run] = trainlog.Api().runs("hf-joined")
    assert run.name == "mine" and run.status == "finished"
    assert run.params["dataset"] == "tokens" and run.params["args.max_steps"] == 4
    assert [p["step"] for p in run.history("train/loss")] == [2, 4]
    assert run.checkpoints() == []


DDP = """
import os
import torch.distributed as dist
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
# A store of its own per start, as in test_jobs_torchrun.py: gloo's mesh did not always form
# through the agent's store; the trainer uses the group it finds.
dist.init_process_group("gloo", init_method=f"file://{OUT}/store-{restart}",
                        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
run = trainlog.init(project="hf-ddp", system_metrics_interval=None)
folder = resume_checkpoint(run)
print("rank", run.rank, "attempt", run.attempt, "resumes from", folder, flush=True)
if restart == 0 and run.rank == 1:
    RAISE_AT = 7
trainer(TrainlogCallback()).train(resume_from_checkpoint=folder)
with open(os.path.join(OUT, f"done-{run.rank}"), "w") as f:
    f.write(f"{run.id} {run.attempt}")
run.finish()
"""


def test_a_torchrun_job_is_one_run_logged_by_rank_0_and_its_restart_resumes_from_the_checkpoint(
    server: Server, client_env: dict, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    path = tmp_path / "ddp.py"
    path.write_text(script(DDP, out))
    env = dict(os.environ, **client_env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", "2",
               "--max-restarts", "1", "--monitor-interval", "0.2", str(path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    assert "loss went to the moon" in done.stderr, "the first start failed as planned"
    finished = {rank: (out / f"done-{rank}").read_text().split() for rank in range(2)}
    run_id = finished[0][0]
    assert set(map(tuple, finished.values())) == {(run_id, "2")}, "both ranks of the restart joined attempt 2 of one run"
    assert f"resumes from {out / 'checkpoint-5'}" in done.stdout
    [listed] = trainlog.Api().runs("hf-ddp")
    run = trainlog.Api().run(listed.id)
    assert run.id == run_id and run.status == "finished"
    assert [a["status"] for a in run.attempts] == ["failed", "finished"]
    # Rank 0 logged: every step once the restart went past the failure.
    assert sorted({p["step"] for p in run.history("train/loss")}) == list(range(2, 21, 2))
    assert run.params["args.max_steps"] == 20
    assert sorted(c["step"] for c in run.checkpoints()) == [15, 20]


def test_a_peft_adapter_is_logged_with_its_config_and_trainable_size(server: Server, client_env: dict, tmp_path: Path) -> None:
    body = """
from peft import LoraConfig, get_peft_model
lora = LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], fan_in_fan_out=True, task_type="CAUSAL_LM")
t = trainer(TrainlogCallback(project="hf-peft", log_checkpoints=False, system_metrics_interval=None), steps=2,
            wrap=lambda model: get_peft_model(model, lora))
print("SIZES", t.model.num_parameters(), t.model.num_parameters(only_trainable=True), flush=True)
t.train()
"""
    done = run_script(script(body, tmp_path / "out"), client_env, timeout=240)
    assert done.returncode == 0, done.stderr
    total, trainable = map(int, done.stdout.split("SIZES ", 1)[1].split()[:2])
    [run] = trainlog.Api().runs("hf-peft")
    params = run.params
    assert params["peft.default.r"] == 2 and params["peft.default.lora_alpha"] == 4
    assert params["peft.default.peft_type"] == "LORA" and params["peft.default.target_modules"] == '["c_attn"]'
    assert params["model.num_parameters"] == total and params["model.num_trainable_parameters"] == trainable < total
    assert run.status == "finished" and [p["step"] for p in run.history("train/loss")] == [2]


def test_mfu_is_the_trainings_flops_over_its_gpus_peak_by_hand(
    server: Server, client_env: dict, tmp_path: Path, standin_dir: Path
) -> None:
    # The training runs on this CPU; the stand-in NVML shows its process one H100, which the
    # run's node records and the report takes the peak of (989.4 dense BF16 TFLOPS).
    gpus = tmp_path / "gpus.txt"
    write_gpus(gpus, [gpu("NVIDIA H100 80GB HBM3", 0)])
    env = {**client_env, "LD_LIBRARY_PATH": str(standin_dir), "TRAINLOG_NVML_STANDIN": str(gpus)}
    body = """
t = trainer(TrainlogCallback(project="hf-mfu", system_metrics_interval=None))
t.train()
"""
    done = run_script(script(body, tmp_path / "out"), env, timeout=240)
    assert done.returncode == 0, done.stderr
    [run] = trainlog.Api().runs("hf-mfu")
    total_flos = run.history("train/total_flos")[-1]["value"]
    assert total_flos > 0, done.stdout[-2000:]
    report = trainlog.Api().report(projects=["hf-mfu"])
    inputs = report["total"]["inputs"]
    gpu_hours = inputs["provisioned_gpu_hours"]
    assert gpu_hours > 0, report["total"]
    useful = total_flos / 989.4e12 / 3600
    assert inputs["useful_gpu_hours"] == pytest.approx(useful, rel=1e-9)
    assert report["total"]["mfu"] == pytest.approx(useful / gpu_hours, rel=1e-9)
    assert report["total"]["covers"]["mfu"] == 1
    # The run's own `mfu` series: the FLOPs logged over the one H100's peak for the time since
    # its process started, at the point the FLOPs were logged.
    flops_point = run.history("train/total_flos")[-1]
    [mfu_point] = run.history("mfu")
    assert mfu_point["step"] == flops_point["step"]
    full = trainlog.Api().run(run.id)
    [process] = full.attempts[0]["processes"]
    seconds = (mfu_point["timestamp"] - process["start_time"]) / 1000
    assert seconds > 0
    assert mfu_point["value"] == pytest.approx(total_flos / (989.4e12 * seconds), rel=1e-9)
    assert run.summary["mfu"]["last"] == mfu_point["value"]
    assert full.metadata["mfu"]["gpus"] == 1 and full.metadata["mfu"]["peak_dense_tflops_per_gpu"] == 989.4
