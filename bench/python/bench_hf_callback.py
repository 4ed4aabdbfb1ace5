"""What tracking adds to a Hugging Face `Trainer` step, side by side in one run:

- `report_to="none"`: the baseline;
- `callbacks=[trainlog.integrations.hf.TrainlogCallback()]` against trainlog's server;
- `report_to="mlflow"` (Transformers' own MLflowCallback, asynchronous logging) against MLflow's
  own server, and against trainlog's MLflow door.

Each configuration trains a 2-layer GPT-2 built from a config (no download) for `--steps` steps
on the CPU in a fresh interpreter, logging every step (`logging_steps=1`: the most a callback can
cost). A step is the time between two `on_step_end` calls, which includes the previous step's
logging. Figures are the median step over the run, the overhead against the baseline's median,
the median time the trainer spends dispatching `on_log` to its callbacks (what a tracker costs
the training loop itself; work it hands to a thread shows in the step), and the whole `train()`
(which includes the final flush), each the median of `--repeats` runs.
Run from the repository root:

    .venv/bin/python bench/python/bench_hf_callback.py [--steps 300] [--repeats 3]

It starts `target/release/trainlog server` and `.venv-mlflow/bin/mlflow server` (`--mlflow-bin`)
on 127.0.0.1. It prints figures only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_log import start_server
from bench_mlflow_compat import start_mlflow, stop_mlflow

REPO = Path(__file__).resolve().parents[2]

TRAIN = r"""
import json, os, statistics, sys, time
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
torch.manual_seed(0)
torch.set_num_threads(1)
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

steps, mode, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]

class Clock(TrainerCallback):
    def __init__(self):
        self.ends = []
    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())

ids = torch.randint(0, 100, (256, 16), generator=torch.Generator().manual_seed(1))
data = [{"input_ids": row, "labels": row} for row in ids]
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=32))
callbacks = []
if mode == "trainlog":
    from trainlog.integrations.hf import TrainlogCallback
    callbacks.append(TrainlogCallback(project="bench-hf", system_metrics_interval=None, log_checkpoints=False))
clock = Clock()
args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=4, logging_steps=1, save_strategy="no",
                         use_cpu=True, report_to="mlflow" if mode == "mlflow" else "none", disable_tqdm=True, seed=0)
trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks + [clock])
in_on_log = []
dispatch = trainer.callback_handler.on_log
def timed_on_log(*a, **k):
    t = time.perf_counter()
    result = dispatch(*a, **k)
    in_on_log.append(time.perf_counter() - t)
    return result
trainer.callback_handler.on_log = timed_on_log
start = time.perf_counter()
trainer.train()
total = time.perf_counter() - start
gaps = [b - a for a, b in zip(clock.ends, clock.ends[1:])]
print(json.dumps({"step_ms": statistics.median(gaps) * 1e3, "on_log_ms": statistics.median(in_on_log) * 1e3, "train_s": total}))
"""


def train(steps: int, mode: str, env: dict, out: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", TRAIN, str(steps), mode, str(out)], env=env, capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise RuntimeError(f"{mode} training failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mlflow-bin", default=str(REPO / ".venv-mlflow" / "bin" / "mlflow"))
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINLOG_", "MLFLOW_"))}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "mlflow").mkdir()
        trainlog_proc, trainlog_url = start_server(folder / "trainlog-data")
        mlflow_proc, mlflow_url = start_mlflow(args.mlflow_bin, folder / "mlflow")
        configs = {
            "report_to=none": ("none", {}),
            "TrainlogCallback -> trainlog": ("trainlog", {"TRAINLOG_SERVER": trainlog_url, "TRAINLOG_DIR": str(folder / "client")}),
            "report_to=mlflow -> MLflow's server": ("mlflow", {"MLFLOW_TRACKING_URI": mlflow_url}),
            "report_to=mlflow -> trainlog's MLflow door": ("mlflow", {"MLFLOW_TRACKING_URI": trainlog_url}),
        }
        results: dict = {name: [] for name in configs}
        try:
            for repeat in range(args.repeats):
                # Interleaved, so a slow moment of the machine does not fall on one configuration.
                for name, (mode, extra) in configs.items():
                    results[name].append(train(args.steps, mode, {**base, **extra}, folder / f"out-{repeat}"))
        finally:
            stop_mlflow(mlflow_proc)
            trainlog_proc.terminate()
            trainlog_proc.wait(timeout=30)
    baseline = statistics.median(r["step_ms"] for r in results["report_to=none"])
    print(f"Hugging Face Trainer, {args.steps} steps logging every step, median of {args.repeats} runs")
    print(f"{'configuration':<45} {'step ms':>9} {'overhead ms':>12} {'on_log ms':>10} {'train() s':>10}")
    for name, runs in results.items():
        step = statistics.median(r["step_ms"] for r in runs)
        on_log = statistics.median(r["on_log_ms"] for r in runs)
        total = statistics.median(r["train_s"] for r in runs)
        print(f"{name:<45} {step:>9.3f} {step - baseline:>12.3f} {on_log:>10.3f} {total:>10.2f}")


if __name__ == "__main__":
    main()
