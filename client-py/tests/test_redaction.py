"""What the SDK records by itself keeps no secrets: the command line and the uncommitted diff are
stored with their secrets masked and counted, and the diff can be left out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Dict

import pytest

from helpers import Server

SCRIPT = """\
import sys
import trainlog
run = trainlog.init(project="redaction", system_metrics_interval=None, cost=False, **{kwargs})
print(run.id)
run.finish()
"""


def run_script_file(tmp_path: Path, env: Dict[str, str], args: list, cwd: Path, init_kwargs: str = "{}") -> str:
    """Runs a script file (so its arguments reach `sys.argv`) and answers the id of its run."""
    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT.format(kwargs=init_kwargs))
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    full_env.update(env)
    out = subprocess.run([sys.executable, str(script), *args], env=full_env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def stored_run(server: Server, run_id: str) -> Dict[str, Any]:
    """The run exactly as the server's API answers it."""
    with urllib.request.urlopen(f"{server.url}/api/v1/runs/{run_id}", timeout=10) as response:
        return json.loads(response.read())


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_secret_arguments_are_masked_in_the_stored_run(server: Server, client_env: dict, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    args = [
        "--password=hunter2",
        "--api-key", "sk-123",
        "--db", "postgres://dbuser:pw-777@db.example.com/train",
        "--data-url", "https://bucket.example.com/d.tar?X-Amz-Signature=sig-888&part=1",
        "--lr", "0.1",
        "--keyframes", "3",
    ]
    run_id = run_script_file(tmp_path, client_env, args, cwd=workdir)

    run = stored_run(server, run_id)
    text = json.dumps(run)
    for secret in ["hunter2", "sk-123", "pw-777", "sig-888"]:
        assert secret not in text, f"{secret} is stored: {text}"
    expected_tail = [
        "--password=***",
        "--api-key", "***",
        "--db", "postgres://dbuser:***@db.example.com/train",
        "--data-url", "https://bucket.example.com/d.tar?X-Amz-Signature=***&part=1",
        "--lr", "0.1",
        "--keyframes", "3",
    ]
    assert run["metadata"]["environment"]["command_line"][-len(args):] == expected_tail
    assert run["metadata"]["environment"]["command_line_redactions"] == 4
    assert run["metadata"]["python"]["argv"][1:] == expected_tail
    assert run["metadata"]["python"]["argv_redactions"] == 4
    assert run["metadata"]["python"]["argv"][0].endswith("train_script.py")


@pytest.mark.parametrize("switch", ["keyword", "environment"])
def test_the_diff_can_be_left_out(server: Server, client_env: dict, tmp_path: Path, switch: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "T")
    (repo / "settings.py").write_text("token = None\n")
    git(repo, "add", "settings.py")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "settings.py").write_text("token = 'tok-in-diff-999'\n")
    (repo / "untracked-notes.txt").write_text("x\n")
    commit = git(repo, "rev-parse", "HEAD")

    captured = stored_run(server, run_script_file(tmp_path, client_env, [], cwd=repo))
    diff = captured["metadata"]["code"]["diff"]
    assert "+token = '***'" in diff and "untracked-notes.txt" in diff, "by default the diff is recorded"
    assert "tok-in-diff-999" not in diff, "with its secrets masked"
    assert captured["metadata"]["code"]["diff_redactions"] == 1

    if switch == "keyword":
        run_id = run_script_file(tmp_path, client_env, [], cwd=repo, init_kwargs="{'capture_code_diff': False}")
    else:
        env = {**client_env, "TRAINLOG_CAPTURE_CODE_DIFF": "0"}
        run_id = run_script_file(tmp_path, env, [], cwd=repo)
    run = stored_run(server, run_id)
    code = run["metadata"]["code"]
    assert code["commit"] == commit and code["branch"] == "main" and code["dirty"] is True
    assert code["diff"] is None and code["diff_truncated"] is None and code["diff_redactions"] is None
    text = json.dumps(run)
    assert "tok-in-diff-999" not in text and "untracked-notes.txt" not in text
