"""The Python package as a user installs it, each route into a fresh virtualenv: `pip install
./client-py` from a checkout, and `pip install` of the source distribution `maturin sdist`
makes. The wheel's own `trainlog server` serves, `import trainlog` logs a run to it, and the
distribution's metadata carries its name and licence.

`TRAINLOG_INSTALL_TARGET_DIR` gives both builds the repository's cargo target folder, whose
compiled crates cargo reuses, also for the sdist unpacked elsewhere; without it each route
compiles everything (many minutes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MATURIN = Path(sys.executable).with_name("maturin")


def build_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINLOG_", "VIRTUAL_ENV"))}
    if os.environ.get("TRAINLOG_INSTALL_TARGET_DIR"):
        env["CARGO_TARGET_DIR"] = os.environ["TRAINLOG_INSTALL_TARGET_DIR"]
    return env


def fresh_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path / "bin"


def installed(route: str, tmp: Path) -> Path:
    """A fresh virtualenv holding the package, installed by `route`; answers its bin folder."""
    bin_dir = fresh_venv(tmp / f"venv-{route}")
    if route == "tree":
        what = str(REPO / "client-py")
    else:
        out = tmp / "sdist"
        made = subprocess.run([str(MATURIN), "sdist", "--out", str(out)], cwd=REPO / "client-py",
                              capture_output=True, text=True, timeout=600)
        assert made.returncode == 0, made.stderr
        [sdist] = out.glob("trainlog_ml-*.tar.gz")
        what = str(sdist)
    done = subprocess.run([str(bin_dir / "pip"), "install", "--disable-pip-version-check", what], env=build_env(),
                          capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return bin_dir


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("route", ["tree", "sdist"])
def test_the_package_installs_serves_and_logs(route: str, tmp_path: Path) -> None:
    bin_dir = installed(route, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    env["TRAINLOG_DIR"] = str(tmp_path / "client-state")

    shown = subprocess.run([str(bin_dir / "pip"), "show", "trainlog-ml"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^Name: trainlog-ml$", shown.stdout, re.M), shown.stdout
    assert re.search(r"^License(-Expression)?: Apache-2\.0$", shown.stdout, re.M), shown.stdout
    metadata = subprocess.run(
        [str(bin_dir / "python"), "-c",
         "import importlib.metadata as m, json; d = m.distribution('trainlog-ml'); "
         "print(json.dumps({'files': [str(f) for f in d.files if 'LICENSE' in str(f)], "
         "'urls': d.metadata.get_all('Project-URL'), 'summary': d.metadata['Summary']}))"],
        capture_output=True, text=True, timeout=120)
    assert metadata.returncode == 0, metadata.stderr
    meta = json.loads(metadata.stdout)
    assert meta["files"] and meta["urls"] and meta["summary"], meta

    server = subprocess.Popen([str(bin_dir / "trainlog"), "server", "--port", "0", "--data", str(tmp_path / "data")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        url = ""
        for _ in range(50):
            line = server.stdout.readline()
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if found:
                url = found.group(1)
                break
            if not line:
                break
        assert url, "the wheel's server printed no ready line"
        with urllib.request.urlopen(url + "/", timeout=30) as page:
            assert b"trainlog" in page.read()
        logged = subprocess.run(
            [str(bin_dir / "python"), "-c",
             "import trainlog\n"
             "run = trainlog.init(project='installed', config={'lr': 0.1}, system_metrics_interval=None)\n"
             "for step in range(100):\n    run.log({'loss': 1.0 / (step + 1)}, step=step)\n"
             "print(run.finish()['acknowledged'], run.id)\n"],
            env={**env, "TRAINLOG_SERVER": url}, capture_output=True, text=True, timeout=300)
        assert logged.returncode == 0, logged.stderr
        acknowledged, run_id = logged.stdout.split()
        assert acknowledged == "100"
        with urllib.request.urlopen(f"{url}/api/v1/runs/{run_id}", timeout=30) as answer:
            run = json.loads(answer.read())
        assert (run["status"], run["params"], run["summary"]["loss"]["count"]) == ("finished", {"lr": 0.1}, 100)
    finally:
        server.terminate()
        server.wait(timeout=60)
