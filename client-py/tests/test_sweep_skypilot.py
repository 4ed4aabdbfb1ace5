"""`trainlog sweep skypilot`: the task file it prints for a sweep on the real server, read by
SkyPilot's own parser (no cloud account, no network, a fresh HOME)."""

from __future__ import annotations

import json
import os
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Dict

import pytest
from helpers import BINARY

# tests/python/mlflow-server-requirements.txt installs SkyPilot in .venv-mlflow: its click pin
# clashes with transformers' in .venv.
SKY_PYTHON = os.environ.get("TRAINLOG_SKY_PYTHON") or str(Path(__file__).resolve().parents[2] / ".venv-mlflow" / "bin" / "python")

# Reads a task file the way `sky jobs launch FILE [--secret TRAINLOG_API_KEY=…]` does, with every
# socket refused, and prints what SkyPilot made of it.
PARSE = r"""
import json, socket, sys

def refuse(*args, **kwargs):
    raise RuntimeError(f"SkyPilot tried to reach the network: {args!r}")

socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse

import sky
from sky.utils import dag_utils

def plain(secrets):
    return {k: getattr(v, "get_secret_value", lambda: v)() for k, v in secrets.items()}

path = sys.argv[1]
task = sky.Task.from_yaml(path)
[res] = list(task.resources)
dag = dag_utils.load_chain_dag_from_yaml(path, secret_overrides=[("TRAINLOG_API_KEY", "tl_given_at_launch")])
print(json.dumps({
    "name": task.name,
    "num_nodes": task.num_nodes,
    "accelerators": res.accelerators,
    "use_spot": res.use_spot,
    "cloud": str(res.cloud) if res.cloud else None,
    "region": res.region,
    "run": task.run,
    "setup": task.setup,
    "workdir": task.workdir,
    "file_mounts": task.file_mounts,
    "envs": dict(task.envs),
    "secrets": plain(task.secrets),
    "secret_refs": [r.name for r in task.managed_secret_refs],
    "dag_tasks": len(dag.tasks),
    "launch_secrets": plain(dag.tasks[0].secrets),
}))
"""


def cli(env: Dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BINARY), *args], env=env, capture_output=True, text=True, timeout=60)


def run_parser(path: Path, home: Path) -> subprocess.CompletedProcess:
    """PARSE on `path` in a fresh interpreter whose HOME (SkyPilot's state, ~/.sky) is `home`."""
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", ""), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    return subprocess.run([SKY_PYTHON, "-c", PARSE, str(path)], env=env, capture_output=True, text=True, timeout=180)


def parse_with_skypilot(path: Path, home: Path) -> dict:
    out = run_parser(path, home)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def sweep_id(client_env: dict, tmp_path: Path) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text('command: ["python", "train.py"]\nmethod: tpe\nmetric: {name: loss}\nrun_cap: 8\nmax_retries: 10\n'
                    "parameters: {lr: {distribution: log_uniform, min: 1.0e-5, max: 1.0e-1}}\n")
    created = cli(dict(os.environ), "sweep", "create", str(path), "--project", "sky")
    assert created.returncode == 0, created.stderr
    return created.stdout.strip()


@pytest.mark.timeout(600)
def test_skypilot_task_is_read_by_skypilot(client_env: dict, sweep_id: str, tmp_path: Path) -> None:
    env = dict(os.environ, TRAINLOG_API_KEY="tl_secret_value_never_in_the_file")
    task_file = tmp_path / "sweep-sky.yaml"
    wheel = tmp_path / "trainlog-0.1.0-cp39-abi3-manylinux_2_34_x86_64.whl"
    wheel.write_bytes(b"PK")
    # Nothing names a package to install: the nodes install this release of the project's own
    # distribution (`trainlog` on PyPI is another project).
    plain_file = tmp_path / "plain.yaml"
    plain = cli(env, "sweep", "skypilot", sweep_id, "--gpus", "A100:1", "--output", str(plain_file))
    assert plain.returncode == 0, plain.stderr
    assert parse_with_skypilot(plain_file, tmp_path / "home")["setup"] == "pip install trainlog-ml==" + version("trainlog-ml")
    made = cli(env, "sweep", "skypilot", sweep_id, "--gpus", "A100:2", "--gpus-per-trial", "1", "--spot",
               "--cloud", "aws", "--region", "us-east-1", "--workers", "3",
               "--job-server", "https://trainlog.example:7310", "--workdir", ".", "--output", str(task_file),
               "--wheel", str(wheel))
    assert made.returncode == 0, made.stderr
    name = f"trainlog-sweep-{sweep_id.lower()}"
    assert f"sky jobs launch --num-jobs 3 -n {name} {task_file} --secret TRAINLOG_API_KEY" in made.stdout
    assert "max_retries (10)" in made.stderr
    text = task_file.read_text()
    assert "tl_secret_value_never_in_the_file" not in text

    task = parse_with_skypilot(task_file, tmp_path / "home")
    assert task["name"] == name
    assert task["num_nodes"] == 1 and task["dag_tasks"] == 1
    assert task["accelerators"] == {"A100": 2}
    assert task["use_spot"] is True
    assert (task["cloud"], task["region"]) == ("AWS", "us-east-1")
    assert task["run"] == ('trainlog agent "$TRAINLOG_SWEEP_ID" --gpus all --gpus-per-trial 1 '
                           '--name "$(hostname):$SKYPILOT_TASK_ID"')
    remote = "~/.trainlog-wheels/" + wheel.name
    assert (task["setup"], task["workdir"]) == (f"pip install {remote}", ".")
    assert task["file_mounts"] == {remote: str(wheel)}
    assert task["envs"] == {"TRAINLOG_SERVER": "https://trainlog.example:7310", "TRAINLOG_SWEEP_ID": sweep_id}
    # The key is only named: no value in the file, one given at launch with --secret.
    assert (task["secrets"], task["secret_refs"]) == ({}, ["TRAINLOG_API_KEY"])
    assert task["launch_secrets"] == {"TRAINLOG_API_KEY": "tl_given_at_launch"}

    # Printed to stdout without GPUs, for a server with no keys, from an image: CPU slots, no
    # secret, no setup.
    plain = cli(env, "sweep", "skypilot", sweep_id, "--no-api-key", "--image", "registry.example/train:1")
    assert plain.returncode == 0, plain.stderr
    plain_file = tmp_path / "plain.yaml"
    plain_file.write_text(plain.stdout)
    task = parse_with_skypilot(plain_file, tmp_path / "home")
    assert (task["accelerators"], task["use_spot"], task["cloud"], task["setup"]) == (None, False, None, None)
    assert task["run"].startswith('trainlog agent "$TRAINLOG_SWEEP_ID" --cpu-slots 1 ')
    assert (task["secrets"], task["secret_refs"]) == ({}, [])
    assert task["envs"]["TRAINLOG_SERVER"] == client_env["TRAINLOG_SERVER"]
    assert "on their own machine; give --job-server" in plain.stderr

    # The parser is not vacuous: a misspelt field is refused.
    task_file.write_text(text.replace('"use_spot"', '"use_spto"'))
    refused = run_parser(task_file, tmp_path / "home")
    assert refused.returncode != 0 and "use_spto" in refused.stderr


def test_bad_skypilot_options_are_refused(client_env: dict, sweep_id: str) -> None:
    env = dict(os.environ)
    bad = cli(env, "sweep", "skypilot", sweep_id, "--gpus", "A100:x")
    assert bad.returncode == 2
    assert "invalid value 'A100:x' for '--gpus <GPUS>'" in bad.stderr
    assert 'the count "x" is not a number from 1 to 1024' in bad.stderr
    too_many = cli(env, "sweep", "skypilot", sweep_id, "--gpus", "A100:2", "--gpus-per-trial", "4")
    assert too_many.returncode == 1 and "--gpus-per-trial 4: a node of A100:2 has 2 device(s)" in too_many.stderr
    unknown = cli(env, "sweep", "skypilot", "nosuchsweep", "--gpus", "A100:1")
    assert unknown.returncode == 1 and unknown.stdout == ""
