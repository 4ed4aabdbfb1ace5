"""The unchanged `mlflow` client (mlflow-skinny, pinned in requirements.txt) against trainlog's
MLflow door: experiments, runs, params, tags, metrics and their history, search, MLflow's error
codes, and keys. What it logs is an ordinary trainlog run, and the reverse.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from conftest import TrainlogServer, start_trainlog, stop_trainlog


def native(server: TrainlogServer, method: str, path: str, body: object = None, key: str | None = None) -> dict:
    request = urllib.request.Request(server.url + "/api/v1" + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    request.add_header("content-type", "application/json")
    if key:
        request.add_header("authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


def raw_mlflow(server: TrainlogServer, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(server.url + "/api/2.0/mlflow" + path, method="POST", data=json.dumps(body).encode())
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.fixture()
def client(trainlog_server: TrainlogServer, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    for var in ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(var, raising=False)
    mlflow.set_tracking_uri(trainlog_server.url)
    return MlflowClient(trainlog_server.url)


def test_a_fluent_session_is_an_ordinary_trainlog_run(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    mlflow.set_experiment("mlflow-door")
    with mlflow.start_run(run_name="lr-sweep-1", tags={"team": "vision", "mlflow.note.content": "first try"}) as run:
        mlflow.log_param("lr", 0.01)
        mlflow.log_params({"optimizer": "adam", "batch": 32})
        for step in range(10):
            mlflow.log_metric("loss", 1 / (step + 1), step=step)
        mlflow.log_metrics({"acc": 0.75, "diverged": float("nan"), "ratio": float("inf")}, step=9)
        mlflow.set_tag("stage", "dev")
    got = client.get_run(run.info.run_id)
    assert (got.info.status, got.info.run_name) == ("FINISHED", "lr-sweep-1")
    assert got.data.params == {"lr": "0.01", "optimizer": "adam", "batch": "32"}
    assert got.data.metrics["loss"] == pytest.approx(0.1) and got.data.metrics["acc"] == 0.75
    assert math.isnan(got.data.metrics["diverged"]) and got.data.metrics["ratio"] == math.inf
    assert got.data.tags["team"] == "vision" and got.data.tags["stage"] == "dev"
    assert got.data.tags["mlflow.note.content"] == "first try" and got.data.tags["mlflow.runName"] == "lr-sweep-1"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(s, 1 / (s + 1)) for s in range(10)]

    # The other door: the same run, in the same project, with the same series.
    same = native(trainlog_server, "GET", f"/runs/{run.info.run_id}")
    assert (same["project"], same["name"], same["status"], same["notes"]) == ("mlflow-door", "lr-sweep-1", "finished", "first try")
    assert same["params"]["optimizer"] == "adam" and same["tags"]["team"] == "vision"
    assert same["summary"]["loss"]["count"] == 10
    series = native(trainlog_server, "GET", f"/runs/{run.info.run_id}/metrics?key=loss")
    assert [p["step"] for p in series["points"]] == list(range(10))


def test_runs_logged_natively_are_read_and_searched_by_mlflow(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    made = native(trainlog_server, "POST", "/runs", {
        "project": "native-side", "name": "typed", "params": {"lr": 0.001, "layers": 4, "model": {"kind": "mlp"}},
        "tags": {"owner": "ada"}, "notes": "from the SDK",
    })
    run_id = made["id"]
    native(trainlog_server, "POST", f"/runs/{run_id}/metrics", {"points": [{"key": "val/acc", "step": s, "value": s / 10} for s in range(6)]})
    native(trainlog_server, "POST", f"/runs/{run_id}/finish", {"status": "failed"})
    got = client.get_run(run_id)
    assert got.data.params == {"lr": "0.001", "layers": "4", "model.kind": "mlp"}
    assert (got.info.status, got.data.tags["mlflow.runName"], got.data.tags["mlflow.note.content"]) == ("FAILED", "typed", "from the SDK")
    assert got.data.metrics["val/acc"] == 0.5
    experiment = client.get_experiment_by_name("native-side")
    found = client.search_runs([experiment.experiment_id], "metrics.`val/acc` >= 0.5 and attributes.status = 'FAILED'")
    assert [r.info.run_id for r in found] == [run_id]
    assert [m.value for m in client.get_metric_history(run_id, "val/acc")] == [s / 10 for s in range(6)]


def test_search_follows_mlflows_grammar_and_pages(client: MlflowClient) -> None:
    experiment_id = client.create_experiment("grid")
    for i, (opt, acc) in enumerate([("sgd", 0.61), ("adam", 0.83), ("sgd", 0.72), ("adam", 0.55), ("sgd", 0.9)]):
        run = client.create_run(experiment_id, run_name=f"grid-{i}", tags={"wave": "2" if i >= 3 else "1"})
        client.log_param(run.info.run_id, "opt", opt)
        client.log_metric(run.info.run_id, "acc", acc, step=1)
        client.set_terminated(run.info.run_id, "FINISHED" if i != 3 else "KILLED")

    def names(filter_string: str, **kw) -> list[str]:
        return [r.info.run_name for r in client.search_runs([experiment_id], filter_string, **kw)]

    assert names("params.opt = 'sgd'", order_by=["metrics.acc DESC"]) == ["grid-4", "grid-2", "grid-0"]
    assert names("metrics.acc > 0.7 AND tags.wave = '1'", order_by=["attributes.run_name ASC"]) == ["grid-1", "grid-2"]
    assert names("attributes.status = 'KILLED'") == ["grid-3"]
    assert names("tags.mlflow.runName ILIKE 'GRID-%' and params.`opt` != 'sgd'", order_by=["metrics.acc"]) == ["grid-3", "grid-1"]
    first = client.search_runs([experiment_id], "", order_by=["metrics.acc ASC"], max_results=2)
    second = client.search_runs([experiment_id], "", order_by=["metrics.acc ASC"], max_results=2, page_token=first.token)
    assert [r.info.run_name for r in first] == ["grid-3", "grid-0"] and first.token
    assert [r.info.run_name for r in second] == ["grid-2", "grid-1"]
    with pytest.raises(MlflowException) as bad:
        client.search_runs([experiment_id], "metrics.acc >")
    assert bad.value.error_code == "INVALID_PARAMETER_VALUE"


def test_errors_and_limits_are_mlflows(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    assert client.get_experiment_by_name("no-such-experiment") is None
    tagged = client.create_experiment("born-tagged", tags={"team": "vision", "budget": "10"})
    assert {k: v for k, v in client.get_experiment(tagged).tags.items()} == {"team": "vision", "budget": "10"}
    status, body = raw_mlflow(trainlog_server, "/experiments/create", {"name": "typed", "tags": "5"})
    assert status == 400 and "Invalid value \"5\" for parameter 'tags' supplied" in body["message"], body
    assert client.get_experiment_by_name("typed") is None
    client.create_experiment("twice")
    with pytest.raises(MlflowException) as exists:
        client.create_experiment("twice")
    assert exists.value.error_code == "RESOURCE_ALREADY_EXISTS" and exists.value.get_http_status_code() == 400
    with pytest.raises(MlflowException) as missing:
        client.get_run("0" * 32)
    assert missing.value.error_code == "RESOURCE_DOES_NOT_EXIST" and missing.value.get_http_status_code() == 404
    run = client.create_run(client.get_experiment_by_name("twice").experiment_id)
    client.log_param(run.info.run_id, "lr", "0.1")
    client.log_param(run.info.run_id, "lr", "0.1")
    with pytest.raises(MlflowException) as changed:
        client.log_param(run.info.run_id, "lr", "0.2")
    assert changed.value.error_code == "INVALID_PARAMETER_VALUE" and "Changing param values is not allowed" in changed.value.message
    with pytest.raises(MlflowException) as bad_key:
        client.log_metric(run.info.run_id, "loss*2", 1.0)
    assert bad_key.value.error_code == "INVALID_PARAMETER_VALUE"
    # log-batch limits, as MLflow's server applies them; nothing of a refused batch is written.
    metrics = [{"key": "m", "value": 1.0, "timestamp": 1, "step": s} for s in range(1001)]
    status, body = raw_mlflow(trainlog_server, "/runs/log-batch", {"run_id": run.info.run_id, "metrics": metrics})
    assert (status, body["error_code"]) == (400, "INVALID_PARAMETER_VALUE"), body
    params = [{"key": f"p{i}", "value": "x"} for i in range(101)]
    status, body = raw_mlflow(trainlog_server, "/runs/log-batch", {"run_id": run.info.run_id, "params": params})
    assert (status, body["error_code"]) == (400, "INVALID_PARAMETER_VALUE"), body
    assert client.get_metric_history(run.info.run_id, "m") == []
    assert set(client.get_run(run.info.run_id).data.params) == {"lr"}
    # A batch of 2,500 points goes through in MLflow's chunks and reads back whole, in pages.
    from mlflow.entities import Metric
    client.log_batch(run.info.run_id, metrics=[Metric("big", float(s), 1_700_000_000_000 + s, s) for s in range(2500)])
    assert [m.step for m in client.get_metric_history(run.info.run_id, "big")] == list(range(2500))
    status, page = raw_mlflow_get(trainlog_server, f"/metrics/get-history?run_id={run.info.run_id}&metric_key=big&max_results=1000")
    assert status == 200 and len(page["metrics"]) == 1000 and page["next_page_token"]
    # Wrong types and missing values are worded as MLflow words them (its own tests match on it).
    status, body = raw_mlflow(trainlog_server, "/runs/log-metric", {"run_id": 31, "key": "m", "value": 1, "timestamp": 1})
    assert status == 400 and "Invalid value 31 for parameter 'run_id' supplied" in body["message"], body
    status, body = raw_mlflow(trainlog_server, "/runs/log-batch", {"run_id": run.info.run_id, "metrics": "foo"})
    assert status == 400 and "Invalid value \"foo\" for parameter 'metrics' supplied" in body["message"], body
    status, body = raw_mlflow(trainlog_server, "/runs/log-batch", {"run_id": run.info.run_id, "metrics": [{"key": "mae", "value": 2.5}]})
    assert status == 400 and "Missing value for required parameter 'metrics[0].timestamp'" in body["message"], body
    # A start or end before 1970 or past the year 9999 is refused (durations and spend are
    # computed from them), and the run stays as it was.
    experiment = run.info.experiment_id
    with pytest.raises(MlflowException) as early:
        client.create_run(experiment, start_time=-1)
    assert early.value.error_code == "INVALID_PARAMETER_VALUE" and "start_time" in early.value.message
    with pytest.raises(MlflowException) as late:
        client.set_terminated(run.info.run_id, end_time=253_402_300_800_000)
    assert late.value.error_code == "INVALID_PARAMETER_VALUE" and "end_time" in late.value.message
    assert client.get_run(run.info.run_id).info.status == "RUNNING"
    # A parent MLflow does not know of is a plain tag there, and here.
    orphan = client.create_run(run.info.experiment_id, tags={"mlflow.parentRunId": "7"})
    assert client.get_run(orphan.info.run_id).data.tags["mlflow.parentRunId"] == "7"
    # A deleted run's history still reads, as in MLflow.
    client.delete_run(run.info.run_id)
    assert len(client.get_metric_history(run.info.run_id, "big")) == 2500


def raw_mlflow_get(server: TrainlogServer, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(server.url + "/api/2.0/mlflow" + path, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_mlflow_clients_send_trainlog_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "server").mkdir()
    server = start_trainlog(tmp_path / "server", ["--auth"])
    try:
        admin = (server.data / "admin.key").read_text().strip()
        for var in ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            monkeypatch.delenv(var, raising=False)
        keyless = MlflowClient(server.url)
        with pytest.raises(MlflowException) as refused:
            keyless.search_experiments()
        assert "401" in str(refused.value) or refused.value.error_code == "UNAUTHENTICATED"
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", admin)
        bearer = MlflowClient(server.url)
        experiment_id = bearer.create_experiment("guarded")
        run = bearer.create_run(experiment_id, run_name="with-a-key")
        bearer.log_metric(run.info.run_id, "loss", 0.5, step=1)
        assert bearer.get_run(run.info.run_id).info.user_id == "admin", "the run's user is the key's"
        # Basic auth: the user's name and the key as password.
        monkeypatch.delenv("MLFLOW_TRACKING_TOKEN")
        viewer = native(server, "POST", "/users", {"name": "viewer"}, key=admin)["key"]
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "viewer")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", viewer)
        basic = MlflowClient(server.url)
        assert basic.get_run(run.info.run_id).data.metrics == {"loss": 0.5}
        with pytest.raises(MlflowException) as denied:
            basic.log_metric(run.info.run_id, "loss", 0.4, step=2)
        assert denied.value.error_code == "PERMISSION_DENIED" and denied.value.get_http_status_code() == 403
    finally:
        stop_trainlog(server)


def test_artifacts_go_through_the_proxy_into_the_runs_artifacts(trainlog_server: TrainlogServer, client: MlflowClient, tmp_path: Path) -> None:
    mlflow.set_experiment("with-files")
    notes = tmp_path / "notes.txt"
    notes.write_text("hello from mlflow\n")
    plots = tmp_path / "plots"
    (plots / "deep").mkdir(parents=True)
    (plots / "a.csv").write_text("x,y\n1,2\n")
    (plots / "deep" / "b.csv").write_text("x,y\n3,4\n")
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(notes))
        mlflow.log_artifacts(str(plots), artifact_path="plots")
        mlflow.log_dict({"lr": 0.1}, "config.json")
    run_id = run.info.run_id
    assert sorted(f.path for f in client.list_artifacts(run_id)) == ["config.json", "notes.txt", "plots"]
    listed = {f.path: (f.is_dir, f.file_size) for f in client.list_artifacts(run_id, "plots")}
    assert listed == {"plots/a.csv": (False, 8), "plots/deep": (True, None)}
    down = Path(client.download_artifacts(run_id, "plots", str(tmp_path / "down")))
    assert (down / "deep" / "b.csv").read_text() == "x,y\n3,4\n"
    assert mlflow.artifacts.load_text(f"runs:/{run_id}/notes.txt") == "hello from mlflow\n"
    # The tracking API's own listing: paths from the run's root; a path out of it is refused.
    status, listing = raw_mlflow_get(trainlog_server, f"/artifacts/list?run_id={run_id}&path=plots")
    assert status == 200 and listing["root_uri"].endswith(f"/{run_id}/artifacts"), listing
    assert [(f["path"], f["is_dir"]) for f in listing["files"]] == [("plots/a.csv", False), ("plots/deep", True)]
    status, refused = raw_mlflow_get(trainlog_server, f"/artifacts/list?run_id={run_id}&path=../other")
    assert (status, refused["error_code"], refused["message"]) == (400, "INVALID_PARAMETER_VALUE", "Invalid path"), refused
    # The same files, with checksums, through the native API.
    native_list = native(trainlog_server, "GET", f"/runs/{run_id}/artifacts")["artifacts"]
    assert sorted(a["path"] for a in native_list) == ["config.json", "notes.txt", "plots/a.csv", "plots/deep/b.csv"]
    # A delete through the proxy removes a folder's files.
    request = urllib.request.Request(
        f"{trainlog_server.url}/api/2.0/mlflow-artifacts/artifacts/{run.info.experiment_id}/{run_id}/artifacts/plots", method="DELETE")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    assert sorted(f.path for f in client.list_artifacts(run_id)) == ["config.json", "notes.txt"]


def test_artifacts_of_deleted_runs_and_experiments_are_still_read(trainlog_server: TrainlogServer, client: MlflowClient, tmp_path: Path) -> None:
    """As on MLflow's own server: deleting a run or its experiment hides it from searches, but
    its artifacts are still listed and downloaded, through the proxy and the tracking API."""
    experiment_id = client.create_experiment("to-be-deleted")
    kept = tmp_path / "kept.txt"
    kept.write_text("still here\n")
    runs = []
    for _ in range(2):
        run = client.create_run(experiment_id)
        client.log_artifact(run.info.run_id, str(kept))
        runs.append(run.info.run_id)
    client.delete_run(runs[0])
    status, listing = raw_mlflow_get(trainlog_server, f"/artifacts/list?run_id={runs[0]}")
    assert status == 200 and [f["path"] for f in listing["files"]] == ["kept.txt"], listing
    assert [f.path for f in client.list_artifacts(runs[0])] == ["kept.txt"]
    client.delete_experiment(experiment_id)
    for run_id in runs:
        status, listing = raw_mlflow_get(trainlog_server, f"/artifacts/list?run_id={run_id}")
        assert status == 200 and listing["root_uri"].endswith(f"/{run_id}/artifacts"), listing
        assert [f.path for f in client.list_artifacts(run_id)] == ["kept.txt"]
        down = Path(client.download_artifacts(run_id, "kept.txt", str(tmp_path / run_id)))
        assert down.read_text() == "still here\n"
    # They take no new files while deleted.
    request = urllib.request.Request(
        f"{trainlog_server.url}/api/2.0/mlflow-artifacts/artifacts/{experiment_id}/{runs[1]}/artifacts/new.txt",
        method="PUT", data=b"x")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 404


def test_experiments_and_runs_are_renamed_tagged_deleted_and_restored(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    from mlflow.entities import ViewType
    experiment_id = client.create_experiment("to-rename")
    client.set_experiment_tag(experiment_id, "owner", "ada")
    client.rename_experiment(experiment_id, "renamed")
    got = client.get_experiment(experiment_id)
    assert (got.name, got.tags, got.lifecycle_stage) == ("renamed", {"owner": "ada"}, "active")
    assert native(trainlog_server, "GET", "/projects/renamed")["id"] == int(experiment_id)
    keep = client.create_run(experiment_id, run_name="keep")
    drop = client.create_run(experiment_id, run_name="drop")
    client.delete_run(drop.info.run_id)
    assert client.get_run(drop.info.run_id).info.lifecycle_stage == "deleted"
    assert [r.info.run_name for r in client.search_runs([experiment_id])] == ["keep"]
    assert [r.info.run_name for r in client.search_runs([experiment_id], run_view_type=ViewType.DELETED_ONLY)] == ["drop"]
    assert len(client.search_runs([experiment_id], run_view_type=ViewType.ALL)) == 2
    assert native(trainlog_server, "GET", f"/runs/{drop.info.run_id}")["archived"] is True, "the native API sees it archived"
    assert drop.info.run_id not in [r["id"] for r in native(trainlog_server, "GET", "/projects/renamed/runs")["runs"]]
    with pytest.raises(MlflowException) as inactive:
        client.log_metric(drop.info.run_id, "loss", 1.0)
    assert inactive.value.error_code == "INVALID_PARAMETER_VALUE"
    client.restore_run(drop.info.run_id)
    client.log_metric(drop.info.run_id, "loss", 1.0)
    # A deleted experiment takes its runs with it, keeps its name, and comes back whole.
    client.delete_experiment(experiment_id)
    assert client.get_experiment(experiment_id).lifecycle_stage == "deleted"
    assert "renamed" not in [e.name for e in client.search_experiments()]
    assert "renamed" in [e.name for e in client.search_experiments(view_type=ViewType.DELETED_ONLY)]
    with pytest.raises(MlflowException) as taken:
        client.create_experiment("renamed")
    assert taken.value.error_code == "RESOURCE_ALREADY_EXISTS"
    client.restore_experiment(experiment_id)
    by_name = [e.name for e in client.search_experiments(order_by=["name ASC"])]
    assert by_name == sorted(by_name) and "renamed" in by_name
    times = [e.creation_time for e in client.search_experiments(order_by=["creation_time DESC"])]
    assert times == sorted(times, reverse=True) and len(times) >= 3
    assert sorted(r.info.run_name for r in client.search_runs([experiment_id])) == ["drop", "keep"]
    assert keep.info.run_id in [r["id"] for r in native(trainlog_server, "GET", "/projects/renamed/runs")["runs"]]


def test_the_registry_resolves_models_uris_to_the_runs_files(trainlog_server: TrainlogServer, client: MlflowClient, tmp_path: Path) -> None:
    mlflow.set_experiment("registry-door")
    with mlflow.start_run() as run:
        mlflow.log_text("weights-v1", "model/weights.txt")
        mlflow.log_dict({"kind": "linear"}, "model/config.json")
    # MLflow 3's `register_model` wants a logged model; the client's own calls take a run's files.
    client.create_registered_model("detector", tags={"team": "vision"})
    version = client.create_model_version("detector", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    assert (version.name, version.version, version.run_id) == ("detector", "1", run.info.run_id)
    client.set_registered_model_alias("detector", "champion", "1")
    assert client.get_model_version_by_alias("detector", "champion").version == "1"
    for uri in ("models:/detector@champion", "models:/detector/1"):
        local = Path(mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / uri.replace(":", "").replace("/", "_").replace("@", "_"))))
        assert (local / "weights.txt").read_text() == "weights-v1", uri
    client.update_model_version("detector", "1", description="first")
    client.set_model_version_tag("detector", "1", "validated", "yes")
    client.update_registered_model("detector", description="finds things")
    got = client.get_registered_model("detector")
    assert (got.description, got.aliases, [v.version for v in got.latest_versions]) == ("finds things", {"champion": "1"}, ["1"])
    found = client.search_model_versions(f"run_id = '{run.info.run_id}'")
    assert [(v.name, v.description, v.tags) for v in found] == [("detector", "first", {"validated": "yes"})]
    assert [m.name for m in client.search_registered_models("name LIKE 'detec%'")] == ["detector"]
    # The native registry holds the same version, with the run's lineage.
    native_version = native(trainlog_server, "GET", "/models/detector/versions/champion")
    assert (native_version["run_id"], native_version["lineage"]["run"]["project"]) == (run.info.run_id, "registry-door")
    assert sorted(f["path"] for f in native_version["files"]) == ["model/config.json", "model/weights.txt"]
    with pytest.raises(MlflowException) as exists:
        client.create_registered_model("detector")
    assert exists.value.error_code == "RESOURCE_ALREADY_EXISTS"
    with pytest.raises(MlflowException) as missing:
        client.get_model_version("detector", "7")
    assert missing.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    client.rename_registered_model("detector", "finder")
    assert client.get_model_version_by_alias("finder", "champion").version == "1"
    assert native(trainlog_server, "GET", "/models/finder")["name"] == "finder"
    client.delete_registered_model_alias("finder", "champion")
    client.delete_model_version("finder", "1")
    client.delete_registered_model("finder")
    assert client.search_registered_models("name = 'finder'") == []


def test_log_model_register_model_and_load_it_by_alias(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    import mlflow.pyfunc

    class Doubler(mlflow.pyfunc.PythonModel):
        def predict(self, context, model_input, params=None):  # type: ignore[no-untyped-def]
            return [2 * x for x in model_input]

    mlflow.set_experiment("pyfunc-door")
    for rule in ("version created", "alias moved"):
        native(trainlog_server, "POST", "/projects/pyfunc-door/alert-rules", {"rule": rule})
    with mlflow.start_run() as run:
        info = mlflow.pyfunc.log_model(name="model", python_model=Doubler(), pip_requirements=["mlflow-skinny"])
    assert info.model_id.startswith("m-") and client.get_logged_model(info.model_id).status.name == "READY"
    version = mlflow.register_model(f"runs:/{run.info.run_id}/model", "doubler")
    client.set_registered_model_alias("doubler", "champion", version.version)
    original = mlflow.pyfunc.load_model(info.model_uri)
    by_alias = mlflow.pyfunc.load_model("models:/doubler@champion")
    by_number = mlflow.pyfunc.load_model(f"models:/doubler/{version.version}")
    assert original.predict([1, 2, 3]) == by_alias.predict([1, 2, 3]) == by_number.predict([1, 2, 3]) == [2, 4, 6]
    # The model's files are the run's artifacts; the version has the run's lineage.
    files = [a["path"] for a in native(trainlog_server, "GET", f"/runs/{run.info.run_id}/artifacts")["artifacts"]]
    assert f"models/{info.model_id}/MLmodel" in files
    native_version = native(trainlog_server, "GET", "/models/doubler/versions/champion")
    assert (native_version["run_id"], native_version["lineage"]["run"]["project"]) == (run.info.run_id, "pyfunc-door")
    status, raw = raw_mlflow_get(trainlog_server, f"/model-versions/get?name=doubler&version={version.version}")
    assert (status, raw["model_version"]["model_id"]) == (200, info.model_id)
    # The registry rules of the run's project fired, once each.
    alerts = native(trainlog_server, "GET", "/projects/pyfunc-door/alerts")["alerts"]
    assert sorted((a["rule"], a["title"]) for a in alerts) == [
        ("alias moved", f"doubler@champion moved to v{version.version}"),
        ("version created", f"doubler v{version.version} created"),
    ]


def test_a_model_logged_outside_a_run_gets_a_run_of_its_own(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    mlflow.set_experiment("runless")

    class Tripler(mlflow.pyfunc.PythonModel):
        def predict(self, context, model_input):
            return np.asarray(model_input) * 3.0

    assert mlflow.active_run() is None
    info = mlflow.pyfunc.log_model(name="tripler", python_model=Tripler())
    found = client.get_logged_model(info.model_id)
    assert found.source_run_id in (None, "") and found.status == "READY", found
    sample = np.array([[1.0, -2.0]])
    assert np.array_equal(np.asarray(mlflow.pyfunc.load_model(info.model_uri).predict(sample)), sample * 3.0)
    version = mlflow.register_model(info.model_uri, "runless-tripler")
    loaded = mlflow.pyfunc.load_model(f"models:/runless-tripler/{version.version}")
    assert np.array_equal(np.asarray(loaded.predict(sample)), sample * 3.0)
    # The run that holds its files is an ordinary finished run, named after the model.
    holders = native(trainlog_server, "GET", "/projects/runless/runs")["runs"]
    assert [(r["name"], r["status"], r["tags"]) for r in holders] == [("tripler", "finished", {"trainlog.logged_model": info.model_id})]


def test_sklearn_autolog_logs_params_metrics_and_a_loadable_model(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    import mlflow.sklearn
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    mlflow.set_experiment("autolog-door")
    mlflow.sklearn.autolog()
    try:
        features, labels = load_iris(return_X_y=True)
        with mlflow.start_run() as run:
            model = LogisticRegression(max_iter=300, C=0.5).fit(features, labels)
    finally:
        mlflow.sklearn.autolog(disable=True)
    got = client.get_run(run.info.run_id)
    assert (got.data.params["C"], got.data.params["max_iter"]) == ("0.5", "300")
    assert got.data.metrics["training_accuracy_score"] == pytest.approx(model.score(features, labels))
    loaded = mlflow.sklearn.load_model(f"runs:/{run.info.run_id}/model")
    assert (loaded.predict(features) == model.predict(features)).all()
    same = native(trainlog_server, "GET", f"/runs/{run.info.run_id}")
    assert same["params"]["C"] == "0.5" and same["summary"]["training_accuracy_score"]["count"] == 1


def test_a_runs_inputs_and_outputs_read_back_as_mlflow_writes_them(client: MlflowClient) -> None:
    from mlflow.entities import Dataset, DatasetInput, InputTag, LoggedModelInput, LoggedModelOutput
    experiment_id = client.create_experiment("inputs-outputs")
    bare = client.create_run(experiment_id)
    assert (client.get_run(bare.info.run_id).inputs.dataset_inputs, client.get_run(bare.info.run_id).outputs.model_outputs) == ([], [])
    run = client.create_run(experiment_id)
    model = client.create_logged_model(experiment_id=experiment_id)
    dataset = Dataset(name="train", digest="d1", source_type="local", source='{"uri": "/data/train.csv"}',
                      schema='{"mlflow_colspec": []}', profile='{"num_rows": 2}')
    used = DatasetInput(dataset, tags=[InputTag("split", "a"), InputTag("mlflow.data.context", "training")])
    client.log_inputs(run.info.run_id, datasets=[used], models=[LoggedModelInput(model.model_id)])
    client.log_inputs(run.info.run_id, datasets=[used])
    client.log_outputs(run.info.run_id, [LoggedModelOutput(model.model_id, 3)])
    got = client.get_run(run.info.run_id)
    (kept,) = got.inputs.dataset_inputs
    assert (kept.dataset.name, kept.dataset.digest, kept.dataset.source_type, kept.dataset.source, kept.dataset.schema,
            kept.dataset.profile) == ("train", "d1", "local", '{"uri": "/data/train.csv"}', '{"mlflow_colspec": []}', '{"num_rows": 2}')
    assert [(t.key, t.value) for t in kept.tags] == [("split", "a"), ("mlflow.data.context", "training")]
    assert [m.model_id for m in got.inputs.model_inputs] == [model.model_id]
    assert got.outputs.model_outputs == [LoggedModelOutput(model.model_id, 3)]
    found = {r.info.run_id: r for r in client.search_runs([experiment_id])}
    assert found[run.info.run_id].inputs == got.inputs and found[run.info.run_id].outputs.model_outputs == got.outputs.model_outputs
    assert found[bare.info.run_id].inputs.dataset_inputs == []


def test_search_limits_and_tag_filters_are_mlflows(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    experiment_id = client.create_experiment("limits", tags={"squad": "vision"})
    client.create_experiment("untagged")
    client.create_experiment("other-team", tags={"squad": "speech"})
    with pytest.raises(MlflowException, match=r"Invalid value 123456789 for parameter 'max_results' supplied") as too_many:
        client.search_runs([experiment_id], max_results=123456789)
    assert too_many.value.error_code == "INVALID_PARAMETER_VALUE" and too_many.value.get_http_status_code() == 400
    assert client.search_runs([experiment_id], max_results=50000) == []
    status, body = raw_mlflow(trainlog_server, "/runs/search", {"experiment_ids": [experiment_id], "max_results": 0})
    assert (status, body["error_code"]) == (400, "INVALID_PARAMETER_VALUE") and "It must be a positive integer" in body["message"], body
    # A tag comparison, `!=` included, only matches what has the tag.
    assert [e.name for e in client.search_experiments(filter_string="tags.squad != 'vision'")] == ["other-team"]
    assert [e.name for e in client.search_experiments(filter_string="tags.squad = 'vision'")] == ["limits"]
    client.create_registered_model("tagged-model", tags={"squad": "vision"})
    client.create_registered_model("plain-model")
    assert [m.name for m in client.search_registered_models("tags.squad != 'speech'")] == ["tagged-model"]
    assert {"plain-model", "tagged-model"} <= {m.name for m in client.search_registered_models()}


def test_registry_errors_are_worded_as_mlflows(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    client.create_registered_model("worded")
    with pytest.raises(MlflowException, match=r"Registered Model \(name=worded\) already exists\.$") as exists:
        client.create_registered_model("worded")
    assert exists.value.get_http_status_code() == 400
    client.create_registered_model("taken")
    with pytest.raises(MlflowException, match=r"Registered Model \(name=taken\) already exists") as taken:
        client.rename_registered_model("worded", "taken")
    assert taken.value.error_code == "RESOURCE_ALREADY_EXISTS"
    client.rename_registered_model("worded", "worded 2")
    for call in (lambda: client.get_registered_model("worded"), lambda: client.update_registered_model("worded", "d"),
                 lambda: client.rename_registered_model("worded", "elsewhere"), lambda: client.delete_registered_model("worded"),
                 lambda: client.set_registered_model_tag("worded", "k", "v")):
        with pytest.raises(MlflowException, match=r"Registered Model with name=worded not found$") as missing:
            call()
        assert missing.value.get_http_status_code() == 404
    assert client.get_registered_model("worded 2").name == "worded 2"
    # The native API keeps its own words.
    with pytest.raises(urllib.error.HTTPError) as native_missing:
        native(trainlog_server, "GET", "/models/worded")
    assert native_missing.value.code == 404 and "Registered Model" not in native_missing.value.read().decode()


def test_logged_models_are_named_tagged_and_deleted_as_mlflows(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    experiment_id = client.create_experiment("logged-models")
    first, second = client.create_logged_model(experiment_id), client.create_logged_model(experiment_id)
    assert first.name.startswith("model-") and second.name.startswith("model-") and first.name != second.name
    assert [m.name for m in client.search_logged_models([experiment_id], filter_string=f"name = '{first.name}'")] == [first.name]
    client.set_logged_model_tags(first.model_id, {"a": "1"})
    client.delete_logged_model_tag(first.model_id, "a")
    with pytest.raises(MlflowException, match="No tag with key 'a'") as no_tag:
        client.delete_logged_model_tag(first.model_id, "a")
    assert no_tag.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    # A model logged outside a run takes its holder run with it; a run's model leaves the run.
    run = client.create_run(experiment_id)
    owned = client.create_logged_model(experiment_id, name="owned", source_run_id=run.info.run_id)
    for model in (first, owned):
        client.delete_logged_model(model.model_id)
        with pytest.raises(MlflowException, match="not found") as gone:
            client.get_logged_model(model.model_id)
        assert gone.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    assert [m.model_id for m in client.search_logged_models([experiment_id])] == [second.model_id]
    with pytest.raises(MlflowException) as twice:
        client.delete_logged_model(first.model_id)
    assert twice.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    assert client.get_run(run.info.run_id).info.lifecycle_stage == "active"
    holders = {r["name"]: r["archived"] for r in native(trainlog_server, "GET", "/projects/logged-models/runs?archived=true")["runs"]}
    assert holders.get(first.name) is True, holders


def test_mlflows_images_tables_text_and_dicts_land_in_the_media_store(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    mlflow.set_experiment("media-door")
    rng = np.random.default_rng(1)
    images = {step: rng.integers(0, 256, size=(24, 32, 3), dtype=np.uint8) for step in (0, 5)}
    with mlflow.start_run() as run:
        for step, pixels in images.items():
            mlflow.log_image(pixels, key="val/samples", step=step)
        mlflow.log_image(images[0], key="val/samples", step=5)
        mlflow.log_table({"prompt": ["a", "b"], "score": [0.5, 0.25]}, artifact_file="eval/results.json")
        mlflow.log_table({"prompt": ["c"], "score": [1.0]}, artifact_file="eval/results.json")
        mlflow.log_text("generated text\nsecond line", "samples/generation.txt")
        mlflow.log_dict({"lr": 0.1, "layers": [1, 2]}, "config.yaml")
    run_id = run.info.run_id
    keys = {k["key"]: (k["kind"], k["items"]) for k in native(trainlog_server, "GET", f"/runs/{run_id}/media/keys")["keys"]}
    assert keys == {
        "val/samples": ("image", 3),
        "eval/results.json": ("table", 1),
        "samples/generation.txt": ("text", 1),
        "config.yaml": ("text", 1),
    }, keys
    items = native(trainlog_server, "GET", f"/runs/{run_id}/media?key=val/samples")["items"]
    assert [(i["step"], i["index"], i["width"], i["height"]) for i in items] == [(0, 0, 32, 24), (5, 0, 32, 24), (5, 1, 32, 24)]
    from PIL import Image as PILImage
    import io

    def pixels(item: dict) -> np.ndarray:
        with urllib.request.urlopen(trainlog_server.url + item["url"], timeout=30) as response:
            return np.asarray(PILImage.open(io.BytesIO(response.read())))

    assert np.array_equal(pixels(items[0]), images[0]), "the PNG MLflow uploaded"
    # MLflow uploads in the background: the two images of step 5 take their indexes in the order they arrive.
    at_five = sorted((pixels(i) for i in items[1:]), key=lambda a: bool(np.array_equal(a, images[0])))
    assert np.array_equal(at_five[0], images[5]) and np.array_equal(at_five[1], images[0])
    table = native(trainlog_server, "GET", f"/runs/{run_id}/tables?key=eval/results.json")
    assert table["rows"] == [["a", 0.5], ["b", 0.25], ["c", 1.0]], "MLflow re-logs the whole table; the last one shows"
    text = native(trainlog_server, "GET", f"/runs/{run_id}/media?key=samples/generation.txt")["items"][0]
    with urllib.request.urlopen(trainlog_server.url + text["url"], timeout=30) as response:
        assert response.read().decode() == "generated text\nsecond line"
    # The files stay MLflow's artifacts too.
    assert "eval" in {f.path for f in client.list_artifacts(run_id)}


def test_params_written_as_numbers_filter_as_numbers_and_missing_things_are_said_once(
    trainlog_server: TrainlogServer, client: MlflowClient
) -> None:
    mlflow.set_experiment("typed-params")
    runs = {}
    for lr in ("0.01", "1e-4"):
        with mlflow.start_run() as run:
            mlflow.log_params({"lr": lr, "layers": "12", "optimizer": "adam"})
            runs[lr] = run.info.run_id
    found = native(trainlog_server, "POST", "/runs/search",
                   {"project": "typed-params", "filter": "params.lr > 0.001 and params.layers >= 12"})
    assert [r["id"] for r in found["runs"]] == [runs["0.01"]]
    # The text is what the client sent; quoted literals still compare it.
    assert client.get_run(runs["1e-4"]).data.params["lr"] == "1e-4"
    found = native(trainlog_server, "POST", "/runs/search", {"project": "typed-params", "filter": "params.lr = '1e-4'"})
    assert [r["id"] for r in found["runs"]] == [runs["1e-4"]]

    missing_run = "0" * 32
    with pytest.raises(MlflowException) as run_missing:
        client.get_run(missing_run)
    assert str(run_missing.value.message).count("not found") == 1, run_missing.value.message
    with pytest.raises(MlflowException) as version_missing:
        client.get_model_version("no-such-model", "3")
    assert str(version_missing.value.message).count("not found") == 1, version_missing.value.message


def test_metric_rules_fire_on_what_mlflow_logs(trainlog_server: TrainlogServer, client: MlflowClient) -> None:
    mlflow.set_experiment("mlflow-watched")
    with mlflow.start_run(run_name="setup"):
        pass
    native(trainlog_server, "POST", "/projects/mlflow-watched/alert-rules", {"rule": "loss not finite"})
    with mlflow.start_run(run_name="diverging") as run:
        mlflow.log_metric("loss", 0.5, step=1)
        mlflow.log_metrics({"loss": float("nan"), "acc": 0.1}, step=2)
    deadline = time.monotonic() + 30
    alerts: list = []
    while time.monotonic() < deadline and not alerts:
        alerts = native(trainlog_server, "GET", f"/runs/{run.info.run_id}/alerts")["alerts"]
        time.sleep(0.1)
    assert [(a["rule"], a["title"], a["step"]) for a in alerts] == [("loss not finite", "loss is NaN", 2)]
