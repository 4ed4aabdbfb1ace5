"""Benchmark of trainlog's MLflow door with the real `mlflow` client (from tests/python/requirements.txt):
points/s through `MlflowClient.log_batch` (1,000 metrics a call, MLflow's largest batch; each is
answered once durable in the write-ahead log), the time to read a 100,000-point history with
`get_metric_history`, and a search over 1,000 runs. Medians of `--repeats` runs.

    .venv/bin/python bench/python/bench_mlflow.py [--points 200000] [--repeats 3]

It starts `target/release/trainlog server` itself. It prints figures only; it asserts nothing.
MLflow's own server on this kind of machine (stack notes): log_batch 3,900-6,000 points/s, a
100,000-point history 5-10 s, a search over 1,000 runs 0.7 s.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench_log import start_server
from mlflow import MlflowClient
from mlflow.entities import Metric


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server, url = start_server(Path(tmp) / "data")
        try:
            client = MlflowClient(url)
            experiment = client.create_experiment("bench")
            ingest, history, search = [], [], []
            for repeat in range(args.repeats):
                run = client.create_run(experiment).info.run_id
                now = int(time.time() * 1000)
                batches = [[Metric("loss", 1.0 / (s + 1), now + s, s) for s in range(b, min(b + 1000, args.points))]
                           for b in range(0, args.points, 1000)]
                started = time.perf_counter()
                for batch in batches:
                    client.log_batch(run, metrics=batch)
                ingest.append(args.points / (time.perf_counter() - started))
                started = time.perf_counter()
                got = client.get_metric_history(run, "loss")
                history.append(time.perf_counter() - started)
                assert len(got) == args.points, len(got)
            for i in range(1000):
                r = client.create_run(experiment, run_name=f"r{i}")
                client.log_batch(r.info.run_id, metrics=[Metric("acc", (i % 97) / 97, 1, 1)])
            for _ in range(max(args.repeats, 5)):
                started = time.perf_counter()
                found = client.search_runs([experiment], "metrics.acc > 0.5", max_results=1000)
                search.append(time.perf_counter() - started)
            print(f"MLflow client → trainlog, {args.points:,} points a run, medians of {args.repeats}:")
            print(f"  log_batch (1,000 metrics a call): {statistics.median(ingest):,.0f} points/s "
                  f"(runs: {', '.join(f'{x:,.0f}' for x in ingest)}) [MLflow's server: 3,900-6,000 points/s]")
            print(f"  get_metric_history of {args.points:,} points: {statistics.median(history):.2f} s "
                  f"(runs: {', '.join(f'{x:.2f}' for x in history)}) [MLflow's server: 5-10 s for 100,000]")
            print(f"  search_runs over 1,000 runs with a metric filter ({len(found)} found): "
                  f"{statistics.median(search) * 1000:.0f} ms [MLflow's server: 0.7 s]")
        finally:
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
