"""Searching 1,000 runs (10 params and 5 metrics each) from Python: MLflow 3.17's
`MlflowClient.search_runs` against its own server, and trainlog's `Api().runs()` against
trainlog, on the same runs, side by side. Prints medians; asserts nothing.

- "search": the call that answers the list of 1,000 runs;
- "search, then every run's params and summary read": the same and each run's params and metrics
  read once (MLflow's answer holds them already; trainlog's runs read them for the whole list at
  the first access).

Run from the repository root (after scripts/test.sh, which installs .venv and .venv-mlflow):

    .venv/bin/python bench/python/bench_api_search.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_log import start_server
from bench_mlflow_compat import start_mlflow, stop_mlflow

RUNS, PARAMS, METRICS = 1000, 10, 5


def params_of(i: int) -> dict:
    return {f"p{k}": str(i * k) if k % 2 else i * k + 0.5 for k in range(PARAMS)}


def metrics_of(i: int) -> dict:
    return {f"m{k}": (i % 97) / 97 + k for k in range(METRICS)}


def seed_mlflow(url: str) -> str:
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    client = MlflowClient(tracking_uri=url)
    exp = client.create_experiment("search")
    now = int(time.time() * 1000)
    for i in range(RUNS):
        run = client.create_run(exp, start_time=now + i)
        client.log_batch(
            run.info.run_id,
            params=[Param(k, str(v)) for k, v in params_of(i).items()],
            metrics=[Metric(k, v, now, 1) for k, v in metrics_of(i).items()],
        )
    return exp


def seed_trainlog(url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def post(path: str, body: dict) -> dict:
        conn.request(
            "POST",
            "/api/v1" + path,
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        response = conn.getresponse()
        data = response.read()
        if response.status not in (200, 201):
            raise RuntimeError(f"{path}: {response.status} {data[:300]!r}")
        return json.loads(data)

    for i in range(RUNS):
        run = post(
            "/runs",
            {"project": "search", "name": f"run-{i:04d}", "params": params_of(i)},
        )
        post(
            f"/runs/{run['id']}/metrics",
            {
                "points": [
                    {"key": k, "step": 1, "value": v} for k, v in metrics_of(i).items()
                ]
            },
        )
        post(f"/runs/{run['id']}/finish", {"status": "finished"})


def timed(fn: Callable[[], int], repeats: int) -> tuple[float, int]:
    fn()  # warm: connections, caches
    took: list[float] = []
    count = 0
    for _ in range(repeats):
        started = time.perf_counter()
        count = fn()
        took.append(time.perf_counter() - started)
    return statistics.median(took), count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--mlflow-bin", default=".venv-mlflow/bin/mlflow")
    args = parser.parse_args()
    import trainlog
    from mlflow import MlflowClient
    from mlflow import __version__ as mlflow_version

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "mlflow").mkdir()
        mlflow_proc, mlflow_url = start_mlflow(args.mlflow_bin, folder / "mlflow")
        try:
            exp = seed_mlflow(mlflow_url)
            client = MlflowClient(tracking_uri=mlflow_url)

            def mlflow_search() -> int:
                return len(client.search_runs([exp], max_results=RUNS))

            def mlflow_read() -> int:
                runs = client.search_runs([exp], max_results=RUNS)
                return sum(len(r.data.params) + len(r.data.metrics) for r in runs)

            mlflow_figures = [
                timed(mlflow_search, args.repeats),
                timed(mlflow_read, args.repeats),
            ]
        finally:
            stop_mlflow(mlflow_proc)
        server, url = start_server(folder / "trainlog")
        try:
            seed_trainlog(url)
            api = trainlog.Api(url)

            def trainlog_search() -> int:
                return len(api.runs("search"))

            def trainlog_read() -> int:
                runs = api.runs("search")
                return sum(len(r.params) + len(r.summary) for r in runs)

            trainlog_figures = [
                timed(trainlog_search, args.repeats),
                timed(trainlog_read, args.repeats),
            ]
        finally:
            server.terminate()
            server.wait()
    print(
        f"{RUNS:,} runs of {PARAMS} params and {METRICS} metrics; medians of {args.repeats}; mlflow {mlflow_version}"
    )
    print("| measure | MLflow `search_runs` | trainlog `Api().runs()` | ratio |")
    print("|---|---:|---:|---:|")
    for name, (m, mc), (t, tc) in zip(
        ["search", "search, then every run's params and summary read"],
        mlflow_figures,
        trainlog_figures,
    ):
        print(
            f"| {name} | {m * 1000:.1f} ms ({mc:,}) | {t * 1000:.1f} ms ({tc:,}) | {m / t:.1f}x |"
        )


if __name__ == "__main__":
    main()
