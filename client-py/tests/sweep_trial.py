"""A sweep trial for the tests: `--key=value` params, a synthetic loss curve, and behaviours
chosen by the `mode` param (ok, fail, preempt, slow). It appends what it saw (slot, times, params)
to $TRIAL_LOG as JSON lines.

$TRIAL_HOLD="X:STEP" makes the trial whose x is X, once it has logged STEP, log nothing more and
wait until the sweep stops it (or a signal ends it): a test can then act on a trial that cannot
finish meanwhile, whatever the machine's speed."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import trainlog

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, default=0.0)
parser.add_argument("--y", type=float, default=0.0)
parser.add_argument("--mode", default="ok")
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--step_seconds", type=float, default=0.02)
args, _ = parser.parse_known_args()

record = {
    "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "trial": int(os.environ["TRAINLOG_SWEEP_TRIAL"]),
    "attempt": int(os.environ.get("TRAINLOG_SWEEP_ATTEMPT", "1")),
    "run_id": os.environ["TRAINLOG_RUN_ID"],
    "argv": sys.argv[1:],
    "start": time.time(),
}

run = trainlog.init(config={"note": "from the script"}, system_metrics_interval=None, capture_environment=False,
                    capture_code=False, cost=bool(os.environ.get("TRAINLOG_COST_PER_HOUR")))
record["config"] = dict(run.config)
if args.mode == "fail":
    print("boom: these hyperparameters cannot train", flush=True)
    sys.exit(3)

start_step = 0
latest = run.latest_checkpoint()
if latest is not None:
    start_step = int(latest["step"]) + 1
record["resumed_from"] = start_step
hold_x, _, hold_step = os.environ.get("TRIAL_HOLD", "").partition(":")
hold_at = int(hold_step) if hold_x and float(hold_x) == args.x else None
stopped = False
for step in range(start_step, args.steps):
    # A bowl around (1, 2): smaller is better; the curve falls with the steps.
    loss = ((args.x - 1) ** 2 + (args.y - 2) ** 2 + 0.1) * (1 + 1.0 / (step + 1))
    run.log({"loss": loss}, step=step)
    if step == hold_at:
        print(f"holding at step {step}", flush=True)
        while not run.should_stop():
            time.sleep(0.05)
    if args.mode == "preempt" and record["attempt"] == 1 and step == 4:
        checkpoint_dir = os.path.join(os.environ["TRIAL_LOG_DIR"], f"ckpt-{record['trial']}")
        os.makedirs(checkpoint_dir, exist_ok=True)
        with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
            json.dump({"step": step}, f)
        run.flush()
        run.log_checkpoint(checkpoint_dir, step=step)
        record["end"] = time.time()
        with open(os.environ["TRIAL_LOG"], "a") as f:
            f.write(json.dumps(record) + "\n")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    time.sleep(args.step_seconds)
    if run.should_stop():
        stopped = True
        print(f"pruned at step {step}", flush=True)
        break
run.finish()
record["end"] = time.time()
record["stopped"] = stopped
with open(os.environ["TRIAL_LOG"], "a") as f:
    f.write(json.dumps(record) + "\n")
