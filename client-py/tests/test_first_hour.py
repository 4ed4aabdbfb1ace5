"""What a W&B or MLflow user meets in the first hour, against the real server binary: training
never waits on a server that is down, `trainlog sync` sends everything a run left (media too),
W&B's config and summary habits, the run's URL, exit codes that mean what they say, and a
server address typed without its scheme."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import trainlog
from helpers import Server, run_script

CLI = Path(sys.executable).parent / "trainlog"

DOWN_SCRIPT = """
import json, trainlog
run = trainlog.init(project="down", name={name!r}, system_metrics_interval=None)
for step in range(1000):
    run.log({{"loss": 1.0 / (step + 1)}}, step=step)
run.log({{"sample": trainlog.Image({png!r})}}, step=999)
{ending}
"""

# A 1×1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a4d8fae70000000049454e44ae426082"
)


# A server that gives no answer used to hold `finish` and the interpreter's exit for 60 s each;
# now each returns once everything is spooled. The timeout is far under the old 120 s.
@pytest.mark.timeout(50)
def test_finish_and_exit_with_the_server_down_return_once_everything_is_spooled(
    server: Server, client_env: dict
) -> None:
    server.stop()
    explicit = run_script(
        DOWN_SCRIPT.format(name="finish", png=PNG, ending="print(json.dumps(run.finish()))"), client_env, timeout=40
    )
    assert explicit.returncode == 0, explicit.stderr
    report = json.loads(explicit.stdout.strip().splitlines()[-1])
    assert (report["acknowledged"], report["spooled"], report["unsaved"]) == (0, 1000, 0)
    assert report["media_spooled"] == 1 and report["spool_file"]
    assert "1000 points and" in explicit.stderr and "`trainlog sync` sends them" in explicit.stderr
    at_exit = run_script(DOWN_SCRIPT.format(name="exit", png=PNG, ending=""), client_env, timeout=40)
    assert at_exit.returncode == 0, at_exit.stderr
    assert "1000 points and" in at_exit.stderr

    # Everything a run left, media included, arrives with `trainlog sync` once the server is back.
    server.restart_same_port()
    out = subprocess.run([str(CLI), "sync"], env={**client_env, "PATH": ""}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "synced 2 run(s)" in out.stdout and "2 media item(s)" in out.stdout, out.stdout
    for run in trainlog.Api().runs("down"):
        assert run.status == "finished"
        assert len(run.history("loss")) == 1000
        [image] = trainlog.Api().run(run.id).media("sample")
        assert image.read() == PNG
    assert not list((Path(client_env["TRAINLOG_DIR"]) / "spool" / "media").glob("*/*.json"))


def test_config_changes_are_recorded_as_typed_params(server: Server, client_env: dict) -> None:
    import argparse
    import dataclasses

    run = trainlog.init(
        project="habits",
        name="ns",
        config=argparse.Namespace(lr=0.01, depth=50, opt="adam"),
        system_metrics_interval=None,
    )
    run.config.update({"batch": 64, "schedule": {"warmup": 100}})
    run.config["dropout"] = 0.1
    run.config.momentum = 0.9
    run.config.setdefault("seed", 7)
    trainlog.config["wd"] = 1e-4
    assert run.config.lr == 0.01 and run.config["dropout"] == 0.1
    run.finish()
    params = trainlog.Api().run(run.id).params
    assert params == {
        "lr": 0.01,
        "depth": 50,
        "opt": "adam",
        "batch": 64,
        "schedule.warmup": 100,
        "dropout": 0.1,
        "momentum": 0.9,
        "seed": 7,
        "wd": 1e-4,
    }
    # Typed: a number filters as a number.
    assert [r.id for r in trainlog.Api().runs("habits", filter="params.lr > 0.001")] == [run.id]

    @dataclasses.dataclass
    class Settings:
        lr: float = 3e-4
        layers: int = 4

    other = trainlog.init(project="habits", name="dc", config=Settings(), system_metrics_interval=None)
    other.finish()
    assert trainlog.Api().run(other.id).params == {"lr": 3e-4, "layers": 4}
    with pytest.raises(TypeError, match="config must be a mapping"):
        trainlog.init(project="habits", config=42, system_metrics_interval=None)


def test_summary_url_and_the_line_init_prints(server: Server, client_env: dict) -> None:
    run = trainlog.init(project="habits", name="summary", system_metrics_interval=None)
    for step in range(5):
        trainlog.log({"loss": 10.0 - step}, step=step)
    assert run.summary["loss"] == 6.0
    run.summary["best_accuracy"] = 0.93
    run.summary.update({"note": "kept"})
    assert run.summary["best_accuracy"] == 0.93
    assert set(run.summary) == {"loss", "best_accuracy", "note"}
    assert run.url == f"{server.url}/#/run/{run.id}"
    run.finish()
    stored = trainlog.Api().run(run.id)
    assert stored.metadata["summary"] == {"best_accuracy": 0.93, "note": "kept"}
    assert stored.summary["loss"]["last"] == 6.0, "the series is untouched"

    printed = run_script(
        "import trainlog\nrun = trainlog.init(project='habits', system_metrics_interval=None)\nprint(run.url)\n",
        client_env,
    )
    assert printed.returncode == 0, printed.stderr
    url = printed.stdout.strip()
    assert [line for line in printed.stderr.splitlines() if url in line] == [
        f"trainlog: run {url.rsplit('/', 1)[1]} at {url}"
    ]
    quiet = run_script(
        "import trainlog\ntrainlog.init(project='habits', system_metrics_interval=None)\n",
        {**client_env, "TRAINLOG_QUIET": "1"},
    )
    assert quiet.returncode == 0 and "#/run/" not in quiet.stderr


EXIT_SCRIPT = """
import sys, trainlog
run = trainlog.init(project="exits", name={name!r}, system_metrics_interval=None)
run.log({{"a": 1.0}})
{ending}
"""


def test_exit_codes_mean_what_they_say(server: Server, client_env: dict) -> None:
    endings = {
        "code3": ("sys.exit(3)", 3, "failed", "exit code 3"),
        "zero": ("sys.exit(0)", 0, "finished", None),
        "none": ("sys.exit()", 0, "finished", None),
        "message": ("sys.exit('bad config: lr')", 1, "failed", "exit: bad config: lr"),
        "within": ("with run:\n    sys.exit(0)", 0, "finished", None),
        "within_failing": ("with run:\n    sys.exit(2)", 2, "failed", "exit code 2"),
        "falls_off": ("", 0, "finished", None),
    }
    for name, (ending, code, _, _) in endings.items():
        done = run_script(EXIT_SCRIPT.format(name=name, ending=ending), client_env)
        assert done.returncode == code, (name, done.stderr)
    api = trainlog.Api()
    for r in api.runs("exits"):
        _, _, status, reason = endings[r.name]
        assert r.status == status, r.name
        [attempt] = api.run(r.id).attempts
        assert attempt["processes"][0]["reason"] == reason, r.name


def test_a_server_address_without_its_scheme_means_http(server: Server, client_env: dict) -> None:
    bare = server.url.removeprefix("http://")
    done = run_script(
        "import trainlog\nrun = trainlog.init(project='bare', system_metrics_interval=None)\n"
        "run.log({'a': 1.0})\nrun.finish()\nprint(run.id)\n",
        {**client_env, "TRAINLOG_SERVER": bare},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("has no scheme; using http://") == 1
    assert trainlog.Api().run(done.stdout.strip()).status == "finished"


def test_finish_sends_the_media_an_outage_spooled_once_the_server_is_back(server: Server, client_env: dict) -> None:
    run = trainlog.init(project="drain", system_metrics_interval=None)
    for step in range(20):
        run.log({"sample": trainlog.Image(PNG)}, step=step)
    assert run.flush(30)
    server.stop()
    for step in range(20, 300):
        run.log({"sample": trainlog.Image(PNG)}, step=step)
    assert run.flush(30)
    server.restart_same_port()
    report = run.finish()
    assert report is not None
    assert (report["media_sent"], report["media_spooled"], report["media_dropped"]) == (300, 0, 0)
    assert len(trainlog.Api().run(run.id).media("sample")) == 300
