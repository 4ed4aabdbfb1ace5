"""Alerts from code, end to end: a training raises `trainlog.alert`, the server records it on the
run and sends it to the project's channels (a signed webhook checked the way a receiver would:
the HMAC over the timestamp and the body, and the timestamp's age; Slack- and Discord-shaped
bodies with their documented fields), retries a receiver that fails, and after a restart sends a
pending delivery once."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import os
import subprocess
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import trainlog
from helpers import BINARY, Server, postgres_meta_url, run_script, wait_for

SECRET = "s3cret-signing-key"


class Receiver:
    """An HTTP receiver on loopback: records each request; answers `fail_first` of them 500."""

    def __init__(self, fail_first: int = 0, port: int = 0) -> None:
        self.received: List[Dict[str, Any]] = []
        self.fail_first = fail_first
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver.received.append({"path": self.path, "headers": headers, "body": body})
                failing = len(receiver.received) <= receiver.fail_first
                self.send_response(500 if failing else 200)
                answer = b"busy, try later" if failing else b"ok"
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> List[Dict[str, Any]]:
        return [r for r in self.received if r["path"] == path]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def verify(request: Dict[str, Any], secret: str, tolerance_s: int = 300) -> Dict[str, Any]:
    """Checks a webhook as its receiver would (Stripe's scheme) and answers its JSON body."""
    header = request["headers"]["x-trainlog-signature"]
    parts = dict(item.split("=", 1) for item in header.split(","))
    sent_at = int(parts["t"])
    assert abs(time.time() - sent_at) <= tolerance_s, "a replayed or delayed body"
    expected = hmac.new(secret.encode(), f"{sent_at}.{request['body']}".encode(), hashlib.sha256).hexdigest()
    assert hmac.compare_digest(parts["v1"], expected), "the signature does not match the body"
    return json.loads(request["body"])


def cli(server: Server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BINARY), "alerts", *args, "--server", server.url], capture_output=True, text=True, timeout=60
    )


TRAINING = textwrap.dedent(
    """
    import math
    import trainlog
    run = trainlog.init(project="watch", name="diverging", system_metrics_interval=None)
    for step in range(5):
        loss = float("nan") if step >= 3 else 1.0 / (step + 1)
        run.log({"loss": loss}, step=step)
        if math.isnan(loss):
            sent = trainlog.alert("loss is NaN", f"loss went NaN at step {step}", level="error", wait_duration=300)
            print("SENT", sent, flush=True)
    run.finish()
    print("RUN", run.id, flush=True)
    """
)


@pytest.mark.timeout(120)
def test_an_alert_from_training_reaches_a_signed_webhook_slack_and_discord(
    server: Server, client_env: dict, receiver: Receiver
) -> None:
    trainlog.init(project="watch", name="setup", system_metrics_interval=None).finish()
    # A loopback address needs a server admin's leave (every caller is one without --auth).
    refused = cli(server, "channel", "add", "watch", "--webhook", receiver.url("/hook"))
    assert refused.returncode != 0
    assert "url: 127.0.0.1 is 127.0.0.1, a private, loopback or link-local address" in refused.stderr, refused.stderr
    for kind, path, extra in (
        ("--webhook", "/hook", ["--secret", SECRET]),
        ("--slack", "/slack", []),
        ("--discord", "/discord", []),
    ):
        added = cli(server, "channel", "add", "watch", kind, receiver.url(path), "--allow-private", *extra)
        assert added.returncode == 0, added.stderr
    listed = cli(server, "channel", "list", "watch")
    assert listed.stdout.count("allowed") == 3 and "yes" in listed.stdout, listed.stdout
    assert SECRET not in listed.stdout

    done = run_script(TRAINING, client_env, timeout=60)
    assert done.returncode == 0, done.stderr
    # The second NaN within wait_duration was folded: not sent.
    assert [line for line in done.stdout.splitlines() if line.startswith("SENT")] == ["SENT True", "SENT False"]
    run_id = done.stdout.split("RUN ", 1)[1].split()[0]

    wait_for("the three deliveries", lambda: len(receiver.received) >= 3, 30)
    time.sleep(0.5)
    assert len(receiver.received) == 3, receiver.received
    [hook] = receiver.at("/hook")
    body = verify(hook, SECRET)
    assert body["project"] == "watch" and body["run"] == run_id and body["rule"] == ""
    assert (body["title"], body["text"], body["level"], body["step"], body["count"]) == (
        "loss is NaN",
        "loss went NaN at step 3",
        "error",
        3,
        1,
    )
    assert body["url"] == f"{server.url}/#/run/{run_id}"
    assert hook["headers"]["content-type"] == "application/json"
    # Slack's incoming webhook takes `text` (mrkdwn); Discord's takes `content` (≤ 2,000 characters).
    [slack] = receiver.at("/slack")
    slack_body = json.loads(slack["body"])
    assert (
        set(slack_body) == {"text"} and "loss is NaN" in slack_body["text"] and f"<{body['url']}|" in slack_body["text"]
    )
    [discord] = receiver.at("/discord")
    discord_body = json.loads(discord["body"])
    assert set(discord_body) == {"content", "allowed_mentions"} and discord_body["allowed_mentions"] == {"parse": []}
    assert "loss is NaN" in discord_body["content"] and len(discord_body["content"]) <= 2000

    [alert] = trainlog.Api().run(run_id).alerts
    assert (alert["title"], alert["level"], alert["step"], alert["rule"], alert["count"]) == (
        "loss is NaN",
        "error",
        3,
        "",
        1,
    )
    assert alert["time"] > 0
    shown = cli(server, "list", "watch")
    assert shown.returncode == 0 and "loss is NaN" in shown.stdout and run_id in shown.stdout, shown.stdout
    deliveries = cli(server, "deliveries", "watch")
    assert deliveries.stdout.count("sent") == 3, deliveries.stdout


def raise_alert(server: Server, run_id: str, title: str) -> None:
    import urllib.request

    request = urllib.request.Request(
        f"{server.url}/api/v1/runs/{run_id}/alerts",
        data=json.dumps({"title": title, "level": "warn"}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 201


def deliveries(server: Server) -> List[Dict[str, Any]]:
    import urllib.request

    with urllib.request.urlopen(f"{server.url}/api/v1/projects/watch/alert-deliveries", timeout=10) as answer:
        return json.load(answer)["deliveries"]


@pytest.mark.timeout(120)
def test_a_failed_delivery_is_retried_and_recorded_and_a_restart_sends_a_pending_one_once(
    tmp_path: Path, client_env: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = Server(tmp_path / "data")
    server.start()
    monkeypatch.setenv("TRAINLOG_SERVER", server.url)
    flaky = Receiver(fail_first=1)
    try:
        run = trainlog.init(project="watch", name="long", system_metrics_interval=None)
        run.finish()
        assert (
            cli(server, "channel", "add", "watch", "--webhook", flaky.url("/hook"), "--allow-private").returncode == 0
        )
        raise_alert(server, run.id, "first")
        # The receiver answers 500 once: the delivery is tried again (2 s later) and sent.
        sent = wait_for("the retry", lambda: (d := deliveries(server)) and d[0]["status"] == "sent" and d[0], 30)
        assert sent["attempts"] == 2 and sent["answer"] == "HTTP 200: ok", sent
        assert len(flaky.received) == 2
        assert (
            flaky.received[0]["headers"]["x-trainlog-delivery"] == flaky.received[1]["headers"]["x-trainlog-delivery"]
        )

        # The receiver goes down: the next alert's first attempt fails and it waits, pending.
        port = flaky.port
        flaky.stop()
        raise_alert(server, run.id, "second")
        pending = wait_for("a failed attempt", lambda: (d := deliveries(server)) and d[0]["attempts"] == 1 and d[0], 30)
        assert pending["status"] == "pending" and pending["answer"], pending
        server_port = server.port
        server.stop()
        back = Receiver(port=port)
        try:
            server.start(server_port)
            wait_for(
                "the pending delivery to be sent after the restart",
                lambda: deliveries(server)[0]["status"] == "sent",
                60,
            )
            time.sleep(3)
            assert [json.loads(r["body"])["title"] for r in back.received] == ["second"], "sent once"
        finally:
            back.stop()
    finally:
        server.stop()


RULED = textwrap.dedent(
    """
    import trainlog
    run = trainlog.init(project="ruled", name="diverging", system_metrics_interval=None)
    for step in range(8):
        run.log({"loss": float("nan") if step in (5, 6) else 1.0 / (step + 1)}, step=step)
    run.flush()
    print("RUN", run.id, flush=True)
    raise RuntimeError("the loss diverged")
    """
)


@pytest.mark.timeout(120)
def test_rules_fire_on_a_nan_as_its_batch_arrives_and_on_a_failed_run(
    server: Server, client_env: dict, receiver: Receiver
) -> None:
    trainlog.init(project="ruled", name="setup", system_metrics_interval=None).finish()
    refused = cli(server, "rule", "add", "ruled", "loss is bad")
    assert (
        refused.returncode != 0 and "rule:" in refused.stderr and "not a rule this server understands" in refused.stderr
    )
    for rule in ("loss not finite", "failed"):
        added = cli(server, "rule", "add", "ruled", rule)
        assert added.returncode == 0, added.stderr
    assert "loss not finite" in cli(server, "rule", "list", "ruled").stdout
    assert cli(server, "channel", "add", "ruled", "--webhook", receiver.url("/hook"), "--allow-private").returncode == 0

    done = run_script(RULED, client_env, timeout=60)
    assert done.returncode != 0 and "the loss diverged" in done.stderr
    run_id = done.stdout.split("RUN ", 1)[1].split()[0]
    wait_for("both rules' webhooks", lambda: len(receiver.at("/hook")) >= 2, 30)
    bodies = sorted((json.loads(r["body"]) for r in receiver.at("/hook")), key=lambda b: b["rule"])
    assert [(b["rule"], b["title"], b["level"], b["step"], b["run"]) for b in bodies] == [
        ("failed", "run failed", "error", None, run_id),
        # The first NaN of the batch fires; the second, in the same batch, is the same alert.
        ("loss not finite", "loss is NaN", "error", 5, run_id),
    ]
    alerts = {a["rule"]: a for a in trainlog.Api().run(run_id).alerts}
    assert alerts["loss not finite"]["count"] == 1
    assert alerts["loss not finite"]["text"] == "loss was NaN at step 5 (rule `loss not finite`)"


@pytest.mark.timeout(60)
def test_rules_kept_as_yaml_beside_the_code_are_applied_and_pruned(
    server: Server, client_env: dict, tmp_path: Path
) -> None:
    trainlog.init(project="yaml-rules", name="setup", system_metrics_interval=None).finish()
    assert cli(server, "rule", "add", "yaml-rules", "finished").returncode == 0
    rules = tmp_path / "trainlog-alerts.yaml"
    rules.write_text("project: yaml-rules\nrules:\n  - train/loss not finite\n  - stalled 10m\n  - budget 80%\n")
    dry = cli(server, "apply", str(rules), "--dry-run")
    assert dry.returncode == 0 and dry.stdout.strip().endswith(
        "dry run: 3 rule(s) added, 0 removed, in project yaml-rules"
    )
    assert "stalled 10m" not in cli(server, "rule", "list", "yaml-rules").stdout, "a dry run changes nothing"
    applied = cli(server, "apply", str(rules))
    assert applied.returncode == 0, applied.stderr
    assert "+ stalled 10m" in applied.stdout and "finished (not in the file; kept without --prune)" in applied.stdout
    again = cli(server, "apply", str(rules))
    assert again.stdout.strip().endswith("0 rule(s) added, 0 removed, in project yaml-rules"), again.stdout
    pruned = cli(server, "apply", str(rules), "--prune")
    assert "- finished" in pruned.stdout and pruned.stdout.strip().endswith(
        "0 rule(s) added, 1 removed, in project yaml-rules"
    )
    listed = cli(server, "rule", "list", "yaml-rules").stdout
    assert [line.split("\t")[2] for line in listed.strip().splitlines()[1:]] == [
        "train/loss not finite",
        "stalled 10m",
        "budget 80%",
    ]
    rules.write_text("project: yaml-rules\nrules:\n  - failed\n  - stalled forever\n")
    bad = cli(server, "apply", str(rules))
    assert bad.returncode != 0 and f"{rules}:4: rules[1]: " in bad.stderr, bad.stderr


@pytest.mark.timeout(60)
def test_an_installation_rule_fires_in_every_project_and_only_admins_give_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = Server(tmp_path / "data")
    server.start(extra_args=("--auth",))
    try:
        users = {}
        for name, admin in (("root", True), ("ana", False)):
            made = subprocess.run(
                [
                    str(BINARY),
                    "users",
                    "add",
                    name,
                    *(["--admin"] if admin else []),
                    "--data",
                    str(server.data),
                    *postgres_meta_url(server.data.with_suffix(".meta-url")),
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert made.returncode == 0, made.stderr
            users[name] = made.stdout.strip().splitlines()[-1]

        def alerts_cli(key: str, *args: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [str(BINARY), "alerts", *args, "--server", server.url],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "TRAINLOG_API_KEY": key},
            )

        refused = alerts_cli(users["ana"], "installation-rule", "add", "failed")
        assert refused.returncode != 0 and "admin" in refused.stderr, refused.stderr
        added = alerts_cli(users["root"], "installation-rule", "add", "failed")
        assert added.returncode == 0 and "added to every project: failed" in added.stdout, added.stderr
        monkeypatch.setenv("TRAINLOG_SERVER", server.url)
        monkeypatch.setenv("TRAINLOG_API_KEY", users["ana"])
        monkeypatch.setenv("TRAINLOG_DIR", str(tmp_path / "client-state"))
        for project in ("vision", "speech"):
            run = trainlog.init(project=project, name="crashes", system_metrics_interval=None)
            run.finish(status="failed")
            alerts = wait_for(f"the rule in {project}", lambda run_id=run.id: trainlog.Api().run(run_id).alerts, 30)
            assert [(a["rule"], a["title"]) for a in alerts] == [("failed", "run failed")]
        listed = alerts_cli(users["ana"], "rule", "list", "vision")
        assert "failed (every project)" in listed.stdout, listed.stdout
    finally:
        server.stop()
