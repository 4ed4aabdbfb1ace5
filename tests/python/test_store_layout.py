"""The Parquet store is a public interface: after a flush, anyone can read it without the server.

One module-scoped server gets a small sweep (project "demo", three runs with different learning
rates), then each test reads the store as an outside tool would: pyarrow for the layout, the
DuckDB one-liner of docs/store.md (run verbatim from docs/store-one-liner.sh), and an equivalent DuckDB
query in-process with exact values.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO_ROOT, TrainlogServer

ONE_LINER = REPO_ROOT / "docs" / "store-one-liner.sh"

PROJECT = "demo"
# name, lr, model.depth, lowest loss. The best-loss order (0.01, 0.001, 0.1) is neither the lr
# order nor the creation order, so a wrong join or sort shows.
RUNS = [
    ("lr-0.1", 0.1, 18, 0.75),
    ("lr-0.01", 0.01, 34, 0.25),
    ("lr-0.001", 0.001, 50, 0.5),
]
BY_BEST = sorted(RUNS, key=lambda r: r[3])
STEPS = 1000
BATCH = 250
BEST_STEP = 900
NAN_STEP = 500
ACC_EVERY = 100
T0 = 1_700_000_000_000
METRICS_COLUMNS = ["run_id", "key", "step", "timestamp", "value"]
RUNS_COLUMNS = [
    "run_id", "project", "name", "status", "start_time", "end_time", "user", "host", "group",
    "parent_run_id", "notes", "params", "tags", "metrics",
]

# Direct connections only: a proxy from the environment must not intercept 127.0.0.1.
_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def loss(floor: float, step: int) -> float:
    # Multiples of 1/256 with few digits: exact in binary and in decimal, so JSON round-trips them.
    return floor + abs(BEST_STEP - step) / 256


def acc(step: int) -> float:
    return step / 1024


def api(server: TrainlogServer, path: str, body=None, expect: int = 200):
    data = b"" if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{server.url}/api/v1{path}", data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with _http.open(req, timeout=60) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        with e:  # close it, or the open connection delays the server's graceful stop
            status, raw = e.code, e.read()
    assert status == expect, f"POST {path}: HTTP {status} (expected {expect}): {raw[:500]!r}\n{server.log()}"
    return json.loads(raw) if raw else None


def batch(floor: float, index: int) -> list[dict]:
    """Points of batch `index`: `loss` at every step, `acc` every ACC_EVERY steps, NaN loss at NAN_STEP."""
    points = []
    for step in range(index * BATCH, (index + 1) * BATCH):
        value = "NaN" if step == NAN_STEP else loss(floor, step)
        points.append({"key": "loss", "step": step, "value": value, "timestamp": T0 + step * 1000})
        if step % ACC_EVERY == 0:
            points.append({"key": "acc", "step": step, "value": acc(step), "timestamp": T0 + step * 1000})
    if index == 2:
        points.reverse()  # out of order on the wire; the files must still be sorted
    return points


def expected_points(floor: float) -> dict[tuple[str, int], tuple[int, float]]:
    """(key, step) -> (timestamp, value) of everything sent for a run, each point once."""
    out = {}
    for step in range(STEPS):
        out[("loss", step)] = (T0 + step * 1000, math.nan if step == NAN_STEP else loss(floor, step))
        if step % ACC_EVERY == 0:
            out[("acc", step)] = (T0 + step * 1000, acc(step))
    return out


def same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.fixture(scope="module")
def demo(trainlog_server: TrainlogServer):
    """Logs the sweep, with a flush halfway and one batch re-sent after it, then finishes and flushes."""
    server = trainlog_server
    runs = {}
    for name, lr, depth, floor in RUNS:
        body = {"project": PROJECT, "name": name, "params": {"lr": lr, "model": {"depth": depth}},
                "tags": {"team": "a"}}
        created = api(server, "/runs", body, expect=201)
        assert isinstance(created.get("id"), str) and created["id"], created
        runs[created["id"]] = {"name": name, "lr": lr, "depth": depth, "floor": floor,
                               "project_id": created["project_id"]}

    def send(run_id: str, index: int) -> None:
        points = batch(runs[run_id]["floor"], index)
        assert api(server, f"/runs/{run_id}/metrics", {"points": points}) == {"accepted": len(points)}

    for index in (0, 1):
        for run_id in runs:
            send(run_id, index)
    # Persist what is buffered: each run now has a file, so the rest lands in a second one.
    assert api(server, "/admin/flush") == {"status": "ok"}
    for run_id in runs:
        send(run_id, 1)  # the same batch again: the store must hold each point once
        send(run_id, 2)
        send(run_id, 3)
    for run_id in runs:
        finished = api(server, f"/runs/{run_id}/finish", {"status": "finished"})
        assert finished["status"] == "finished", finished
    assert api(server, "/admin/flush") == {"status": "ok"}
    return runs


def metric_files(server: TrainlogServer) -> list[Path]:
    return sorted(server.store.glob("projects/*/metrics/*/*.parquet"))


def describe(files: list[Path]) -> str:
    if not files:
        return "  (no metric files)"
    return "\n".join(f"  {f.relative_to(files[0].parents[4])}: {pq.read_metadata(f).num_rows} rows" for f in files)


def test_one_project_folder_and_one_compacted_file_per_finished_run(trainlog_server, demo):
    project_ids = {r["project_id"] for r in demo.values()}
    assert len(project_ids) == 1, project_ids
    project_id = project_ids.pop()
    projects = sorted(p.name for p in (trainlog_server.store / "projects").iterdir())
    assert projects == [str(project_id)]

    metrics_dir = trainlog_server.store / "projects" / str(project_id) / "metrics"
    assert sorted(p.name for p in metrics_dir.iterdir()) == sorted(demo)
    files = metric_files(trainlog_server)
    per_run = Counter(f.parent.name for f in files)
    assert per_run == {run_id: 1 for run_id in demo}, (
        f"expected one file per finished run, got:\n{describe(files)}\n--- server output ---\n{trainlog_server.log()}"
    )
    for f in files:
        assert re.fullmatch(r"\d{20}\.parquet", f.name), f.name


def test_no_point_is_stored_twice(trainlog_server, demo):
    files = metric_files(trainlog_server)
    rows = Counter()
    for f in files:
        t = pq.read_table(f, columns=["run_id", "key", "step"])
        rows.update(zip(t["run_id"].to_pylist(), t["key"].to_pylist(), t["step"].to_pylist()))
    repeated = {k: n for k, n in rows.items() if n > 1}
    assert not repeated, (
        f"{len(repeated)} (run_id, key, step) stored more than once, e.g. {sorted(repeated.items())[:3]}\n"
        f"{describe(files)}\n--- server output ---\n{trainlog_server.log()}"
    )
    expected = {(run_id, key, step) for run_id, r in demo.items() for (key, step) in expected_points(r["floor"])}
    assert set(rows) == expected


def test_metric_files_have_the_documented_schema_order_and_values(trainlog_server, demo):
    files = metric_files(trainlog_server)
    assert {f.parent.name for f in files} == set(demo)
    for f in files:
        run_id = f.parent.name
        sent = expected_points(demo[run_id]["floor"])
        meta = pq.read_metadata(f)
        kv = meta.metadata
        assert kv[b"trainlog.schema_version"] == b"1", kv
        assert json.loads(kv[b"trainlog.key_index"]) == {
            "acc": [0, STEPS // ACC_EVERY, 0, STEPS - ACC_EVERY],
            "loss": [STEPS // ACC_EVERY, STEPS, 0, STEPS - 1],
        }

        table = pq.read_table(f)
        schema = table.schema
        assert schema.names == METRICS_COLUMNS
        for name in ("run_id", "key"):
            t = schema.field(name).type
            assert pa.types.is_dictionary(t) and t.value_type == pa.string(), f"{name}: {t}"
        assert schema.field("step").type == pa.int64()
        assert schema.field("timestamp").type == pa.int64()
        assert schema.field("value").type == pa.float64()

        assert table.num_rows == len(sent) == STEPS + STEPS // ACC_EVERY
        assert set(table["run_id"].to_pylist()) == {run_id}
        keys, steps = table["key"].to_pylist(), table["step"].to_pylist()
        order = list(zip(keys, steps))
        assert order == sorted(order), "rows are not sorted by (key, step)"
        assert len(set(order)) == len(order), "a (key, step) repeats within the file"

        stored = dict(zip(order, zip(table["timestamp"].to_pylist(), table["value"].to_pylist())))
        assert stored.keys() == sent.keys()
        wrong = [(k, stored[k], sent[k]) for k in sent
                 if stored[k][0] != sent[k][0] or not same_float(stored[k][1], sent[k][1])]
        assert not wrong, f"{len(wrong)} points differ from what was sent, e.g. {wrong[:3]}"
        assert math.isnan(stored[("loss", NAN_STEP)][1]), "the NaN point was not stored as NaN"
        assert sum(math.isnan(v) for v in table["value"].to_pylist()) == 1


def test_runs_table_holds_params_tags_and_metric_summaries(trainlog_server, demo):
    project_id = next(iter(demo.values()))["project_id"]
    path = trainlog_server.store / "projects" / str(project_id) / "runs.parquet"
    assert path.is_file(), f"{path} is missing"
    assert pq.read_metadata(path).metadata[b"trainlog.schema_version"] == b"2"

    table = pq.read_table(path)
    schema = table.schema
    assert schema.names == RUNS_COLUMNS
    for name in ("start_time", "end_time"):
        assert schema.field(name).type == pa.timestamp("ms", tz="UTC"), name
    params = schema.field("params").type
    assert {params.field(i).name: params.field(i).type for i in range(params.num_fields)} == {
        "lr": pa.float64(),
        "model.depth": pa.int64(),
    }
    tags = schema.field("tags").type
    assert {tags.field(i).name: tags.field(i).type for i in range(tags.num_fields)} == {"team": pa.string()}
    metrics = schema.field("metrics").type
    assert sorted(metrics.field(i).name for i in range(metrics.num_fields)) == ["acc", "loss"]
    summary = metrics.field("loss").type
    summary_types = {summary.field(i).name: summary.field(i).type for i in range(summary.num_fields)}
    assert list(summary_types) == ["last", "min", "max", "last_step", "count"]
    assert summary_types["last"] == summary_types["min"] == summary_types["max"] == pa.float64()
    assert summary_types["last_step"] == pa.int64()
    assert pa.types.is_integer(summary_types["count"])

    rows = {r["run_id"]: r for r in table.to_pylist()}
    assert sorted(rows) == sorted(demo)
    for run_id, want in demo.items():
        row = rows[run_id]
        assert (row["project"], row["name"], row["status"]) == (PROJECT, want["name"], "finished")
        assert row["start_time"] is not None and row["end_time"] is not None
        assert row["end_time"] >= row["start_time"]
        assert row["parent_run_id"] is None
        assert row["params"] == {"lr": want["lr"], "model.depth": want["depth"]}
        assert row["tags"] == {"team": "a"}

        floor = want["floor"]
        sent_loss = [v for (k, _), (_, v) in expected_points(floor).items() if k == "loss"]
        sent_min = min(v for v in sent_loss if not math.isnan(v))
        assert sent_min == floor
        assert row["metrics"]["loss"] == {
            "last": loss(floor, STEPS - 1),
            "min": sent_min,
            "max": loss(floor, 0),
            "last_step": STEPS - 1,
            "count": STEPS,
        }
        assert row["metrics"]["acc"] == {
            "last": acc(STEPS - ACC_EVERY),
            "min": 0.0,
            "max": acc(STEPS - ACC_EVERY),
            "last_step": STEPS - ACC_EVERY,
            "count": STEPS // ACC_EVERY,
        }


def one_liner() -> str:
    lines = [ln for ln in ONE_LINER.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(lines) == 1, f"{ONE_LINER} must hold exactly one command line, found {len(lines)}"
    return lines[0]


def test_readme_duckdb_one_liner_lists_runs_by_best_loss(trainlog_server, demo):
    env = dict(os.environ)
    # `python3` in the one-liner must be the interpreter running the tests (it has duckdb).
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run(
        ["bash", "-c", one_liner()], cwd=trainlog_server.cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"

    cells = [[c.strip() for c in line.strip().strip("│").split("│")]
             for line in done.stdout.splitlines() if line.strip().startswith("│")]
    assert cells[:2] == [["name", "lr", "best_loss"], ["varchar", "double", "double"]], done.stdout
    got = [(name, float(lr), float(best)) for name, lr, best in cells[2:]]
    assert got == [(name, lr, floor) for name, lr, _, floor in BY_BEST], done.stdout


def test_duckdb_joins_params_with_metrics_exactly(trainlog_server, demo):
    projects = (trainlog_server.store / "projects").as_posix()
    sql = f"""
        SELECT r.name, r.params.lr, r.params."model.depth", min(m.value) AS best_loss,
               arg_min(m.step, m.value) AS best_step, count(*) AS points,
               count(*) FILTER (WHERE isnan(m.value)) AS nans, max(m.step) AS last_step,
               any_value(r.metrics.loss.min) AS summary_min
        FROM '{projects}/*/runs.parquet' r
        JOIN '{projects}/*/metrics/*/*.parquet' m USING (run_id)
        WHERE m.key = 'loss'
        GROUP BY ALL
        ORDER BY best_loss
    """
    with duckdb.connect() as con:
        rows = con.execute(sql).fetchall()
    assert rows == [
        (name, lr, depth, floor, BEST_STEP, STEPS, 1, STEPS - 1, floor) for name, lr, depth, floor in BY_BEST
    ]


def put_blob(server: TrainlogServer, run_id: str, data: bytes, mime: str) -> str:
    sha = hashlib.sha256(data).hexdigest()
    req = urllib.request.Request(
        f"{server.url}/api/v1/runs/{run_id}/media/blobs/{sha}", data=data, method="PUT", headers={"Content-Type": mime}
    )
    with _http.open(req, timeout=60) as r:
        assert r.status in (200, 201), r.read()
    return sha


def test_duckdb_reads_the_media_index_and_finds_each_items_bytes(trainlog_server, demo):
    by_name = {run["name"]: run_id for run_id, run in demo.items()}
    uploaded = {}
    for name in ("lr-0.1", "lr-0.01"):
        run_id = by_name[name]
        items = []
        for step in (0, 500):
            for index in (0, 1):
                data = f"{name} image {step}/{index}".encode()
                sha = put_blob(trainlog_server, run_id, data, "image/png")
                uploaded[(name, step, index)] = data
                items.append({
                    "key": "samples", "step": step, "index": index, "kind": "image", "blob": sha,
                    "mime": "image/png", "width": 32, "height": 16, "caption": f"{name} {step}",
                    "timestamp": T0 + step,
                    "boxes": [{"group": "predictions", "x_min": 0.25, "y_min": 0.5, "x_max": 0.75, "y_max": 1.0,
                               "class_id": 3, "label": "cat", "score": 0.5}],
                    "class_labels": {"3": "cat"},
                })
        assert api(trainlog_server, f"/runs/{run_id}/media", {"items": items}) == {"recorded": 4}
    assert api(trainlog_server, "/admin/flush") == {"status": "ok"}

    store = trainlog_server.store
    projects = (store / "projects").as_posix()
    indexes = sorted(store.glob("projects/*/media/runs/*/index.parquet"))
    assert len(indexes) == 2, indexes
    assert pq.read_metadata(indexes[0]).metadata[b"trainlog.schema_version"] == b"1"
    sql = f"""
        SELECT r.name, i.key, i.step, i.index, i.caption, i.width, i.height, len(i.boxes) AS boxes,
               i.boxes[1].label AS label, i.boxes[1].x_max AS x_max, i.class_labels[1].label AS class_label,
               epoch_ms(i.timestamp) AS ms, i.object, i.sha256
        FROM '{projects}/*/runs.parquet' r
        JOIN '{projects}/*/media/runs/*/index.parquet' i USING (run_id)
        ORDER BY r.name, i.key, i.step, i.index
    """
    with duckdb.connect() as con:
        rows = con.execute(sql).fetchall()
    assert [row[:12] for row in rows] == [
        (name, "samples", step, index, f"{name} {step}", 32, 16, 1, "cat", 0.75, "cat", T0 + step)
        for name in ("lr-0.01", "lr-0.1") for step in (0, 500) for index in (0, 1)
    ]
    for name, _, step, index, *_, obj, sha in rows:
        data = (store / obj).read_bytes()
        assert data == uploaded[(name, step, index)]
        assert hashlib.sha256(data).hexdigest() == sha
        assert obj.endswith(f"/media/sha256/{sha[:2]}/{sha}")


def test_duckdb_reads_histograms_and_the_parts_of_a_table(trainlog_server, demo):
    run_id = next(iter(demo))
    values = np.random.default_rng(5).normal(size=1000)
    counts, edges = np.histogram(values, bins=8)
    histograms = [
        {"key": "grad/fc", "step": step, "edges": edges.tolist(), "counts": (counts * (step + 1)).tolist()}
        for step in (0, 10, 20)
    ]
    assert api(trainlog_server, f"/runs/{run_id}/histograms", {"histograms": histograms}) == {"recorded": 3}
    for step, mode in ((0, "replace"), (1, "append"), (2, "append")):
        body = {"columns": ["id", "label"], "rows": [[step * 10 + i, f"p{step}.{i}"] for i in range(2)]}
        api(trainlog_server, f"/runs/{run_id}/tables?key=worst&step={step}&mode={mode}", body)
    assert api(trainlog_server, "/admin/flush") == {"status": "ok"}

    store = trainlog_server.store
    projects = (store / "projects").as_posix()
    [path] = store.glob(f"projects/*/media/runs/{run_id}/histograms.parquet")
    assert pq.read_metadata(path).metadata[b"trainlog.schema_version"] == b"1"
    with duckdb.connect() as con:
        rows = con.execute(
            f"SELECT key, step, edges, counts FROM '{projects}/*/media/runs/*/histograms.parquet' ORDER BY step"
        ).fetchall()
        assert [(k, s) for k, s, *_ in rows] == [("grad/fc", 0), ("grad/fc", 10), ("grad/fc", 20)]
        assert rows[1][2] == edges.tolist() and rows[1][3] == (counts * 11).astype(float).tolist()
        # A table is its parts in order: the index names each part's Parquet object.
        parts = con.execute(
            f"""SELECT step, index, object FROM '{projects}/*/media/runs/{run_id}/index.parquet'
                WHERE key = 'worst' AND kind = 'table' ORDER BY step, index"""
        ).fetchall()
        assert [p[:2] for p in parts] == [(0, 0), (1, 0), (2, 0)]
        objects = ", ".join(f"'{(store / p[2]).as_posix()}'" for p in parts)
        table = con.execute(f"SELECT id, label FROM read_parquet([{objects}])").fetchall()
    assert table == [(s * 10 + i, f"p{s}.{i}") for s in range(3) for i in range(2)]


def test_duckdb_reads_a_runs_console_lines_in_order_beside_the_runs_table(trainlog_server, demo):
    by_name = {run["name"]: run_id for run_id, run in demo.items()}
    run_id = by_name["lr-0.1"]
    for rank in (0, 1):
        lines = [
            {"seq": i, "time": 1_700_000_000_000 + 2 * i + rank, "step": i // 10, "stream": "stderr" if i == 7 else "stdout",
             "text": f"rank {rank} line {i}"}
            for i in range(50)
        ]
        body = {"process": f"p{rank}", "rank": rank, "node": "node-a", "attempt": 1, "lines": lines}
        assert api(trainlog_server, f"/runs/{run_id}/logs", body) == {"accepted": 50}
    assert api(trainlog_server, "/admin/flush") == {"status": "ok"}
    projects = (trainlog_server.store / "projects").as_posix()
    sql = f"""
        SELECT r.name, c.rank, c.step, c.stream, c.line, epoch_ms(c.time) AS ms
        FROM '{projects}/*/console/*/*.parquet' c
        JOIN '{projects}/*/runs.parquet' r USING (run_id)
        ORDER BY c.time, c.rank, c.source, c.seq
    """
    with duckdb.connect() as con:
        rows = con.execute(sql).fetchall()
        version = con.execute(
            f"SELECT value FROM parquet_kv_metadata('{projects}/*/console/*/*.parquet') WHERE key = 'trainlog.schema_version'"
        ).fetchall()
    assert len(rows) == 100
    assert rows[0] == ("lr-0.1", 0, 0, "stdout", "rank 0 line 0", 1_700_000_000_000)
    assert [r[4] for r in rows[:4]] == ["rank 0 line 0", "rank 1 line 0", "rank 0 line 1", "rank 1 line 1"]
    assert [(r[1], r[4]) for r in rows if r[3] == "stderr"] == [(0, "rank 0 line 7"), (1, "rank 1 line 7")]
    assert {v[0] for v in version} == {b"1"}
