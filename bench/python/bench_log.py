"""Benchmark of `run.log` in the Python package: per-call overhead (p50, p99, max) for 1 and 10
keys, and end-to-end points/s from one Python process to a real server on 127.0.0.1; beside it
the same loop with `wandb` in offline mode when wandb is installed (its ratio to trainlog).

    python bench/python/bench_log.py [--calls 200000] [--wandb-python PATH]

It starts `target/release/trainlog server` itself. It prints figures only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

LOOP = r"""
import gc, json, sys, time
calls, keys, lib = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
data = {f"metric_{i}": 0.5 + i for i in range(keys)}
if lib == "trainlog":
    import trainlog
    run = trainlog.init(project="bench", system_metrics_interval=None, capture_packages=False, capture_code=False)
    log = run.log
else:
    import wandb
    run = wandb.init(project="bench", mode="offline", settings=wandb.Settings(x_disable_stats=True, console="off"))
    log = run.log
lat = [0] * calls
clock = time.perf_counter_ns
gc.disable()
started = time.perf_counter()
for step in range(calls):
    t = clock()
    log(data, step=step)
    lat[step] = clock() - t
enqueued = time.perf_counter()
run.finish()
done = time.perf_counter()
gc.enable()
lat.sort()
print(json.dumps({
    "p50_us": lat[calls // 2] / 1e3, "p99_us": lat[int(calls * 0.99)] / 1e3, "max_us": lat[-1] / 1e3,
    "over_1ms": sum(1 for x in lat if x > 1_000_000),
    "enqueue_points_per_s": calls * keys / (enqueued - started),
    "end_to_end_points_per_s": calls * keys / (done - started),
}))
"""


def start_server(data: Path) -> "tuple[subprocess.Popen[str], str]":
    proc = subprocess.Popen(
        [str(REPO / "target" / "release" / "trainlog"), "server", "--port", "0", "--data", str(data)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    for _ in range(100):
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            return proc, m.group(1)
    raise RuntimeError("the server did not start")


def measure(python: str, lib: str, calls: int, keys: int, env: dict) -> dict:
    out = subprocess.run([python, "-c", LOOP, str(calls), str(keys), lib], env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{lib} loop failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--wandb-python", default=None, help="a Python with wandb installed (default: this one, if it has wandb)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server, url = start_server(Path(tmp) / "data")
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
            env.update({"TRAINLOG_SERVER": url, "TRAINLOG_DIR": str(Path(tmp) / "client"), "WANDB_DIR": str(Path(tmp) / "wandb"),
                        "WANDB_SILENT": "true"})
            rows = []
            for keys in (1, 10):
                t = measure(sys.executable, "trainlog", args.calls, keys, env)
                rows.append(("trainlog", keys, t))
            wandb_python = args.wandb_python or sys.executable
            has_wandb = subprocess.run([wandb_python, "-c", "import wandb"], capture_output=True).returncode == 0
            if has_wandb:
                for keys in (1, 10):
                    rows.append(("wandb offline", keys, measure(wandb_python, "wandb", max(args.calls // 10, 10_000), keys, env)))
        finally:
            server.terminate()
            server.wait(timeout=60)
    print("| library | keys/call | p50 µs | p99 µs | max µs | calls > 1 ms | enqueue points/s | end-to-end points/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for lib, keys, r in rows:
        print(f"| {lib} | {keys} | {r['p50_us']:.2f} | {r['p99_us']:.2f} | {r['max_us']:.0f} | {r['over_1ms']} | "
              f"{r['enqueue_points_per_s']:,.0f} | {r['end_to_end_points_per_s']:,.0f} |")
    by = {(lib, keys): r for lib, keys, r in rows}
    for keys in (1, 10):
        if ("wandb offline", keys) in by:
            ratio = by[("wandb offline", keys)]["p50_us"] / by[("trainlog", keys)]["p50_us"]
            print(f"{keys} key(s): wandb offline p50 / trainlog p50 = {ratio:.0f}x")
    if not any(lib == "wandb offline" for lib, _, _ in rows):
        print("wandb is not installed here: pip install wandb (or --wandb-python PATH) for the comparison")


if __name__ == "__main__":
    main()
