"""The same MLflow-client workload against MLflow's own server and against trainlog's MLflow door
(/api/2.0/mlflow), side by side, with the ratio oriented so that > 1 means trainlog does better:

- `log_metric` in a synchronous loop: median per-call latency, end to end, the client included;
- `log_batch` (1,000 metrics a call, MLflow's largest batch): points/s;
- `get_metric_history` of `--history-points` points (logged first, not timed): seconds;
- `search_runs` over 1,000 runs with a metric filter: median of at least 5 calls;
- the server's resident memory after the workload, summed over its process tree;
- disk per point stored: the sqlite file and artifact folder for MLflow, the data folder for
  trainlog after POST /api/v1/admin/flush;
- "server only": the same requests as plain JSON over one kept-alive connection, bodies made
  before the clock starts, so the figure is the server's and not the MLflow client's.

Repeated figures are medians of `--repeats`. Run from the repository root:

    .venv/bin/python bench/python/bench_mlflow_compat.py [--points 200000] [--history-points 100000] [--repeats 3]

It starts `target/release/trainlog server` and `.venv-mlflow/bin/mlflow server` (`--mlflow-bin`)
itself, one after the other, on 127.0.0.1. It prints figures and targets only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_log import REPO, start_server
from mlflow import MlflowClient
from mlflow import __version__ as mlflow_version
from mlflow.entities import Metric
from urllib.parse import urlencode

SEARCH_RUNS = 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mlflow(mlflow_bin: str, folder: Path) -> "tuple[subprocess.Popen[bytes], str]":
    port = free_port()
    log = open(folder / "server.log", "wb")
    proc = subprocess.Popen(
        [mlflow_bin, "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    stop_mlflow(proc)
    tail = (folder / "server.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"MLflow's server did not answer GET /health with 200 within 60 s:\n{tail}")


def stop_mlflow(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass


def tree_rss_bytes(root: int) -> "tuple[int, int]":
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    total = 0
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total, len(tree)


def folder_bytes(*paths: Path) -> int:
    total = 0
    for path in paths:
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return total


def log_points(client: MlflowClient, run_id: str, points: int) -> None:
    now = int(time.time() * 1000)
    for start in range(0, points, 1000):
        client.log_batch(run_id, metrics=[Metric("loss", 1.0 / (s + 1), now + s, s) for s in range(start, min(start + 1000, points))])


def workload(url: str, args: argparse.Namespace) -> dict:
    client = MlflowClient(url)
    experiment = client.create_experiment("compat")
    latency_ms, ingest, history, search = [], [], [], []
    for _ in range(args.repeats):
        run_id = client.create_run(experiment).info.run_id
        per_call = []
        for step in range(args.calls):
            started = time.perf_counter()
            client.log_metric(run_id, "loss", 1.0 / (step + 1), step=step)
            per_call.append(time.perf_counter() - started)
        latency_ms.append(statistics.median(per_call) * 1000)
    for _ in range(args.repeats):
        run_id = client.create_run(experiment).info.run_id
        started = time.perf_counter()
        log_points(client, run_id, args.points)
        ingest.append(args.points / (time.perf_counter() - started))
    history_run = client.create_run(experiment).info.run_id
    log_points(client, history_run, args.history_points)
    history_counts = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        history_counts.append(len(client.get_metric_history(history_run, "loss")))
        history.append(time.perf_counter() - started)
    search_experiment = client.create_experiment("compat-search")
    for i in range(SEARCH_RUNS):
        run_id = client.create_run(search_experiment, run_name=f"r{i}").info.run_id
        client.log_batch(run_id, metrics=[Metric("acc", (i % 97) / 97, 1, 1)])
    search_counts = []
    for _ in range(max(args.repeats, 5)):
        started = time.perf_counter()
        search_counts.append(len(client.search_runs([search_experiment], "metrics.acc > 0.5", max_results=1000)))
        search.append(time.perf_counter() - started)
    figures = raw_workload(url, args, history_run, search_experiment)
    return figures | {
        "latency_ms": statistics.median(latency_ms), "points_per_s": statistics.median(ingest),
        "history_s": statistics.median(history), "search_s": statistics.median(search),
        "history_counts": history_counts, "search_counts": search_counts,
        "points": args.repeats * (args.calls + args.points) * 2 + args.history_points + SEARCH_RUNS,
    }


class Raw:
    """MLflow's REST requests as plain JSON over one kept-alive connection: the server's own
    cost, without the MLflow client's."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=300)

    def call(self, method: str, path: str, body: bytes | None = None) -> bytes:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        self.connection.request(method, "/api/2.0/mlflow" + path, body=body, headers=headers)
        response = self.connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
        return data


def raw_workload(url: str, args: argparse.Namespace, history_run: str, search_experiment: str) -> dict:
    raw = Raw(url)
    experiment = json.loads(raw.call("POST", "/experiments/create", json.dumps({"name": "compat-raw"}).encode()))["experiment_id"]

    def new_run() -> str:
        body = json.dumps({"experiment_id": experiment, "start_time": int(time.time() * 1000)}).encode()
        return json.loads(raw.call("POST", "/runs/create", body))["run"]["info"]["run_id"]

    latency_ms, ingest, history, search = [], [], [], []
    for _ in range(args.repeats):
        run_id, per_call = new_run(), []
        for step in range(args.calls):
            body = json.dumps({"run_id": run_id, "key": "loss", "value": 1.0 / (step + 1),
                               "timestamp": int(time.time() * 1000), "step": step}).encode()
            started = time.perf_counter()
            raw.call("POST", "/runs/log-metric", body)
            per_call.append(time.perf_counter() - started)
        latency_ms.append(statistics.median(per_call) * 1000)
    for _ in range(args.repeats):
        run_id, now = new_run(), int(time.time() * 1000)
        bodies = [json.dumps({"run_id": run_id, "metrics": [{"key": "loss", "value": 1.0 / (s + 1), "timestamp": now + s, "step": s}
                                                            for s in range(b, min(b + 1000, args.points))]}).encode()
                  for b in range(0, args.points, 1000)]
        started = time.perf_counter()
        for body in bodies:
            raw.call("POST", "/runs/log-batch", body)
        ingest.append(args.points / (time.perf_counter() - started))
    query = urlencode({"run_id": history_run, "metric_key": "loss"})
    for _ in range(args.repeats):
        started = time.perf_counter()
        raw.call("GET", f"/metrics/get-history?{query}")
        history.append(time.perf_counter() - started)
    body = json.dumps({"experiment_ids": [search_experiment], "filter": "metrics.acc > 0.5", "max_results": 1000}).encode()
    for _ in range(max(args.repeats, 5)):
        started = time.perf_counter()
        raw.call("POST", "/runs/search", body)
        search.append(time.perf_counter() - started)
    return {"raw_latency_ms": statistics.median(latency_ms), "raw_points_per_s": statistics.median(ingest),
            "raw_history_s": statistics.median(history), "raw_search_s": statistics.median(search),
            "raw_points": args.repeats * (args.calls + args.points)}


def bench_mlflow(args: argparse.Namespace, folder: Path) -> dict:
    server, url = start_mlflow(args.mlflow_bin, folder)
    try:
        figures = workload(url, args)
        figures["rss"], figures["processes"] = tree_rss_bytes(server.pid)
    finally:
        stop_mlflow(server)
    store = [folder / "artifacts"] + sorted(folder.glob("mlflow.db*"))
    figures["bytes_per_point"] = folder_bytes(*store) / figures["points"]
    return figures


def bench_trainlog(args: argparse.Namespace, folder: Path) -> dict:
    server, url = start_server(folder / "data")
    try:
        figures = workload(url, args)
        figures["rss"], figures["processes"] = tree_rss_bytes(server.pid)
        request = urllib.request.Request(f"{url}/api/v1/admin/flush", data=b"{}", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
        figures["bytes_per_point"] = folder_bytes(folder / "data") / figures["points"]
    finally:
        server.terminate()
        server.wait(timeout=60)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300, help="log_metric calls per repeat")
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--history-points", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mlflow-bin", default=str(REPO / ".venv-mlflow" / "bin" / "mlflow"))
    args = parser.parse_args()
    if not Path(args.mlflow_bin).exists():
        raise SystemExit(f"no MLflow server at {args.mlflow_bin}: pip install mlflow into a venv and pass --mlflow-bin")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "mlflow").mkdir()
        (Path(tmp) / "trainlog").mkdir()
        mlflow = bench_mlflow(args, Path(tmp) / "mlflow")
        trainlog = bench_trainlog(args, Path(tmp) / "trainlog")
    rows = [
        (f"log_metric, median per call ({args.calls} calls)", "ms", "latency_ms", "{:.2f}", False, 5),
        ("log_batch, 1,000 metrics a call", "points/s", "points_per_s", "{:,.0f}", True, 100),
        (f"get_metric_history of {args.history_points:,} points", "s", "history_s", "{:.3f}", False, 20),
        (f"search_runs over {SEARCH_RUNS:,} runs (metrics.acc > 0.5)", "s", "search_s", "{:.3f}", False, 10),
        ("server only: log-metric, median per call", "ms", "raw_latency_ms", "{:.2f}", False, None),
        ("server only: log-batch, 1,000 metrics a request", "points/s", "raw_points_per_s", "{:,.0f}", True, None),
        (f"server only: get-history of {args.history_points:,} points", "s", "raw_history_s", "{:.3f}", False, None),
        (f"server only: runs/search over {SEARCH_RUNS:,} runs", "s", "raw_search_s", "{:.3f}", False, None),
        ("server RSS after the workload, process tree", "MiB", "rss", "{:,.1f}", False, None),
        ("disk per point stored", "bytes", "bytes_per_point", "{:.1f}", False, None),
    ]
    print(f"mlflow {mlflow_version} client → MLflow's server vs trainlog; medians of {args.repeats}; "
          f"{mlflow['points']:,} points stored on each")
    print("| measure | unit | MLflow | trainlog | ratio (> 1: trainlog better) | target |")
    print("|---|---|---:|---:|---:|---|")
    for name, unit, key, fmt, higher_is_better, target in rows:
        scale = 1 / 2**20 if key == "rss" else 1
        ratio = trainlog[key] / mlflow[key] if higher_is_better else mlflow[key] / trainlog[key]
        verdict = f"≥ {target}x {'met' if ratio >= target else 'NOT met'}" if target else "-"
        print(f"| {name} | {unit} | {fmt.format(mlflow[key] * scale)} | {fmt.format(trainlog[key] * scale)} | {ratio:,.1f}x | {verdict} |")
    print(f"server processes measured: MLflow {mlflow['processes']}, trainlog {trainlog['processes']}")
    for key, expected in (("history_counts", args.history_points), ("search_counts", None)):
        if set(mlflow[key]) != set(trainlog[key]) or (expected and set(mlflow[key]) != {expected}):
            print(f"WARNING: {key} differ: MLflow {mlflow[key]}, trainlog {trainlog[key]}")


if __name__ == "__main__":
    main()
