"""Benchmark of media logging from one Python process: the cost of a scalar `run.log` (10 keys)
alone, and while images of 64x64 and 512x512 are logged at 100 a second from the same loop;
the cost of logging one image; how long the media thread takes to drain; and thumbnails served
per second by the server.

    python bench/python/bench_media.py [--seconds 10]

It starts `target/release/trainlog server` itself. It prints figures only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_log import start_server  # noqa: E402

LOOP = r"""
import json, sys, time
import numpy as np
import trainlog
seconds, side = float(sys.argv[1]), int(sys.argv[2])
run = trainlog.init(project="bench-media", system_metrics_interval=None, capture_packages=False, capture_code=False)
data = {f"metric_{i}": 0.5 + i for i in range(10)}
rng = np.random.default_rng(0)
images = [rng.integers(0, 256, size=(side, side, 3), dtype=np.uint8) for _ in range(8)] if side else []
clock = time.perf_counter_ns
scalar, media = [], []
next_image = time.perf_counter()
started = time.perf_counter()
step = 0
while time.perf_counter() - started < seconds:
    t = clock()
    run.log(data, step=step)
    scalar.append(clock() - t)
    if images and time.perf_counter() >= next_image:
        t = clock()
        run.log({"samples": trainlog.Image(images[step % len(images)])}, step=step)
        media.append(clock() - t)
        next_image += 0.01
    step += 1
logged = time.perf_counter()
report = run.finish(timeout=600)
done = time.perf_counter()
scalar.sort(); media.sort()
q = lambda xs, f: xs[int(len(xs) * f)] / 1e3 if xs else None
print(json.dumps({
    "run": run.id, "scalar_calls": len(scalar), "scalar_p50_us": q(scalar, 0.5), "scalar_p99_us": q(scalar, 0.99),
    "images": len(media), "image_log_p50_us": q(media, 0.5), "image_log_p99_us": q(media, 0.99),
    "drain_s": done - logged, "media_sent": report["media_sent"], "media_dropped": report["media_dropped"],
}))
"""


def thumbnails_per_second(url: str, run_id: str, seconds: float) -> float:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{url}/api/v1/runs/{run_id}/media?key=samples&limit=50") as r:
        items = json.load(r)["items"]
    urls = [f"{url}{i['thumbnail_url'] or i['url']}" for i in items]
    served, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        with opener.open(urls[served % len(urls)]) as r:
            r.read()
        served += 1
    return served / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp) / "data")
        env = {**os.environ, "TRAINLOG_SERVER": url, "TRAINLOG_DIR": str(Path(tmp) / "client")}
        try:
            rows = {}
            for side in (0, 64, 512):
                out = subprocess.run([sys.executable, "-c", LOOP, str(args.seconds), str(side)], env=env,
                                     capture_output=True, text=True, timeout=1200)
                if out.returncode != 0:
                    raise RuntimeError(out.stderr[-2000:])
                rows[side] = json.loads(out.stdout.strip().splitlines()[-1])
            print("| images logged | scalar log p50 µs | p99 µs | image log p50 µs | p99 µs | images | sent | dropped | drain s |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for side, r in rows.items():
                name = "none" if side == 0 else f"{side}x{side} at 100/s"
                fmt = lambda v: "" if v is None else f"{v:.2f}"  # noqa: E731
                print(f"| {name} | {fmt(r['scalar_p50_us'])} | {fmt(r['scalar_p99_us'])} | {fmt(r['image_log_p50_us'])} | "
                      f"{fmt(r['image_log_p99_us'])} | {r['images']} | {r['media_sent']} | {r['media_dropped']} | {r['drain_s']:.2f} |")
            for side in (64, 512):
                rate = thumbnails_per_second(url, rows[side]["run"], 5.0)
                print(f"{side}x{side}: {rate:,.0f} thumbnails (or images) served per second, one client")
        finally:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
