"""Sweeps end to end: `trainlog sweep` and `trainlog agent` (the wheel's console script) against
the real server, with real trial processes on fake GPU slots."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

import trainlog
from helpers import wait_until

TRIAL = Path(__file__).with_name("sweep_trial.py")
CLI = Path(sys.executable).with_name("trainlog")


def write_sweep(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"command: [{json.dumps(sys.executable)}, {json.dumps(str(TRIAL))}]\n" + body)
    return path


def cli(env: dict, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def sweep_env(client_env: dict, tmp_path: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()}
    env.update(client_env)
    env["TRIAL_LOG"] = str(tmp_path / "trials.jsonl")
    env["TRIAL_LOG_DIR"] = str(tmp_path)
    return env


def records(env: dict) -> List[Dict[str, Any]]:
    path = Path(env["TRIAL_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def api_get(env: dict, path: str) -> Any:
    import urllib.request

    with urllib.request.urlopen(env["TRAINLOG_SERVER"] + "/api/v1" + path, timeout=10) as r:
        return json.loads(r.read())


def test_a_grid_runs_on_two_gpu_slots_never_two_trials_on_one(sweep_env: dict, tmp_path: Path) -> None:
    path = write_sweep(tmp_path, """method: grid
metric: {name: loss, goal: minimize}
parameters:
  x: {values: [0, 1, 2]}
  y: {values: [1, 2]}
  step_seconds: {value: 0.1}
""")
    done = cli(sweep_env, "sweep", "run", str(path), "--project", "grid", "--gpus", "0,1")
    assert done.returncode == 0, done.stderr
    seen = records(sweep_env)
    assert sorted((r["config"]["x"], r["config"]["y"]) for r in seen) == [(x, y) for x in (0, 1, 2) for y in (1, 2)]
    assert all(r["config"]["note"] == "from the script" for r in seen)
    assert {r["cuda"] for r in seen} == {"0", "1"}
    # Never two trials at once on one slot.
    for slot in ("0", "1"):
        spans = sorted((r["start"], r["end"]) for r in seen if r["cuda"] == slot)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
    sweep_id = done.stderr.split("created sweep ")[1].split()[0]
    sweep = api_get(sweep_env, f"/sweeps/{sweep_id}")
    assert (sweep["state"], sweep["ended_reason"], sweep["counts"]) == ("finished", "grid_exhausted", {"finished": 6})
    assert sweep["best"]["params"] == {"x": 1, "y": 2, "step_seconds": 0.1}
    trials = api_get(sweep_env, f"/sweeps/{sweep_id}/trials")["trials"]
    assert {t["slot"] for t in trials} == {"gpu:0", "gpu:1"}
    # Each trial's run carries its params and is linked to the sweep.
    run = api_get(sweep_env, f"/runs/{trials[0]['run_id']}")
    assert run["tags"]["sweep"] == sweep_id and run["params"]["x"] == trials[0]["params"]["x"]
    status = cli(sweep_env, "sweep", "status", sweep_id)
    assert status.returncode == 0 and "grid_exhausted" in status.stdout and "best: trial" in status.stdout


def test_failures_are_reported_and_a_missing_command_fails_its_trial_not_the_agent(sweep_env: dict, tmp_path: Path) -> None:
    path = write_sweep(tmp_path, """method: grid
metric: {name: loss}
parameters:
  mode: {values: [ok, fail]}
""")
    done = cli(sweep_env, "sweep", "run", str(path), "--project", "fails", "--cpu-slots", "2")
    assert done.returncode == 0, done.stderr
    sweep_id = done.stderr.split("created sweep ")[1].split()[0]
    trials = {t["params"]["mode"]: t for t in api_get(sweep_env, f"/sweeps/{sweep_id}/trials")["trials"]}
    assert (trials["fail"]["state"], trials["fail"]["exit_code"]) == ("failed", 3)
    assert "boom: these hyperparameters cannot train" in trials["fail"]["output_tail"]
    assert api_get(sweep_env, f"/runs/{trials['fail']['run_id']}")["status"] == "failed"
    assert trials["ok"]["state"] == "finished"

    missing = tmp_path / "missing.yaml"
    missing.write_text("command: [/no/such/program, --flag]\nmethod: random\nmetric: {name: loss}\nrun_cap: 2\n"
                       "parameters: {x: {min: 0.0, max: 1.0}}\n")
    done = cli(sweep_env, "sweep", "run", str(missing), "--project", "fails", "--cpu-slots", "1")
    assert done.returncode == 0, done.stderr
    sweep_id = done.stderr.split("created sweep ")[1].split()[0]
    trials = api_get(sweep_env, f"/sweeps/{sweep_id}/trials")["trials"]
    assert [t["state"] for t in trials] == ["failed", "failed"]
    assert 'cannot start "/no/such/program"' in trials[0]["output_tail"]


def test_a_sweep_whose_first_trials_all_fail_stops_and_says_why(sweep_env: dict, tmp_path: Path) -> None:
    path = write_sweep(tmp_path, """method: random
metric: {name: loss}
run_cap: 20
parameters:
  mode: {value: fail}
  x: {min: 0.0, max: 1.0}
""")
    done = cli(sweep_env, "sweep", "run", str(path), "--project", "broken", "--cpu-slots", "1")
    assert done.returncode == 1, done.stderr
    assert "the first 3 trials all failed, so no more are started (--max-initial-failures 3)" in done.stderr
    assert "the first: trial 0 ended with exit code 3; its last lines:" in done.stderr
    assert "boom: these hyperparameters cannot train" in done.stderr.split("the first 3 trials all failed")[1]
    sweep_id = done.stderr.split("created sweep ")[1].split()[0]
    trials = api_get(sweep_env, f"/sweeps/{sweep_id}/trials")["trials"]
    assert [t["state"] for t in trials] == ["failed"] * 3, "the run_cap of 20 is not burnt"
    for index in range(3):
        assert done.stderr.count(f"trial {index} (attempt 1) on cpu:0") == 1, "each trial's line once"

    missing = tmp_path / "missing.yaml"
    missing.write_text("command: [/no/such/python, train.py]\nmethod: random\nmetric: {name: loss}\nrun_cap: 20\n"
                       "parameters: {x: {min: 0.0, max: 1.0}}\n")
    done = cli(sweep_env, "sweep", "run", str(missing), "--project", "broken", "--cpu-slots", "1",
               "--max-initial-failures", "2")
    assert done.returncode == 1, done.stderr
    assert 'the first: trial 0 could not start: cannot start "/no/such/python"' in done.stderr
    sweep_id = done.stderr.split("created sweep ")[1].split()[0]
    assert len(api_get(sweep_env, f"/sweeps/{sweep_id}/trials")["trials"]) == 2


def test_a_bad_sweep_file_is_refused_with_its_line_and_field(sweep_env: dict, tmp_path: Path) -> None:
    path = write_sweep(tmp_path, "method: random\nmetric: {name: loss}\nparameters:\n  lr: {distribution: log_uniform, min: 0, max: 1}\n")
    done = cli(sweep_env, "sweep", "create", str(path), "--project", "bad")
    assert done.returncode != 0
    assert f"{path}:5: parameters.lr.min: a log distribution needs min > 0" in done.stderr
    # The server refuses it too, with a 400 naming the field and the line.
    import urllib.error
    import urllib.request

    req = urllib.request.Request(sweep_env["TRAINLOG_SERVER"] + "/api/v1/sweeps", method="POST",
                                 data=json.dumps({"config": path.read_text(), "project": "bad"}).encode(),
                                 headers={"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    body = json.loads(e.value.read())
    assert e.value.code == 400 and body["error"]["field"] == "parameters.lr.min" and "(line 5)" in body["error"]["message"]


def test_a_pruned_trial_is_stopped(sweep_env: dict, tmp_path: Path) -> None:
    # Trials run one after another, so each later one meets the earlier ones at the rungs:
    # x far from 1 makes a trial worse than the best third at rung 3 and ASHA stops it.
    path = write_sweep(tmp_path, """method: grid
metric: {name: loss}
parameters:
  x: {values: [1, 1.1, 5]}
  steps: {value: 30}
  step_seconds: {value: 0.1}
early_terminate: {type: asha, min_steps: 3, max_steps: 27, eta: 3}
""")
    # Past rung 3 the x=5 trial holds until the sweep stops it: it can only end by being stopped.
    done = cli(dict(sweep_env, TRIAL_HOLD="5:5"), "sweep", "run", str(path), "--project", "prune", "--cpu-slots", "1")
    assert done.returncode == 0, done.stderr
    sweep_id = done.stderr.split("created sweep ")[1].split()[0]
    trials = {t["params"]["x"]: t for t in api_get(sweep_env, f"/sweeps/{sweep_id}/trials")["trials"]}
    assert trials[1]["state"] == "finished"
    assert trials[5]["state"] == "pruned", trials[5]
    assert "not among the best" in trials[5]["stop_reason"]
    pruned = api_get(sweep_env, f"/runs/{trials[5]['run_id']}")
    assert pruned["status"] == "pruned", pruned["attempts"]
    [attempt] = pruned["attempts"]
    assert attempt["ended_by"].startswith("pruned by its sweep: ") and attempt["lost_usd"] == 0, attempt
    history = api_get(sweep_env, f"/runs/{trials[5]['run_id']}/metrics?key=loss")["points"]
    assert [p["step"] for p in history] == list(range(6)), "the pruned trial logged nothing after its hold"
    # When the trial itself saw the stop (before the agent's SIGTERM), it says so.
    assert all(r["stopped"] for r in records(sweep_env) if r["config"].get("x") == 5 and "stopped" in r)


def test_a_preempted_trial_resumes_its_run(sweep_env: dict, tmp_path: Path) -> None:
    path = write_sweep(tmp_path, """method: grid
metric: {name: loss}
parameters:
  mode: {values: [preempt]}
  steps: {value: 10}
""")
    done = cli(sweep_env, "sweep", "run", str(path), "--project", "preempt", "--cpu-slots", "1")
    assert done.returncode == 0, done.stderr
    sweep_id = done.stderr.split("created sweep ")[1].split()[0]
    [trial] = api_get(sweep_env, f"/sweeps/{sweep_id}/trials")["trials"]
    assert (trial["state"], trial["attempts"]) == ("finished", 2)
    attempts = sorted(records(sweep_env), key=lambda r: r["attempt"])
    assert [r["attempt"] for r in attempts] == [1, 2]
    assert attempts[0]["run_id"] == attempts[1]["run_id"] == trial["run_id"]
    assert attempts[1]["resumed_from"] == 5
    steps = [p["step"] for p in api_get(sweep_env, f"/runs/{trial['run_id']}/metrics?key=loss")["points"]]
    assert steps == list(range(10))


def test_the_budget_stops_the_sweep(sweep_env: dict, tmp_path: Path) -> None:
    # $3600 an hour is a dollar a second: a $2 budget is spent after a few trials of ~1 s.
    sweep_env = dict(sweep_env, TRAINLOG_COST_PER_HOUR="3600")
    path = write_sweep(tmp_path, """method: random
metric: {name: loss}
run_cap: 20
budget: {usd: 2}
parameters:
  x: {min: 0.0, max: 2.0}
  steps: {value: 10}
  step_seconds: {value: 0.1}
""")
    done = cli(sweep_env, "sweep", "run", str(path), "--project", "budget", "--cpu-slots", "1")
    assert done.returncode == 0, done.stderr
    sweep_id = done.stderr.split("created sweep ")[1].split()[0]
    sweep = api_get(sweep_env, f"/sweeps/{sweep_id}")
    assert (sweep["state"], sweep["ended_reason"]) == ("finished", "budget")
    assert 1 <= sweep["trial_count"] < 20
    assert sweep["spent"]["usd"] >= 2


@pytest.mark.parametrize("method,jobs", [("random", 1), ("tpe", 6)])
def test_kubernetes_manifests_validate_offline(sweep_env: dict, tmp_path: Path, method: str, jobs: int) -> None:
    path = write_sweep(tmp_path, f"method: {method}\nmetric: {{name: loss}}\nrun_cap: 6\nparameters: {{x: {{min: 0.0, max: 1.0}}}}\n")
    created = cli(sweep_env, "sweep", "create", str(path), "--project", "k8s")
    assert created.returncode == 0, created.stderr
    sweep_id = created.stdout.strip()
    out = cli(sweep_env, "sweep", "k8s-manifest", sweep_id, "--image", "registry.example/train:1", "--gpus-per-trial", "2",
              "--max-concurrent", "3", "--pod-server", "http://trainlog.ml:7310")
    assert out.returncode == 0, out.stderr
    manifest = tmp_path / "sweep-k8s.yaml"
    manifest.write_text(out.stdout)
    validator = Path(sys.executable).with_name("kubernetes-validate")
    checked = subprocess.run([str(validator), "--strict", str(manifest)], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    docs = [json.loads(d) for d in out.stdout.split("---\n") if d.strip()]
    assert len(docs) == jobs
    spec = docs[0]["spec"]
    assert spec["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 2}
    assert spec["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"] == "DisruptionTarget"
    if jobs == 1:
        assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 6, 3)
    # The validator is not vacuous: a misspelt field is refused.
    manifest.write_text(out.stdout.replace('"restartPolicy"', '"restartPolcy"'))
    refused = subprocess.run([str(validator), "--strict", str(manifest)], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0


REPO = Path(__file__).resolve().parents[2]




# Its fixture may install Slurm's packages first (up to 900 s), then three sweeps of up to 240 s.
@pytest.mark.timeout(1800)
def test_a_sweep_through_slurm(sweep_env: dict, tmp_path: Path, slurm_conf: str) -> None:
    env = dict(sweep_env, SLURM_CONF=slurm_conf)
    submit = ("--slurm", "--gpus-per-trial", "1", "--max-concurrent", "3", "--slurm-dir", str(tmp_path / "jobs"))
    path = write_sweep(tmp_path, """method: grid
metric: {name: loss}
parameters:
  x: {values: [0, 1, 2, 3]}
  step_seconds: {value: 0.2}
""")
    done = cli(env, "sweep", "submit", str(path), "--project", "slurm", *submit)
    assert done.returncode == 0, done.stderr
    sweep_id = done.stderr.split("created sweep ")[1].split()[0]
    sweep = api_get(env, f"/sweeps/{sweep_id}")
    assert (sweep["state"], sweep["counts"]) == ("finished", {"finished": 4})
    seen = records(env)
    assert sorted(r["config"]["x"] for r in seen) == [0, 1, 2, 3]
    # Slurm gave each trial one of the two fake GPUs, and never one GPU to two trials at once.
    assert {r["cuda"] for r in seen} <= {"0", "1"} and len(seen) == 4
    for gpu in ("0", "1"):
        spans = sorted((r["start"], r["end"]) for r in seen if r["cuda"] == gpu)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
    assert all(t["slot"].startswith("slurm:") for t in api_get(env, f"/sweeps/{sweep_id}/trials")["trials"])

    # A failing trial, a preempted one (resumed as a new job with the same run) and a pruned one.
    Path(env["TRIAL_LOG"]).unlink()
    path = write_sweep(tmp_path, """method: grid
metric: {name: loss}
parameters:
  mode: {values: [fail, preempt, ok]}
  x: {values: [1]}
  steps: {value: 10}
""")
    done = cli(env, "sweep", "submit", str(path), "--project", "slurm", *submit)
    assert done.returncode == 0, done.stderr
    sweep_id = done.stderr.split("created sweep ")[1].split()[0]
    trials = {t["params"]["mode"]: t for t in api_get(env, f"/sweeps/{sweep_id}/trials")["trials"]}
    assert (trials["fail"]["state"], trials["fail"]["exit_code"]) == ("failed", 3)
    assert "boom: these hyperparameters cannot train" in trials["fail"]["output_tail"]
    assert (trials["preempt"]["state"], trials["preempt"]["attempts"]) == ("finished", 2)
    steps = [p["step"] for p in api_get(env, f"/runs/{trials['preempt']['run_id']}/metrics?key=loss")["points"]]
    assert steps == list(range(10))

    path = write_sweep(tmp_path, """method: grid
metric: {name: loss}
parameters:
  x: {values: [1, 5]}
  steps: {value: 40}
  step_seconds: {value: 0.1}
early_terminate: {type: asha, min_steps: 3, max_steps: 27, eta: 3}
""")
    # Past rung 3 the x=5 trial holds until the sweep stops it: it can only end by being stopped.
    done = cli(dict(env, TRIAL_HOLD="5:5"), "sweep", "submit", str(path), "--project", "slurm", *submit[:-4],
               "--max-concurrent", "1", "--slurm-dir", str(tmp_path / "jobs"))
    assert done.returncode == 0, done.stderr
    sweep_id = done.stderr.split("created sweep ")[1].split()[0]
    trials = {t["params"]["x"]: t for t in api_get(env, f"/sweeps/{sweep_id}/trials")["trials"]}
    assert (trials[1]["state"], trials[5]["state"]) == ("finished", "pruned")
    steps = [p["step"] for p in api_get(env, f"/runs/{trials[5]['run_id']}/metrics?key=loss")["points"]]
    assert steps == list(range(6)), "the pruned trial logged nothing after its hold"


def test_a_sweep_survives_its_agent_dying_and_the_server_restarting(client_env: dict, tmp_path: Path) -> None:
    from helpers import Server

    server = Server(tmp_path / "data")
    server.start(extra_args=("--trial-timeout", "2"))
    try:
        env = {k: v for k, v in os.environ.items()}
        env.update(client_env, TRAINLOG_SERVER=server.url, TRIAL_LOG=str(tmp_path / "trials.jsonl"), TRIAL_LOG_DIR=str(tmp_path))
        path = write_sweep(tmp_path, """method: grid
metric: {name: loss}
parameters:
  x: {values: [0, 1, 2]}
  steps: {value: 30}
  step_seconds: {value: 0.1}
""")
        created = cli(env, "sweep", "create", str(path), "--project", "survive")
        assert created.returncode == 0, created.stderr
        sweep_id = created.stdout.strip()
        # Under the first agent, trial 0 holds after step 4 until stopped: it cannot finish before the agent dies.
        first = subprocess.Popen([str(CLI), "agent", sweep_id, "--cpu-slots", "1"], env=dict(env, TRIAL_HOLD="0:4"),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def first_trial_logged_five_steps() -> bool:
            trials = api_get(env, f"/sweeps/{sweep_id}/trials")["trials"]
            return bool(trials) and api_get(env, f"/runs/{trials[0]['run_id']}")["summary"].get("loss", {}).get("count", 0) >= 5

        wait_until("the first trial logs five steps", first_trial_logged_five_steps)
        assert first.poll() is None, "the first agent still runs its trial"
        first.kill()  # the agent dies; its trial gets SIGTERM and the server hears nothing more
        first.wait(timeout=10)
        server.restart_same_port()  # and the server is killed and restarted meanwhile
        second = cli(env, "agent", sweep_id, "--cpu-slots", "1")
        assert second.returncode == 0, second.stderr
        sweep = api_get(env, f"/sweeps/{sweep_id}")
        assert (sweep["state"], sweep["counts"]) == ("finished", {"finished": 3})
        trials = api_get(env, f"/sweeps/{sweep_id}/trials")["trials"]
        assert trials[0]["attempts"] == 2, trials[0]
        steps = [p["step"] for p in api_get(env, f"/runs/{trials[0]['run_id']}/metrics?key=loss")["points"]]
        assert steps == list(range(30)), "the retried trial logged every step once"
    finally:
        server.stop()


def test_two_agents_share_a_sweep_and_gpu_hours_bound_it(sweep_env: dict, tmp_path: Path) -> None:
    path = write_sweep(tmp_path, """method: grid
metric: {name: loss}
parameters:
  x: {values: [0, 1, 2, 3, 4, 5]}
  step_seconds: {value: 0.05}
""")
    created = cli(sweep_env, "sweep", "create", str(path), "--project", "shared")
    sweep_id = created.stdout.strip()
    agents = [subprocess.Popen([str(CLI), "agent", sweep_id, "--gpus", gpu], env=sweep_env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) for gpu in ("0", "1")]
    assert [a.wait(timeout=240) for a in agents] == [0, 0]
    trials = api_get(sweep_env, f"/sweeps/{sweep_id}/trials")["trials"]
    assert sorted(t["params"]["x"] for t in trials) == [0, 1, 2, 3, 4, 5], "each grid point once across both agents"
    assert len({t["agent"] for t in trials}) == 2 and all(t["state"] == "finished" for t in trials)

    # 0.0005 GPU-hours is 1.8 GPU-seconds: a couple of 1 s trials on one GPU spend it.
    path = write_sweep(tmp_path, """method: random
metric: {name: loss}
run_cap: 20
budget: {gpu_hours: 0.0005}
parameters:
  x: {min: 0.0, max: 2.0}
  step_seconds: {value: 0.1}
""")
    done = cli(sweep_env, "sweep", "run", str(path), "--project", "shared", "--gpus", "0")
    assert done.returncode == 0, done.stderr
    sweep = api_get(sweep_env, f"/sweeps/{done.stderr.split('created sweep ')[1].split()[0]}")
    assert (sweep["state"], sweep["ended_reason"]) == ("finished", "budget")
    assert 1 <= sweep["trial_count"] < 20 and sweep["spent"]["gpu_hours"] >= 0.0005


def test_stop_and_resume(sweep_env: dict, tmp_path: Path) -> None:
    path = write_sweep(tmp_path, """method: grid
metric: {name: loss}
parameters:
  x: {values: [0, 1, 2, 3]}
  steps: {value: 200}
  step_seconds: {value: 0.02}
""")
    sweep_id = cli(sweep_env, "sweep", "create", str(path), "--project", "stop").stdout.strip()
    # Under this agent, trial 0 holds after step 5 until stopped: it cannot finish before the stop.
    agent = subprocess.Popen([str(CLI), "agent", sweep_id, "--cpu-slots", "1"], env=dict(sweep_env, TRIAL_HOLD="0:5"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def first_trial_holds() -> bool:
        trials = api_get(sweep_env, f"/sweeps/{sweep_id}/trials")["trials"]
        return bool(trials) and api_get(sweep_env, f"/runs/{trials[0]['run_id']}")["summary"].get("loss", {}).get("count", 0) >= 6

    wait_until("the first trial logs six steps", first_trial_holds)
    stopped = cli(sweep_env, "sweep", "stop", sweep_id)
    assert stopped.returncode == 0 and "is stopped" in stopped.stdout
    assert agent.wait(timeout=60) == 0, "the agent stops its trial and exits"
    [first] = api_get(sweep_env, f"/sweeps/{sweep_id}/trials")["trials"]
    assert (first["state"], first["stop_reason"]) == ("pruned", "the sweep was stopped")
    assert api_get(sweep_env, f"/sweeps/{sweep_id}")["state"] == "stopped"
    # The trial's run ends as its sweep stopped it early.
    assert api_get(sweep_env, f"/runs/{first['run_id']}")["status"] == "pruned"
    # Resumed, the sweep goes on with the next grid points.
    assert "is running" in cli(sweep_env, "sweep", "resume", sweep_id).stdout
    done = cli(sweep_env, "agent", sweep_id, "--cpu-slots", "2")
    assert done.returncode == 0, done.stderr
    sweep = api_get(sweep_env, f"/sweeps/{sweep_id}")
    assert (sweep["state"], sweep["counts"]) == ("finished", {"pruned": 1, "finished": 3})
