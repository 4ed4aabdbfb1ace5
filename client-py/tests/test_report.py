"""The training report from Python: runs made by the SDK, their cost and checkpoint restores read
back through `Api().report()`, and `trainlog report` as CSV opened by pandas, as JSON, and as a
budget check that exits non-zero."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import trainlog

FIGURES = [
    "gpu_utilization_rate",
    "idle_gpu_hours",
    "queue_wait_s",
    "cost_usd",
    "cost_per_gpu_hour_usd",
    "cost_per_experiment_usd",
    "spot_savings_rate",
    "spot_savings_usd",
    "job_success_rate",
    "infra_failures",
    "code_failures",
    "checkpoint_restore_rate",
    "experiments_per_user_week",
    "time_to_result_median_s",
    "time_to_result_p90_s",
    "energy_kwh",
    "mfu",
]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "trainlog", "report", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(300)
def test_the_report_from_python_and_the_command_line(
    client_env: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINLOG_COST_PER_HOUR", "36")
    ids = {}
    for project, outcome in [("vision", "finished"), ("vision", "failed"), ("nlp", "finished")]:
        run = trainlog.init(project=project, system_metrics_interval=None)
        for step in range(20):
            run.log({"loss": 1 / (step + 1)}, step=step)
        if project == "vision" and outcome == "finished":
            ckpt = tmp_path / "model.bin"
            ckpt.write_bytes(b"weights" * 100)
            run.log_checkpoint(ckpt, step=19)
        run.finish(outcome)
        ids[(project, outcome)] = run.id
    trained = ids[("vision", "finished")]
    # One restore that works, and one whose loader failed, said through the API.
    trainlog.restore_checkpoint(trained, str(tmp_path / "restored"))
    api = trainlog.Api()
    latest = api.run(trained).checkpoints()[0]["name"]
    api.record_restore(trained, latest, error="torch.load: unexpected EOF")

    report = api.report(by="project")
    costs = {key: api.run(run_id).job["cost_usd"] for key, run_id in ids.items()}
    assert all(c > 0 for c in costs.values()), costs
    total = report["total"]
    assert total["runs"] == 3
    assert total["cost_usd"] == pytest.approx(sum(costs.values()), rel=1e-9)
    assert (total["job_success_rate"], total["code_failures"], total["infra_failures"]) == (pytest.approx(2 / 3), 1, 0)
    assert total["checkpoint_restore_rate"] == 0.5
    assert total["gpu_utilization_rate"] is None and "GPUs" in total["reasons"]["gpu_utilization_rate"]
    groups = {g["group"]: g for g in report["groups"]}
    assert sorted(groups) == ["nlp", "vision"]
    assert groups["nlp"]["cost_usd"] == pytest.approx(costs[("nlp", "finished")], rel=1e-9)
    assert api.report(projects=["nlp"])["total"]["runs"] == 1

    # The command line: CSV for a chargeback sheet, opened by pandas.
    done = cli("--by", "project", "--format", "csv")
    assert done.returncode == 0, done.stderr
    sheet = pd.read_csv(io.StringIO(done.stdout))
    # The share of GPU-hours on spot says what it is, not a saving in dollars.
    header = [f if f != "spot_savings_rate" else "spot_savings_rate (share of GPU-hours on spot)" for f in FIGURES]
    assert list(sheet.columns) == ["group", "runs", *header, "cancelled", "reasons"]
    assert sheet["group"].tolist() == ["nlp", "vision"]
    vision = sheet.set_index("group").loc["vision"]
    assert vision["runs"] == 2
    assert vision["cost_usd"] == pytest.approx(groups["vision"]["cost_usd"], rel=1e-9)
    assert pd.isna(vision["gpu_utilization_rate"]) and "gpu_utilization_rate" in vision["reasons"]

    # JSON: a list of groups with the figures under their names.
    done = cli("--since", "1d", "--format", "json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert [g["group"] for g in listed] == ["all"]
    assert set(FIGURES) <= set(listed[0]) and listed[0]["runs"] == 3
    assert listed[0]["cost_usd"] == pytest.approx(total["cost_usd"], rel=1e-9)

    # A budget check for cron: over the budget exits 3, under it 0; the table names the spend.
    spend = total["cost_usd"]
    over = cli("--fail-over", str(spend / 2))
    assert over.returncode == 3, over.stdout + over.stderr
    assert "over the budget" in over.stderr
    under = cli("--fail-over", str(spend * 2))
    assert under.returncode == 0, under.stderr
    assert "spend $" in under.stdout and "vision" not in under.stdout
    refused = cli("--by", "month")
    assert refused.returncode == 1 and "by" in refused.stderr
