"""Console capture: what a training process prints (Python, a C extension, a child process,
progress bars, ANSI colours) reaches the run's logs once each, in order, with the step it was
printed at, while the terminal shows exactly what it would without trainlog; lines survive a
server outage and a `kill -9` of the server, none lost and none doubled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from helpers import BINARY, Server, wait_for

PRINTS = textwrap.dedent(
    """
    import ctypes, logging, os, subprocess, sys, time
    import trainlog

    def pause():
        # The capture reads lines on its own thread: a line is tagged with the step logged when
        # it was read, so each print here is given time to be read before the next step.
        time.sleep(0.3)

    run = trainlog.init(project="console", name="prints", system_metrics_interval=None,
                        capture_code=False, console=os.environ.get("CONSOLE", "all"))
    print("python line before any step")
    pause()
    run.log({"loss": 1.0}, step=1)
    ctypes.CDLL(None).printf(b"from C printf %d\\n", 42)
    pause()
    run.log({"loss": 0.5}, step=2)
    subprocess.run(["sh", "-c", "echo from a subprocess; echo subprocess to stderr >&2"], check=True)
    pause()
    sys.stdout.write("progress  10%\\rprogress  50%\\rprogress 100%\\n")
    print("\\x1b[32mgreen ok\\x1b[0m")
    logging.warning("a warning through logging")
    pause()
    run.log({"loss": 0.25}, step=3)
    print("last line")
    report = run.finish()
    print("REPORT", report["console_lines"], report["console_lines_acknowledged"], file=sys.stderr)
    """
)


def run_on_a_terminal(env: Dict[str, str], console: str) -> Tuple[bytes, str]:
    """Runs PRINTS with its stdout on a pseudo-terminal (as in a shell) and its stderr on a
    pipe; answers what the terminal showed and what stderr received."""
    import pty

    master, slave = pty.openpty()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    full_env.update(env, CONSOLE=console)
    proc = subprocess.Popen([sys.executable, "-c", PRINTS], stdout=slave, stderr=subprocess.PIPE, env=full_env)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child and everything it started closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    return shown, err.decode()


def logs(server: Server, run_id: str, **query: Any) -> Dict[str, Any]:
    q = "&".join(f"{k}={urllib.parse.quote(str(v))}" for k, v in query.items())
    with urllib.request.urlopen(f"{server.url}/api/v1/runs/{run_id}/logs?{q}", timeout=30) as answer:
        return json.loads(answer.read())


def only_run(server: Server, project: str) -> str:
    with urllib.request.urlopen(f"{server.url}/api/v1/projects/{project}/runs", timeout=30) as answer:
        runs = json.loads(answer.read())["runs"]
    assert len(runs) == 1, runs
    return str(runs[0]["id"])


import urllib.parse  # noqa: E402


@pytest.mark.timeout(180)
def test_every_printed_line_arrives_once_in_order_with_its_step_and_the_terminal_is_unchanged(
    server: Server, tmp_path: Path
) -> None:
    env = {"TRAINLOG_SERVER": server.url, "TRAINLOG_DIR": str(tmp_path / "client")}
    shown, err = run_on_a_terminal(env, "all")
    run_id = only_run(server, "console")
    page = logs(server, run_id)
    lines = page["lines"]
    stdout = [(line["text"], line["step"]) for line in lines if line["stream"] == "stdout"]
    assert stdout == [
        ("python line before any step", None),
        ("from C printf 42", 1),
        ("from a subprocess", 2),
        ("progress 100%", 2),
        ("\x1b[32mgreen ok\x1b[0m", 2),
        ("last line", 3),
    ]
    stderr = [line["text"] for line in lines if line["stream"] == "stderr"]
    assert "subprocess to stderr" in stderr
    assert "WARNING:root:a warning through logging" in stderr
    assert [line["n"] for line in lines] == list(range(len(lines)))
    assert all(line["rank"] == 0 and line["attempt"] >= 0 and line["node"] for line in lines)
    # Each line once: the process's report counts what it captured and the server took.
    reported = next(line for line in err.splitlines() if line.startswith("REPORT"))
    _, captured, acknowledged = reported.split()
    assert int(captured) == int(acknowledged) == page["total"]
    # stderr lines the capture saw reached the pipe too, in the same order.
    err_lines = err.splitlines()
    positions = [err_lines.index(text) for text in stderr]
    assert positions == sorted(positions), (stderr, err_lines)

    # The command line: the last lines, a search, and the prefix of time, rank and step.
    cli = [str(BINARY), "logs", run_id, "--server", server.url]
    tail = subprocess.run([*cli, "--stream", "stdout", "--tail", "2"], capture_output=True, text=True, timeout=60)
    assert tail.stdout.splitlines() == ["\x1b[32mgreen ok\x1b[0m", "last line"], tail.stderr
    grep = subprocess.run([*cli, "--grep", "(?i)^FROM", "--prefix"], capture_output=True, text=True, timeout=60)
    found = grep.stdout.splitlines()
    assert [line.split("| ", 1)[1] for line in found] == ["from C printf 42", "from a subprocess"], grep.stdout
    assert " rank 0 step 1 stdout" in found[0]

    # The same program with capture off shows the terminal the same bytes.
    plain, _ = run_on_a_terminal(env, "off")
    assert shown == plain
    assert b"progress  10%\rprogress  50%\rprogress 100%" in shown


LOOP = textwrap.dedent(
    """
    import json, sys, time
    import trainlog

    run = trainlog.init(project="outage", system_metrics_interval=None, capture_code=False)
    for i in range(int(sys.argv[1])):
        print(f"line {i}", flush=True)
        run.log({"x": float(i)}, step=i)
        time.sleep(0.005)
    report = run.finish(timeout=120)
    print("REPORT", json.dumps(report), file=sys.stderr)
    """
)


@pytest.mark.timeout(240)
def test_lines_survive_an_outage_and_a_kill_9_of_the_server_none_lost_none_doubled(
    server: Server, tmp_path: Path
) -> None:
    count = 1500
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    full_env.update(TRAINLOG_SERVER=server.url, TRAINLOG_DIR=str(tmp_path / "client"))
    proc = subprocess.Popen(
        [sys.executable, "-c", LOOP, str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full_env,
        text=True,
    )

    def acknowledged() -> str:
        try:
            with urllib.request.urlopen(f"{server.url}/api/v1/projects/outage/runs", timeout=30) as answer:
                runs = json.loads(answer.read()).get("runs", [])
        except urllib.error.HTTPError:  # the project is not made yet
            return ""
        return str(runs[0]["id"]) if runs and logs(server, runs[0]["id"], limit=1)["total"] > 50 else ""

    # Some lines are acknowledged (in the server's log, not yet in a file), then the server dies.
    run_id = wait_for("lines acknowledged", acknowledged)
    server.kill9()
    time.sleep(2)
    server.restart_same_port()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    # The terminal got every line once.
    assert [line for line in out.splitlines() if line.startswith("line ")] == [f"line {i}" for i in range(count)]
    report = json.loads(next(line for line in err.splitlines() if line.startswith("REPORT"))[len("REPORT ") :])
    assert report["console_lines"] >= count + 1
    assert report["console_lines_acknowledged"] == report["console_lines"], report

    texts: List[str] = [line["text"] for line in Api_logs(server, run_id) if line["text"].startswith("line ")]
    assert texts == [f"line {i}" for i in range(count)]
    # A line read before the first `log` has no step yet.
    steps = [
        -1 if line["step"] is None else line["step"]
        for line in Api_logs(server, run_id)
        if line["text"].startswith("line ")
    ]
    assert steps == sorted(steps)


def Api_logs(server: Server, run_id: str) -> List[Dict[str, Any]]:  # noqa: N802
    """Every line of a run, through the Python package's reader."""
    import trainlog

    return list(trainlog.Api(server=server.url).run(run_id).logs())


EXITS = textwrap.dedent(
    """
    import sys, time
    import trainlog

    run = trainlog.init(project="exits", system_metrics_interval=None, capture_code=False,
                        job={"job_id": "exit-job", "rank": 0, "world_size": 1})
    for i in range(30):
        print(f"loading shard {i}", flush=True)
    # stdout and stderr are two pipes, read side by side: the pause keeps their order certain.
    time.sleep(0.3)
    print("NCCL error: unhandled system error", file=sys.stderr)
    sys.exit(3)
    """
)


@pytest.mark.timeout(120)
def test_a_rank_that_exits_without_a_traceback_shows_its_last_console_lines_in_its_attempt(
    server: Server, tmp_path: Path
) -> None:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    full_env.update(TRAINLOG_SERVER=server.url, TRAINLOG_DIR=str(tmp_path / "client"))
    done = subprocess.run([sys.executable, "-c", EXITS], env=full_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    run_id = only_run(server, "exits")
    with urllib.request.urlopen(f"{server.url}/api/v1/runs/{run_id}", timeout=30) as answer:
        run = json.loads(answer.read())
    [attempt] = run["attempts"]
    assert attempt["status"] == "failed", attempt
    shown = attempt["last_lines"].splitlines()
    assert len(shown) == 20
    assert shown[-1] == "NCCL error: unhandled system error"
    assert shown[-2] == "loading shard 29"


REPOINTED = textwrap.dedent(
    """
    import os, sys
    import trainlog

    run = trainlog.init(project="repointed", system_metrics_interval=None, capture_code=False)
    print("captured", flush=True)
    # Something else takes stdout while the run captures it, as a test runner does.
    taken = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(taken, 1)
    run.finish()
    print("after the run", flush=True)
    """
)


@pytest.mark.timeout(120)
def test_a_stdout_pointed_elsewhere_during_the_run_stays_where_it_was_pointed(server: Server, tmp_path: Path) -> None:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLOG_")}
    full_env.update(TRAINLOG_SERVER=server.url, TRAINLOG_DIR=str(tmp_path / "client"))
    taken = tmp_path / "taken.txt"
    done = subprocess.run(
        [sys.executable, "-c", REPOINTED, str(taken)], env=full_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "captured\n"
    assert taken.read_text() == "after the run\n", "finishing the run did not point stdout back over it"
    texts = [line["text"] for line in logs(server, only_run(server, "repointed"))["lines"]]
    assert "captured" in texts and "after the run" not in texts
