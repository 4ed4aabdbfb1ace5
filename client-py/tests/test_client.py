"""The Python package against the real server binary: lifecycle, resume, outages, offline
mode and sync, preemption, process hooks, environment and git capture, cost."""

from __future__ import annotations

import json
import math
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import trainlog
from helpers import BINARY, Server, postgres_meta_url, run_script, spawn_script, wait_for_line, wait_until


def test_a_whole_run_lifecycle(server: Server, client_env: dict) -> None:
    run = trainlog.init(project="resnet", name="lr-3e-4", config={"lr": 3e-4, "model": {"depth": 50}},
                        tags=["baseline"], system_metrics_interval=None)
    assert trainlog.run is run and trainlog.config.lr == 3e-4 and trainlog.config["model"] == {"depth": 50}
    for step in range(500):
        run.log({"train/loss": 1.0 / (step + 1), "lr": 3e-4}, step=step)
    run.log({"train/loss": float("nan")}, step=500)
    trainlog.log({"val": {"acc": 0.75}})  # step 501, nested key val.acc
    run.finish()
    assert trainlog.run is None

    api = trainlog.Api()
    r = api.run(run.id)
    assert (r.status, r.name, r.params, r.tags) == ("finished", "lr-3e-4", {"lr": 3e-4, "model.depth": 50}, {"baseline": ""})
    history = r.history("train/loss")
    assert len(history) == 501 and history[3] == {"step": 3, "timestamp": history[3]["timestamp"], "value": 0.25}
    assert math.isnan(history[500]["value"])
    assert r.history("val.acc") == [{"step": 501, "timestamp": r.history("val.acc")[0]["timestamp"], "value": 0.75}]
    assert r.summary["lr"]["count"] == 500
    assert [x.id for x in api.runs("resnet", filter="metrics.lr > 0.0001 and status = 'finished'")] == [run.id]
    assert api.runs("resnet", filter="metrics.lr > 1") == []
    assert r.metadata["python"]["version"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert "pytest" in {name.lower() for name in r.metadata["packages"]}


def test_api_runs_answers_attributes_first_and_reads_params_and_summaries_for_the_list_at_first_access(
    server: Server, client_env: dict
) -> None:
    ids = []
    for i in range(3):
        with trainlog.init(project="lean", name=f"r{i}", config={"lr": 0.1 * (i + 1)}, tags=[f"t{i}"], system_metrics_interval=None) as run:
            run.log({"loss": 1.0 / (i + 1)}, step=0)
        ids.append(run.id)
    running = trainlog.init(project="lean", name="running", config={"lr": 9}, system_metrics_interval=None)
    running.log({"loss": 5.0}, step=0)
    running.flush()
    api = trainlog.Api()
    # The search itself answers no params, tags or summaries: they are not read for a caller
    # that does not look at them.
    lean = [json.loads(page)["runs"] for page in api._native.runs_pages("lean", "", None, "")][0]
    assert {(r["name"], r["status"]) for r in lean} == {("r0", "finished"), ("r1", "finished"), ("r2", "finished"), ("running", "running")}
    assert all(r["params"] == {} and r["summary"] == {} and r["tags"] == {} for r in lean)
    runs = {r.name: r for r in api.runs("lean", order_by="name")}
    assert all(r._data["params"] == {} for r in runs.values()), "nothing read before it is asked for"
    assert [r.params["lr"] for r in (runs["r0"], runs["r1"], runs["r2"])] == pytest.approx([0.1, 0.2, 0.3])
    assert runs["r1"].summary["loss"]["last"] == 0.5 and runs["r2"].tags == {"t2": ""}
    # A run that no longer matches its search when its details are read is read alone.
    only_running = api.runs("lean", filter="status = 'running'")
    running.finish()
    assert [r.name for r in only_running] == ["running"]
    assert only_running[0].params == {"lr": 9} and only_running[0].summary["loss"]["last"] == 5.0


def test_config_values_of_none_are_kept_as_text(server: Server, client_env: dict) -> None:
    with trainlog.init(project="p", config={"scheduler": None, "opt": {"betas": (0.9, 0.99)}}, system_metrics_interval=None) as run:
        pass
    assert trainlog.Api().run(run.id).params == {"scheduler": "None", "opt.betas": "[0.9,0.99]"}


class _GradTensor:
    """Stands in for a 0-d tensor that tracks gradients: reading a number from it without
    detaching it first is what makes PyTorch warn."""

    def __init__(self, value: float, requires_grad: bool = True) -> None:
        self.value, self.requires_grad = value, requires_grad

    def detach(self) -> "_GradTensor":
        return _GradTensor(self.value, requires_grad=False)

    def __float__(self) -> float:
        if self.requires_grad:
            raise AssertionError("read without detach()")
        return self.value


def test_a_tensor_that_tracks_gradients_is_detached_before_it_is_read(server: Server, client_env: dict) -> None:
    with trainlog.init(project="p", system_metrics_interval=None) as run:
        run.log({"loss": _GradTensor(0.5), "plain": _GradTensor(2.0, requires_grad=False)}, step=0)
    summary = trainlog.Api().run(run.id).summary
    assert (summary["loss"]["last"], summary["plain"]["last"]) == (0.5, 2.0)


def test_history_arrow_gives_a_pyarrow_table(server: Server, client_env: dict) -> None:
    pa = pytest.importorskip("pyarrow")
    with trainlog.init(project="p", system_metrics_interval=None) as run:
        for step in range(10):
            run.log({"a": step, "b": -step}, step=step)
    table = trainlog.Api().run(run.id).history_arrow(["a", "b"])
    assert isinstance(table, pa.Table)
    assert table.num_rows == 20
    assert table.column("value").to_pylist()[10:12] == [0.0, -1.0]


def test_context_manager_marks_failures(server: Server, client_env: dict) -> None:
    with pytest.raises(RuntimeError):
        with trainlog.init(project="p", system_metrics_interval=None) as run:
            run.log({"loss": 1.0})
            raise RuntimeError("diverged")
    assert trainlog.Api().run(run.id).status == "failed"


def test_resume_replays_steps_and_accepts_same_params(server: Server, client_env: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINLOG_RUN_ID", "slurm-job-123")
    first = trainlog.init(project="p", config={"lr": 0.1}, system_metrics_interval=None)
    assert first.id == "slurm-job-123"
    for step in range(100):
        first.log({"loss": float(step)}, step=step)
    first.finish("preempted")
    assert trainlog.Api().run("slurm-job-123").status == "preempted"

    again = trainlog.init(project="p", config={"lr": 0.1}, system_metrics_interval=None)  # resume="allow" by default
    assert trainlog.Api().run("slurm-job-123").status == "running"
    for step in range(80, 150):
        again.log({"loss": -float(step)}, step=step)
    again.finish()
    values = [p["value"] for p in trainlog.Api().run("slurm-job-123").history("loss")]
    assert len(values) == 150 and values[79] == 79.0 and values[80] == -80.0

    third = trainlog.init(project="p", config={"lr": 0.1}, system_metrics_interval=None)
    third.log({"loss": 0.5})  # no step: continues after the last one logged
    third.finish()
    assert trainlog.Api().run("slurm-job-123").history("loss")[-1]["step"] == 150

    with pytest.raises(trainlog.ConflictError):
        trainlog.init(project="p", config={"lr": 0.2}, system_metrics_interval=None)
    with pytest.raises(trainlog.NotFoundError):
        trainlog.init(project="p", run_id="never-seen", resume="must", system_metrics_interval=None)
    assert issubclass(trainlog.ConflictError, trainlog.ServerError) and issubclass(trainlog.ServerError, trainlog.TrainlogError)


def test_a_server_crash_mid_run_loses_and_duplicates_nothing(server: Server, client_env: dict) -> None:
    run = trainlog.init(project="crash", system_metrics_interval=None, cost=False)
    for step in range(3000):
        run.log({"loss": float(step)}, step=step)
    assert run.flush(30)
    assert run.pending_points == 0
    server.kill9()
    # In the server's place, one that hangs: the sender's next request is never answered.
    with hung_server(server.port) as listener:
        run.log({"loss": 3000.0}, step=3000)
        request = next_request(listener)
        for step in range(3001, 6000):
            run.log({"loss": float(step)}, step=step)  # never raises, never blocks
        assert still_waiting(request), (
            "the sender's request was still unanswered when the logging above returned, so logging never waited on it"
        )
        assert run.pending_points in (2999, 3000), "the points logged during the hang are queued"
        request.close()
    # The hung server goes away too: everything logged meanwhile moves to the spool.
    wait_until("the run spools what it logged while the server was away",
               lambda: run.is_spooling and run.pending_points == 0)
    server.restart_same_port()
    for step in range(6000, 7000):
        run.log({"loss": float(step)}, step=step)
    run.finish()
    history = trainlog.Api().run(run.id).history("loss")
    assert [p["step"] for p in history] == list(range(7000))
    assert all(p["value"] == p["step"] for p in history)


class hung_server:
    """A server that hangs: it takes connections on 127.0.0.1:`port` and never answers."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen()

    def __enter__(self) -> socket.socket:
        return self.sock

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def next_request(listener: socket.socket, timeout: float = 60) -> socket.socket:
    """Waits for a connection and the head of a request on it; the request stays unanswered."""
    listener.settimeout(timeout)
    try:
        conn, _ = listener.accept()
    except socket.timeout:
        raise AssertionError(f"no request reached the hung server in {timeout} s") from None
    conn.settimeout(timeout)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        assert chunk, f"the connection closed before a request: {head!r}"
        head += chunk
    return conn


def still_waiting(conn: socket.socket) -> bool:
    """Whether the client still waits on the connection: neither closed nor reset (body bytes
    still arriving are read and dropped)."""
    conn.setblocking(False)
    while True:
        try:
            if not conn.recv(1 << 16):
                return False
        except BlockingIOError:
            return True
        except OSError:
            return False


def test_offline_mode_then_trainlog_sync(server: Server, client_env: dict, tmp_path: Path) -> None:
    run = trainlog.init(project="offline", mode="offline", config={"lr": 0.5}, system_metrics_interval=None)
    for step in range(2000):
        run.log({"loss": step * 0.5}, step=step)
    run.finish()
    with pytest.raises(trainlog.NotFoundError):
        trainlog.Api().run(run.id)
    cli = Path(sys.executable).parent / "trainlog"
    out = subprocess.run([str(cli), "sync"], env={**client_env, "PATH": ""}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "synced 1 run(s)" in out.stdout
    r = trainlog.Api().run(run.id)
    assert (r.status, r.params["lr"], len(r.history("loss"))) == ("finished", 0.5, 2000)


SIGTERM_SCRIPT = """
import time, trainlog
run = trainlog.init(project="spot", system_metrics_interval=None)
for step in range(20000):
    run.log({"loss": float(step)}, step=step)
print("logged", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize(
    ("spot", "status", "evidence"),
    [
        ("1", "preempted", "rank 0 preempted: SIGTERM on a spot instance"),
        ("0", "killed", "rank 0 killed: SIGTERM; nothing says it was a preemption"),
    ],
    ids=["spot", "on-demand"],
)
def test_sigterm_flushes_and_ends_the_run_as_its_evidence_says(
    server: Server, client_env: dict, spot: str, status: str, evidence: str
) -> None:
    proc = spawn_script(SIGTERM_SCRIPT, {**client_env, "TRAINLOG_SPOT": spot})
    wait_for_line(proc, "logged")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGTERM, "the default SIGTERM action still ends the process"
    runs = trainlog.Api().runs("spot")
    assert len(runs) == 1
    assert runs[0].status == status
    assert len(runs[0].history("loss")) == 20000
    [attempt] = trainlog.Api().run(runs[0].id).attempts
    assert attempt["ended_by"].startswith(evidence), attempt


def test_exit_finishes_and_an_uncaught_exception_fails(server: Server, client_env: dict) -> None:
    ok = run_script("import trainlog\nrun = trainlog.init(project='hooks', name='ok', system_metrics_interval=None)\nrun.log({'a': 1.0})\n", client_env)
    assert ok.returncode == 0, ok.stderr
    bad = run_script("import trainlog\nrun = trainlog.init(project='hooks', name='bad', system_metrics_interval=None)\nrun.log({'a': 1.0})\nraise ValueError('boom')\n", client_env)
    assert bad.returncode == 1 and "ValueError: boom" in bad.stderr
    statuses = {r.name: r.status for r in trainlog.Api().runs("hooks")}
    assert statuses == {"ok": "finished", "bad": "failed"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_environment_and_git_are_recorded_with_credentials_stripped(server: Server, client_env: dict, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "T")
    (repo / "train.py").write_text("lr = 0.1\n")
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "first")
    git(repo, "remote", "add", "origin", "https://alice:s3cr3t-token@git.example.com/team/model.git")
    (repo / "train.py").write_text("lr = 0.2\n")
    commit = git(repo, "rev-parse", "HEAD")
    code = "import trainlog\nrun = trainlog.init(project='env', system_metrics_interval=None)\nprint(run.id)\nrun.finish()\n"
    out = run_script(code, client_env, cwd=repo)
    assert out.returncode == 0, out.stderr
    r = trainlog.Api().run(out.stdout.strip())
    code_meta = r.metadata["code"]
    assert code_meta["commit"] == commit and code_meta["branch"] == "main" and code_meta["dirty"] is True
    assert code_meta["remote_url"] == "https://git.example.com/team/model.git"
    assert "-lr = 0.1" in code_meta["diff"] and "+lr = 0.2" in code_meta["diff"]
    assert "s3cr3t" not in json.dumps(r.metadata)
    env = r.metadata["environment"]
    assert env["hostname"] and env["cpu"]["logical_cores"] >= 1 and env["ram_total_bytes"] > 0
    assert env["gpu"]["available"] is False and "NVML" in env["gpu"]["reason"]
    assert any("train" in a or "-c" in a for a in env["command_line"])


def test_cost_accumulates_at_a_set_price_while_running(server: Server, client_env: dict) -> None:
    run = trainlog.init(project="cost", cost={"per_hour": 3600.0}, system_metrics_interval=0.1)
    wait_until("ten cost samples on the server while the run goes",
               lambda: trainlog.Api().run(run.id).summary.get("cost/usd", {}).get("count", 0) >= 10)
    live = trainlog.Api().run(run.id)
    assert live.status == "running"
    usd = live.summary["cost/usd"]["last"]
    assert usd > 0, usd
    # $3600 an hour is a dollar a second of the time the samples' own timestamps cover.
    samples = live.history("cost/usd")
    first, last = samples[0], samples[-1]
    assert last["timestamp"] > first["timestamp"], samples
    rate = (last["value"] - first["value"]) / ((last["timestamp"] - first["timestamp"]) / 1000)
    assert 0.8 <= rate < 1.25, f"about one dollar per second: {rate}"
    assert live.metadata["cost"]["usd_per_hour"] == 3600.0
    assert live.summary["sys/ram.used_bytes"]["last"] > 0
    run.finish()


def test_log_never_raises_for_tracking_problems(server: Server, client_env: dict) -> None:
    run = trainlog.init(project="robust", system_metrics_interval=None)
    run.log({"text": "not a number", "ok": 1.0, "": 2.0})
    server.kill9()
    for step in range(100):
        run.log({"loss": 1.0}, step=step)
    run.finish(timeout=2)
    with pytest.raises(trainlog.TrainlogError):
        trainlog.log({"x": 1.0})


OWN_HANDLER_SCRIPT = """
import signal, sys, time, trainlog
def own(signum, frame):
    print("own handler ran", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, own)
run = trainlog.init(project="spot-own", system_metrics_interval=None)
for step in range(500):
    run.log({"loss": float(step)}, step=step)
print("logged", flush=True)
time.sleep(60)
"""


def test_sigterm_then_the_programs_own_handler_runs(server: Server, client_env: dict) -> None:
    proc = spawn_script(OWN_HANDLER_SCRIPT, {**client_env, "TRAINLOG_SPOT": "1"})
    wait_for_line(proc, "logged")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "own handler ran" in out
    (run,) = trainlog.Api().runs("spot-own")
    assert run.status == "preempted" and len(run.history("loss")) == 500


def test_the_wheel_ships_the_server_command(tmp_path: Path) -> None:
    cli = Path(sys.executable).parent / "trainlog"
    proc = subprocess.Popen([str(cli), "server", "--port", "0", "--data", str(tmp_path / "d")], stdout=subprocess.PIPE, text=True)
    try:
        wait_for_line(proc, "listening on http://127.0.0.1:")
        assert (tmp_path / "d" / "trainlog.db").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0


def test_artifacts_and_checkpoints_from_python(server: Server, client_env: dict, tmp_path: Path) -> None:
    model = tmp_path / "model.bin"
    model.write_bytes(bytes(range(256)) * 100)
    with trainlog.init(project="ckpt", system_metrics_interval=None) as run:
        stored = run.log_artifact(model)
        assert stored["path"] == "model.bin" and stored["size"] == 25600
        for step, acc in [(1, 0.5), (2, 0.9), (3, 0.7)]:
            run.log({"val/acc": acc}, step=step)
            run.log_checkpoint(model, step=step, metadata={"acc": acc}, keep_best=1, metric="val/acc", mode="max")
        assert run.latest_checkpoint()["step"] == 2, "only the best by accuracy is kept"
    api_run = trainlog.Api().run(run.id)
    assert [a["path"] for a in api_run.artifacts()] == ["checkpoints/step-000000000002/model.bin", "model.bin"]
    dest = tmp_path / "restored"
    restored = trainlog.restore_checkpoint(run.id, str(dest))
    assert restored["metadata"] == {"acc": 0.9}
    assert (dest / "model.bin").read_bytes() == model.read_bytes()
    stored_bytes = server.data / "store" / "projects" / "1" / "artifacts" / run.id / "model.bin"
    stored_bytes.write_bytes(b"tampered")
    with pytest.raises(trainlog.ChecksumError):
        api_run.download_artifact("model.bin", str(tmp_path / "copy.bin"))
    assert not (tmp_path / "copy.bin").exists()


def test_a_server_with_auth_takes_the_key_from_the_environment(tmp_path: Path, client_env: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    guarded = Server(tmp_path / "guarded")
    guarded.start(extra_args=("--auth",))
    try:
        monkeypatch.setenv("TRAINLOG_SERVER", guarded.url)
        # No key: a clear error at init, not a run that drops its points.
        with pytest.raises(trainlog.ServerError, match="TRAINLOG_API_KEY"):
            trainlog.init(project="p", system_metrics_interval=None)
        key = (guarded.data / "admin.key").read_text().strip()
        monkeypatch.setenv("TRAINLOG_API_KEY", key)
        with trainlog.init(project="p", system_metrics_interval=None) as run:
            for step in range(100):
                run.log({"loss": 1 / (step + 1)}, step=step)
        r = trainlog.Api().run(run.id)
        assert (r.status, r.summary["loss"]["count"], r.user) == ("finished", 100, "admin")
    finally:
        guarded.stop()


def test_init_trusts_the_certificate_openssl_makes_by_default(tmp_path: Path, client_env: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """`openssl req -x509` makes a certificate that calls itself a CA; named in SSL_CERT_FILE, it
    is trusted as itself, as curl and requests trust it, and a run logs over HTTPS."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "30", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )
    server = Server(tmp_path / "tls")
    server.start(extra_args=("--tls-cert", str(cert), "--tls-key", str(key)))
    try:
        monkeypatch.setenv("TRAINLOG_SERVER", server.url)
        monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        with pytest.raises(trainlog.TrainlogError, match="certificate"):
            trainlog.init(project="tls", system_metrics_interval=None)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        with trainlog.init(project="tls", system_metrics_interval=None) as run:
            for step in range(20):
                run.log({"loss": 1 / (step + 1)}, step=step)
        assert trainlog.Api().run(run.id).summary["loss"]["count"] == 20
    finally:
        server.stop()


def test_https_and_roles_on_a_team_server(tmp_path: Path, client_env: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server with --auth and a self-signed certificate: trusted through SSL_CERT_FILE (or
    REQUESTS_CA_BUNDLE), and a key without write is a clear error at init."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-addext", "basicConstraints=critical,CA:FALSE",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    team = Server(tmp_path / "team")
    team.start(extra_args=("--auth", "--tls-cert", str(cert), "--tls-key", str(key)))
    try:
        assert team.url.startswith("https://")
        monkeypatch.setenv("TRAINLOG_SERVER", team.url)
        monkeypatch.setenv("TRAINLOG_API_KEY", (team.data / "admin.key").read_text().strip())
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
        with pytest.raises(trainlog.TrainlogError, match="certificate"):
            trainlog.init(project="vision", system_metrics_interval=None)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
        with trainlog.init(project="vision", system_metrics_interval=None) as run:
            for step in range(50):
                run.log({"loss": 1 / (step + 1)}, step=step)
        assert trainlog.Api().run(run.id).summary["loss"]["count"] == 50
        # A user who may only read the project: refused at init, with what to do about it.
        added = subprocess.run([str(BINARY), "users", "add", "viewer", "--data", str(team.data),
                                *postgres_meta_url(team.data.with_suffix(".meta-url"))],
                               check=True, capture_output=True, text=True, timeout=60)
        monkeypatch.setenv("TRAINLOG_API_KEY", added.stdout.strip().splitlines()[-1])
        with pytest.raises(trainlog.ServerError, match="this needs write"):
            trainlog.init(project="vision", system_metrics_interval=None)
        assert [r.id for r in trainlog.Api().runs("vision")] == [run.id], "a reader still reads"
    finally:
        team.stop()
