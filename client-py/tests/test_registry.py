"""The model registry from Python and from the `trainlog models` command, against the real server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import trainlog
from helpers import Server


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "trainlog"
    return subprocess.run([str(exe), "models", *args], env={**env, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)


def test_registry_lifecycle_from_python_and_the_cli(server: Server, client_env: dict, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    run = trainlog.init(project="vision", config={"lr": 0.01, "arch": "resnet50"}, system_metrics_interval=None)
    saved = []
    for step, acc in [(1, 0.7), (2, 0.8), (3, 0.9)]:
        (ckpt / "weights.bin").write_bytes(bytes([step]) * 4096)
        (ckpt / "sub" / "config.json").write_text(f'{{"step": {step}}}')
        run.log({"val/acc": acc}, step=step)
        saved.append(run.log_checkpoint(ckpt, step=step, keep_last=2))
    run.log_artifact(ckpt / "weights.bin", "exports/model.onnx")

    v1 = trainlog.register_model("resnet", checkpoint=saved[2], alias="champion", description="best so far", tags={"data": "v2"})
    assert (v1.version, v1.aliases, v1.source["step"]) == (1, ["champion"], 3)
    assert v1.lineage["params"] == {"lr": 0.01, "arch": "resnet50"}
    assert v1.lineage["metrics"]["val/acc"]["last"] == 0.9
    assert v1.lineage["python"]["version"].startswith(f"{sys.version_info.major}.")
    v2 = trainlog.register_model("resnet", artifact="exports/model.onnx", alias="staging")
    v3 = trainlog.register_model("resnet", checkpoint=2)
    run.finish()

    api = trainlog.Api()
    model = api.model("resnet")
    assert model.aliases == {"champion": 1, "staging": 2}
    dest = tmp_path / "champion"
    model.version("champion").download(str(dest))
    assert (dest / "weights.bin").read_bytes() == bytes([3]) * 4096
    assert (dest / "sub" / "config.json").read_text() == '{"step": 3}'
    model.version("staging").download(str(tmp_path / "onnx"))
    assert (tmp_path / "onnx" / "model.onnx").read_bytes() == bytes([3]) * 4096

    assert model.set_alias("champion", v3.version).version == 3
    assert api.model("resnet").version("champion").version == 3
    assert v2.archive().status == "archived"
    assert [v.version for v in model.versions()] == [3, 2, 1]
    assert [m.name for m in api.models("res")] == ["resnet"]

    with pytest.raises(trainlog.NotFoundError):
        api.model("missing")
    with pytest.raises(trainlog.NotFoundError):
        model.version("production")
    # Retention drops step 2's checkpoint: version 3 cannot be downloaded, and says why.
    again = trainlog.init(project="vision", run_id=run.id, system_metrics_interval=None)
    (ckpt / "weights.bin").write_bytes(b"4")
    again.log_checkpoint(ckpt, step=4, keep_last=1)
    again.finish()
    with pytest.raises(trainlog.SourceDeletedError):
        api.model("resnet").version(3).download(str(tmp_path / "gone"))
    assert api.model("resnet").version(3).source_available is False

    listed = cli(client_env, "list")
    assert listed.returncode == 0 and "resnet" in listed.stdout and "champion=v3" in listed.stdout, listed
    aliased = cli(client_env, "alias", "resnet", "champion", "2")
    assert aliased.returncode == 0 and "version 2" in aliased.stdout, aliased
    shown = cli(client_env, "show", "resnet", "champion")
    assert '"version": 2' in shown.stdout and '"lr": 0.01' in shown.stdout
    out = tmp_path / "from-cli"
    downloaded = cli(client_env, "download", "resnet", "champion", str(out))
    assert downloaded.returncode == 0, downloaded.stderr
    assert (out / "model.onnx").read_bytes() == bytes([3]) * 4096
    failed = cli(client_env, "download", "resnet", "1", str(tmp_path / "x"))
    assert failed.returncode != 0 and "deleted" in failed.stderr
    # The files live in the store the server was given (S3 under TRAINLOG_TEST_STORE).
    local = [p for p in (server.data / "store").glob("projects/*/artifacts/**/*") if p.is_file()]
    assert (len(local) == 0) == bool(getattr(server, "store_url", None)), local
