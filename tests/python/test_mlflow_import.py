"""`trainlog import mlflow`: a real MLflow server (the `mlflow` package of
tests/python/mlflow-server-requirements.txt, in .venv-mlflow) gets a few hundred runs with
metrics, artifacts, logged models and registered models through MLflow's own client; the import
copies them into trainlog, from the server and from its SQLite database; then both sides are read
through `MlflowClient` and must agree point for point."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import mlflow
import numpy as np
import pytest
from conftest import REPO_ROOT, start_trainlog, stop_trainlog, trainlog_binary
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag, ViewType

pytestmark = pytest.mark.timeout(600)

EXPERIMENTS = {"vision": 120, "nlp": 110, "retired": 30}
STEPS = 40
# The grid runs, the "stepless" run and the two runs that export models.
TOTAL_RUNS = sum(EXPERIMENTS.values()) + 1 + 2


def mlflow_server_binary() -> Path:
    env = os.environ.get("MLFLOW_SERVER_BIN")
    return Path(env) if env else REPO_ROOT / ".venv-mlflow" / "bin" / "mlflow"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Doubler(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input):
        return np.asarray(model_input) * 2.0


@pytest.fixture(scope="module")
def mlflow_server():
    binary = mlflow_server_binary()
    if not binary.is_file():
        pytest.fail(f"{binary} is missing: scripts/test.sh installs MLflow's server there (or set MLFLOW_SERVER_BIN)")
    folder = Path(tempfile.mkdtemp(prefix="mlflow-source-"))
    port = free_port()
    log = open(folder / "server.log", "w")
    process = subprocess.Popen(
        [str(binary), "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"],
        cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                os.killpg(process.pid, signal.SIGKILL)
                pytest.fail(f"MLflow's server did not start:\n{(folder / 'server.log').read_text()[-3000:]}")
            time.sleep(0.3)
    try:
        populate(url)
        yield url, folder
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def populate(url: str) -> None:
    """What teams have in MLflow: grids of runs, nested runs, failures, deleted runs and an
    experiment, NaN and infinite values, artifacts in folders, models in the registry."""
    client = MlflowClient(url)
    now = int(time.time() * 1000) - 3_600_000
    for name, count in EXPERIMENTS.items():
        experiment = client.create_experiment(name, tags={"team": "ml", "dataset": f"{name}-v2"})
        parent = None
        for i in range(count):
            tags = {"stage": "grid"} if i % 3 else {"stage": "probe"}
            if parent and i % 10 in (1, 2):
                tags["mlflow.parentRunId"] = parent
            run = client.create_run(experiment, run_name=f"{name}-{i}", start_time=now + i * 1000, tags=tags)
            run_id = run.info.run_id
            if i % 10 == 0:
                parent = run_id
            metrics = []
            for step in range(STEPS):
                t = now + i * 1000 + step * 7
                metrics.append(Metric("train/loss", 1.0 / (step + 1 + i % 7), t, step))
                metrics.append(Metric("val/acc", (step + i % 13) / (STEPS + 13), t, step))
            if i % 17 == 0:
                metrics.append(Metric("grad_norm", float("nan"), now, 0))
                metrics.append(Metric("grad_norm", float("inf"), now + 1, 1))
                metrics.append(Metric("grad_norm", -float("inf"), now + 2, 2))
            client.log_batch(
                run_id,
                metrics=metrics,
                params=[Param("lr", str(10 ** -(1 + i % 4))), Param("batch", str(2 ** (4 + i % 3))), Param("optimizer", "adamw")],
                tags=[RunTag("host", f"gpu-{i % 4}")],
            )
            if i % 15 == 0:
                client.log_text(run_id, f"config for {name}-{i}\n", "config/run config.yaml")
                client.log_dict(run_id, {"i": i, "name": name}, "summary.json")
                client.log_image(run_id, np.full((6, 8, 3), i, dtype=np.uint8), key="val/samples", step=i)
                client.log_table(run_id, {"i": [i, i + 1], "name": [name, name]}, "eval/table.json")
            status = "FAILED" if i % 23 == 5 else "KILLED" if i % 29 == 7 else "FINISHED"
            client.set_terminated(run_id, status, end_time=now + i * 1000 + 500)
            if i % 37 == 36:
                client.delete_run(run_id)
    # One series logged twice at the same step, as `log_metric` without a step does.
    vision = client.get_experiment_by_name("vision").experiment_id
    run_id = client.create_run(vision, run_name="stepless").info.run_id
    client.log_metric(run_id, "eval_loss", 0.9, timestamp=now, step=0)
    client.log_metric(run_id, "eval_loss", 0.7, timestamp=now + 5, step=0)
    client.set_terminated(run_id)
    client.delete_experiment(client.get_experiment_by_name("retired").experiment_id)

    mlflow.set_tracking_uri(url)
    mlflow.set_experiment("vision")
    sample = np.array([[1.0, 2.0], [3.0, -1.5]])
    for version in range(2):
        with mlflow.start_run(run_name=f"export-{version}"):
            mlflow.log_param("export", version)
            mlflow.pyfunc.log_model(name="model", python_model=Doubler(), input_example=sample,
                                    registered_model_name="doubler")
    client.update_registered_model("doubler", description="multiplies by two")
    client.set_registered_model_tag("doubler", "owner", "vision-team")
    client.set_registered_model_alias("doubler", "champion", "2")
    client.set_registered_model_alias("doubler", "previous", "1")
    client.set_model_version_tag("doubler", "2", "validated", "yes")
    client.update_model_version("doubler", "1", description="first export")
    # A model logged outside any run, which MLflow 3 allows.
    mlflow.set_experiment("nlp")
    mlflow.pyfunc.log_model(name="runless", python_model=Doubler())
    mlflow.set_experiment("vision")
    # A version made from a run's artifact path, as MLflow 2 registered models.
    probe = client.search_runs([vision], "attributes.run_name = 'vision-15'")[0].info.run_id
    client.create_registered_model("probe-config")
    client.create_model_version("probe-config", f"runs:/{probe}/config", run_id=probe)
    mlflow.set_tracking_uri(None)


def import_command(source: str, server: str, extra: list[str] | None = None) -> dict:
    return {
        "args": [str(trainlog_binary()), "import", "mlflow", "--from", source, "--server", server, *(extra or [])],
        "env": {k: v for k, v in os.environ.items() if not k.startswith(("TRAINLOG_", "MLFLOW_"))},
        "text": True,
    }


def run_import(source: str, server: str, extra: list[str] | None = None) -> str:
    answer = subprocess.run(**import_command(source, server, extra), capture_output=True, timeout=400)
    assert answer.returncode == 0, answer.stderr + answer.stdout
    return answer.stdout


def same_value(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, int, float]]:
    points = sorted((m.step, m.timestamp, m.value) for m in client.get_metric_history(run_id, key))
    # trainlog keeps one value a step: the one logged last.
    last = {}
    for step, timestamp, value in points:
        last[step] = (step, timestamp, value)
    return [last[s] for s in sorted(last)]


def artifact_files(client: MlflowClient, run_id: str, path: str | None = None) -> list[str]:
    out = []
    for entry in client.list_artifacts(run_id, path):
        out.extend(artifact_files(client, run_id, entry.path) if entry.is_dir else [entry.path])
    return sorted(out)


def assert_same_installation(source_url: str, copy_url: str) -> int:
    """Reads both through MLflow's client and compares everything the import copies; returns
    the number of metric points compared."""
    source, copy = MlflowClient(source_url), MlflowClient(copy_url)
    compared = 0
    for name in EXPERIMENTS:
        a, b = source.get_experiment_by_name(name), copy.get_experiment_by_name(name)
        assert b is not None, name
        assert b.lifecycle_stage == a.lifecycle_stage, name
        assert {k: v for k, v in b.tags.items() if not k.startswith("mlflow.")} == \
            {k: v for k, v in a.tags.items() if not k.startswith("mlflow.")}
        if a.lifecycle_stage == "deleted":
            source.restore_experiment(a.experiment_id)
            copy.restore_experiment(b.experiment_id)
        try:
            runs_a = {r.info.run_id: r for r in source.search_runs([a.experiment_id], run_view_type=ViewType.ALL, max_results=1000)}
            runs_b = {r.info.run_id: r for r in copy.search_runs([b.experiment_id], run_view_type=ViewType.ALL, max_results=1000)}
        finally:
            if a.lifecycle_stage == "deleted":
                source.delete_experiment(a.experiment_id)
                copy.delete_experiment(b.experiment_id)
        # A model MLflow logged outside any run has a run here to hold its files.
        holders = {i for i, r in runs_b.items() if "trainlog.logged_model" in r.data.tags}
        assert len(holders) == (1 if name == "nlp" else 0), name
        runs_b = {i: r for i, r in runs_b.items() if i not in holders}
        assert runs_b.keys() == runs_a.keys(), name
        for run_id, ra in runs_a.items():
            rb = runs_b[run_id]
            for field in ("run_name", "status", "start_time", "end_time", "lifecycle_stage", "user_id"):
                assert getattr(rb.info, field) == getattr(ra.info, field), (run_id, field)
            assert rb.data.params == ra.data.params, run_id
            for key in ("mlflow.runName", "mlflow.parentRunId", "stage", "host"):
                assert rb.data.tags.get(key) == ra.data.tags.get(key), (run_id, key)
            # trainlog always shows a run's user as `mlflow.user`; MLflow only when a client set it.
            assert rb.data.tags["mlflow.user"] == ra.data.tags.get("mlflow.user", ra.info.user_id), run_id
            assert rb.data.metrics.keys() == ra.data.metrics.keys(), run_id
            for key in ra.data.metrics:
                ha, hb = history(source, run_id, key), history(copy, run_id, key)
                assert len(hb) == len(ha), (run_id, key)
                for pa, pb in zip(ha, hb):
                    assert pb[:2] == pa[:2] and same_value(pb[2], pa[2]), (run_id, key, pa, pb)
                compared += len(ha)
            if ra.info.lifecycle_stage == "active" and a.lifecycle_stage == "active":
                files = artifact_files(source, run_id)
                # trainlog keeps an MLflow 3 logged model's files among its run's, under models/m-….
                assert [f for f in artifact_files(copy, run_id) if not f.startswith("models/m-")] == files, run_id
                with tempfile.TemporaryDirectory() as da, tempfile.TemporaryDirectory() as db:
                    for path in files:
                        fa = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=da, tracking_uri=source_url)
                        fb = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=db, tracking_uri=copy_url)
                        assert Path(fb).read_bytes() == Path(fa).read_bytes(), (run_id, path)
    for name in ("vision", "nlp"):
        ids = [source.get_experiment_by_name(name).experiment_id], [copy.get_experiment_by_name(name).experiment_id]
        models_a = {m.model_id: m for m in source.search_logged_models(experiment_ids=ids[0])}
        models_b = {m.model_id: m for m in copy.search_logged_models(experiment_ids=ids[1])}
        assert models_b.keys() == models_a.keys(), name
        for model_id, ma in models_a.items():
            mb = models_b[model_id]
            assert (mb.name, mb.source_run_id or None, mb.status, mb.params) == (ma.name, ma.source_run_id or None, ma.status, ma.params)
    for name in ("doubler", "probe-config"):
        ma, mb = source.get_registered_model(name), copy.get_registered_model(name)
        assert (mb.description, mb.tags, mb.aliases) == (ma.description, ma.tags, ma.aliases), name
        va = sorted(source.search_model_versions(f"name = '{name}'"), key=lambda v: int(v.version))
        vb = sorted(copy.search_model_versions(f"name = '{name}'"), key=lambda v: int(v.version))
        assert [(v.version, v.run_id, v.description, v.tags, v.current_stage) for v in vb] == \
            [(v.version, v.run_id, v.description, v.tags, v.current_stage) for v in va], name
    return compared


def test_import_from_a_running_mlflow_server_and_again(mlflow_server, tmp_path):
    url, _ = mlflow_server
    server = start_trainlog(tmp_path)
    try:
        report = run_import(url, server.url)
        assert f"runs: {TOTAL_RUNS} copied, 0 already there, 0 not copied" in report, report
        assert "1 not kept" in report, report
        assert "logged models: 3 copied" in report, report
        assert "model versions: 3 copied" in report, report
        assert "nothing failed" in report, report
        compared = assert_same_installation(url, server.url)
        assert compared > sum(EXPERIMENTS.values()) * STEPS * 2

        # The copy is ordinary trainlog data: the native API sees the runs and their series.
        native = MlflowClient(server.url)
        assert len(native.search_runs([native.get_experiment_by_name("vision").experiment_id], max_results=1000)) > 100
        with urllib.request.urlopen(f"{server.url}/api/v1/projects/nlp/runs?limit=1000") as answer:
            assert answer.status == 200

        # Images logged with a key and step, and tables, are media in the copy.
        probe = next(r for r in native.search_runs([native.get_experiment_by_name("vision").experiment_id], "attributes.run_name = 'vision-15'"))
        with urllib.request.urlopen(f"{server.url}/api/v1/runs/{probe.info.run_id}/media/keys") as answer:
            keys = {k["key"]: (k["kind"], k["first_step"]) for k in json.load(answer)["keys"]}
        assert keys["val/samples"] == ("image", 15) and keys["eval/table.json"] == ("table", 0), keys

        # A model loads from the copy by alias and predicts what it did in MLflow.
        sample = np.array([[1.0, 2.0], [3.0, -1.5]])
        mlflow.set_tracking_uri(server.url)
        try:
            copied = mlflow.pyfunc.load_model("models:/doubler@champion")
        finally:
            mlflow.set_tracking_uri(None)
        assert np.array_equal(np.asarray(copied.predict(sample)), sample * 2.0)
        runless = MlflowClient(url).search_logged_models(
            experiment_ids=[MlflowClient(url).get_experiment_by_name("nlp").experiment_id])[0]
        mlflow.set_tracking_uri(server.url)
        try:
            copied = mlflow.pyfunc.load_model(f"models:/{runless.model_id}")
        finally:
            mlflow.set_tracking_uri(None)
        assert np.array_equal(np.asarray(copied.predict(sample)), sample * 2.0)

        # Again: everything is there already, and nothing doubles.
        again = run_import(url, server.url)
        assert f"runs: 0 copied, {TOTAL_RUNS} already there, 0 not copied" in again, again
        # One request a run tells whether it is there (the runs of the deleted experiment are
        # skipped with it, unasked), besides a few for experiments and models: far from two.
        asked = int(re.search(r"^requests to trainlog: (\d+)$", again, re.M).group(1))
        looked_up = TOTAL_RUNS - EXPERIMENTS["retired"]
        assert looked_up <= asked < 2 * looked_up, (asked, looked_up, again)
        assert "model versions: 0 copied, 3 already there" in again, again
        assert assert_same_installation(url, server.url) == compared
    finally:
        stop_trainlog(server)


def test_an_import_killed_midway_goes_on_where_it_stopped(mlflow_server, tmp_path):
    url, _ = mlflow_server
    server = start_trainlog(tmp_path)
    try:
        process = subprocess.Popen(**import_command(url, server.url), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Killed once the first experiment is done and the others are not.
        for line in process.stderr:
            if line.startswith("experiment ") and line.rstrip().endswith(" runs"):
                process.kill()
                break
        process.wait(timeout=60)
        assert process.returncode == -signal.SIGKILL, process.returncode
        report = run_import(url, server.url)
        copied, there = map(int, re.search(r"^runs: (\d+) copied, (\d+) already there", report, re.M).groups())
        assert copied > 0 and there > 0 and copied + there == TOTAL_RUNS, report
        assert "nothing failed" in report, report
        assert_same_installation(url, server.url)
    finally:
        stop_trainlog(server)


def test_import_from_mlflows_sqlite_database(mlflow_server, tmp_path):
    url, folder = mlflow_server
    server = start_trainlog(tmp_path)
    try:
        report = run_import(f"sqlite:///{folder / 'mlflow.db'}", server.url, ["--artifacts", str(folder / "artifacts")])
        assert "nothing failed" in report, report
        assert "1 not kept" in report, report
        assert_same_installation(url, server.url)
    finally:
        stop_trainlog(server)


def test_import_names_what_it_cannot_read(tmp_path):
    server = start_trainlog(tmp_path)
    try:
        answer = subprocess.run([str(trainlog_binary()), "import", "mlflow", "--from", "postgresql://db/mlflow",
                                 "--server", server.url], capture_output=True, text=True, timeout=60)
        assert answer.returncode != 0
        assert "start `mlflow server` on it" in answer.stderr
        missing = tmp_path / "none.db"
        answer = subprocess.run([str(trainlog_binary()), "import", "mlflow", "--from", f"sqlite:///{missing}",
                                 "--server", server.url], capture_output=True, text=True, timeout=60)
        assert answer.returncode != 0 and str(missing) in answer.stderr
    finally:
        stop_trainlog(server)
