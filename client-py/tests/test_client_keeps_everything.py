"""`run.finish()` reports how every point ended up: acknowledged, spooled, rejected (kept in the
rejected file with the server's answer) or unsaved, and says so on stderr."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import trainlog
from helpers import Server


def test_a_clean_run_reports_every_point_acknowledged(server: Server, client_env: dict) -> None:
    run = trainlog.init(project="clean", system_metrics_interval=None)
    for step in range(300):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
    report = run.finish()
    assert report == {
        "acknowledged": 300,
        "spooled": 0,
        "rejected": 0,
        "unsaved": 0,
        "requests_spooled": 0,
        "requests_rejected": 0,
        "requests_unsaved": 0,
        "spool_file": None,
        "rejected_file": None,
        "warnings": [],
        "media_sent": 0,
        "media_spooled": 0,
        "media_rejected": 0,
        "media_dropped": 0,
        # The one line the process printed while the run captured its console: the run's page.
        "console_lines": 1,
        "console_lines_acknowledged": 1,
        "console_lines_dropped": 0,
    }
    assert run.finish() == report, "finishing again answers the same report"


def test_refused_points_and_requests_are_kept_in_the_rejected_file(
    server: Server, client_env: dict, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # The console off: the SDK's own warnings printed here would be requests of their own.
    run = trainlog.init(project="refused", system_metrics_interval=None, console="off")
    for step in range(50):
        run.log({"loss": float(step)}, step=step)
    run.set_metadata("bad.section", {"kept": True})
    assert run.flush(30)
    # The server loses the run: one with a fresh data folder takes its port, so later batches
    # and the finish are refused with 404.
    port = server.port
    server.kill9()
    fresh = Server(tmp_path / "fresh-server-data")
    fresh.start(port)
    try:
        for step in range(50, 80):
            run.log({"loss": float(step)}, step=step)
        report = trainlog.finish()
    finally:
        fresh.stop()

    assert report is not None
    assert (report["acknowledged"], report["rejected"], report["spooled"], report["unsaved"]) == (50, 30, 0, 0)
    assert (report["requests_rejected"], report["requests_unsaved"]) == (2, 0)
    expected_file = Path(client_env["TRAINLOG_DIR"]) / "spool" / "rejected" / f"{run.id}.jsonl"
    assert report["rejected_file"] == str(expected_file)
    lines = [json.loads(line) for line in expected_file.read_text().splitlines()]
    metadata = [line for line in lines if line["request"]["op"] == "metadata"]
    assert len(metadata) == 1
    assert (metadata[0]["status"], metadata[0]["field"], metadata[0]["request"]["body"]) == (
        400,
        "section",
        {"kept": True},
    )
    refused_steps = [p[1] for line in lines if line["request"]["op"] == "points" for p in line["request"]["points"]]
    assert refused_steps == list(range(50, 80))
    assert all(line["status"] == 404 for line in lines if line["request"]["op"] != "metadata")
    stderr = capfd.readouterr().err
    assert str(expected_file) in stderr and "refused 30 points and 2 other requests" in stderr, stderr
    assert any(str(expected_file) in warning for warning in report["warnings"])


def test_points_that_cannot_be_spooled_are_reported_unsaved(
    server: Server, client_env: dict, capfd: pytest.CaptureFixture[str]
) -> None:
    spool = Path(client_env["TRAINLOG_DIR"]) / "spool"
    spool.mkdir(parents=True)
    # Every write to this run's spool fails, as on a full disk.
    os.symlink("/dev/full", spool / "disk-full-py.spool")
    run = trainlog.init(
        project="full", run_id="disk-full-py", resume="never", system_metrics_interval=None, console="off"
    )
    for step in range(40):
        run.log({"loss": 1.0}, step=step)
    assert run.flush(30)
    server.kill9()
    for step in range(40, 540):
        run.log({"loss": 2.0}, step=step)
    report = run.finish(timeout=2)

    assert report is not None
    assert (report["acknowledged"], report["spooled"], report["rejected"], report["unsaved"]) == (40, 0, 0, 500)
    assert report["requests_unsaved"] == 1, "the finish request"
    assert any("500 points" in warning and "could not be saved" in warning for warning in report["warnings"])
    assert "could not be saved" in capfd.readouterr().err
