"""Benchmark of console capture: the cost of `run.log` (p50, p99) in a training process whose
console is captured, silent and while it prints 100,000 lines a second (through a child process
that inherits its stdout, as a data loader's workers or a C extension print), alternating fresh
processes; with the lines the capture read and the server acknowledged.

    python bench/python/bench_console.py [--calls 200000] [--rate 100000] [--reps 5]

It starts `target/release/trainlog server` itself and sends the training process's terminal
output to /dev/null. It prints figures only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_log import start_server

PRINTER = r"""
import sys, time
rate = int(sys.argv[1])
block = "".join(f"step {i:06d} | loss 0.{i:05d} | lr 3.0e-04 | tokens/s 123456 | grad_norm 1.2345\n" for i in range(rate // 100))
deadline = time.monotonic() + float(sys.argv[2])
next_at = time.monotonic()
out = sys.stdout
while time.monotonic() < deadline:
    out.write(block)
    out.flush()
    next_at += 0.01
    pause = next_at - time.monotonic()
    if pause > 0:
        time.sleep(pause)
"""

LOOP = r"""
import gc, json, os, subprocess, sys, time
import trainlog
calls, rate = int(sys.argv[1]), int(sys.argv[2])
run = trainlog.init(project="bench-console", system_metrics_interval=None, capture_packages=False, capture_code=False)
printer = None
# A training step between calls: a pause every 40 calls makes the loop last ~5 s per 200,000.
if rate:
    printer = subprocess.Popen([sys.executable, "-c", os.environ["PRINTER"], str(rate), "600"])
    time.sleep(1.0)
data = {"loss": 0.5}
lat = [0] * calls
clock = time.perf_counter_ns
gc.disable()
started = time.perf_counter()
for step in range(calls):
    t = clock()
    run.log(data, step=step)
    lat[step] = clock() - t
    if step % 40 == 39:
        time.sleep(0.001)
took = time.perf_counter() - started + (1.0 if rate else 0.0)
if printer:
    printer.kill()
    printer.wait()
report = run.finish(timeout=120)
gc.enable()
lat.sort()
print(json.dumps({
    "p50_us": lat[calls // 2] / 1e3, "p99_us": lat[int(calls * 0.99)] / 1e3, "seconds": took,
    "lines": report["console_lines"], "acknowledged": report["console_lines_acknowledged"],
    "dropped": report["console_lines_dropped"],
}), file=sys.stderr)
"""


def measure(calls: int, rate: int, env: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", LOOP, str(calls), str(rate)],
        env={**env, "PRINTER": PRINTER},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=900,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the loop failed: {out.stderr[-2000:]}")
    return json.loads(out.stderr.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=100_000, help="lines printed per second")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {"silent": [], "printing": []}
    with tempfile.TemporaryDirectory() as tmp:
        server, url = start_server(Path(tmp) / "data")
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
            env.update({"TRAINLOG_SERVER": url, "TRAINLOG_DIR": str(Path(tmp) / "client")})
            for rep in range(args.reps):
                order = ["silent", "printing"] if rep % 2 == 0 else ["printing", "silent"]
                for kind in order:
                    # The server writes what the last process sent before the next starts.
                    flush = urllib.request.Request(f"{url}/api/v1/admin/flush", data=b"{}", method="POST",
                                                   headers={"content-type": "application/json"})
                    urllib.request.urlopen(flush, timeout=300).read()
                    r = measure(args.calls, args.rate if kind == "printing" else 0, env)
                    rows[kind].append(r)
                    print(f"rep {rep} {kind}: p50 {r['p50_us']:.2f} µs, p99 {r['p99_us']:.2f} µs, "
                          f"{r['lines']:,} lines captured, {r['acknowledged']:,} acknowledged", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)
    med = {k: {f: statistics.median(r[f] for r in v) for f in ("p50_us", "p99_us", "seconds", "lines", "acknowledged")}
           for k, v in rows.items()}
    print()
    print("| process | log p50 µs | log p99 µs | lines captured | lines acknowledged | lines/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind in ("silent", "printing"):
        m = med[kind]
        print(f"| {kind} | {m['p50_us']:.2f} | {m['p99_us']:.2f} | {m['lines']:,.0f} | {m['acknowledged']:,.0f} | "
              f"{m['lines'] / m['seconds']:,.0f} |")
    print(f"\nprinting / silent, log p50: {med['printing']['p50_us'] / med['silent']['p50_us']:.2f}x "
          f"(medians of {args.reps} processes each, {args.calls:,} calls, {args.rate:,} lines/s asked)")


if __name__ == "__main__":
    main()
