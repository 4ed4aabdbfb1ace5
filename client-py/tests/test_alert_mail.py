"""Alerts by e-mail, end to end: the server sends an alert to a real SMTP server (aiosmtpd) on
loopback that requires STARTTLS before anything else and a login only over TLS, with a
certificate from a test CA the server is told to trust; the mail arrives with the alert's
level, title, text and a link to the run. A server without a relay refuses an e-mail channel."""

from __future__ import annotations

import email
import email.policy
import json
import socket
import ssl
import subprocess
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import trainlog
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from helpers import BINARY, Server, wait_for


class Relay:
    """An SMTP server on 127.0.0.1: STARTTLS required, AUTH only over TLS, each mail kept."""

    def __init__(self, tmp_path: Path) -> None:
        ca = trustme.CA()
        self.ca_file = tmp_path / "relay-ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
        self.mails: List[Dict[str, Any]] = []
        relay = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                relay.mails.append(
                    {
                        "from": envelope.mail_from,
                        "to": list(envelope.rcpt_tos),
                        "message": email.message_from_bytes(envelope.content, policy=email.policy.default),
                        "tls": session.ssl is not None,
                        "login": session.auth_data.login.decode() if session.authenticated else None,
                    }
                )
                return "250 OK"

        def authenticator(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
            ok = isinstance(data, LoginPassword) and (data.login, data.password) == (b"bot", b"relay-pass")
            return AuthResult(success=ok, auth_data=data if ok else None)

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.controller = Controller(
            Handler(),
            hostname="127.0.0.1",
            port=self.port,
            tls_context=context,
            require_starttls=True,
            authenticator=authenticator,
            auth_require_tls=True,
        )
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    r = Relay(tmp_path)
    yield r
    r.stop()


def sent_deliveries(server: Server, project: str) -> List[Dict[str, Any]]:
    with urllib.request.urlopen(f"{server.url}/api/v1/projects/{project}/alert-deliveries", timeout=10) as answer:
        return [d for d in json.load(answer)["deliveries"] if d["status"] == "sent"]


def add_email_channel(server: Server, project: str, address: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BINARY), "alerts", "channel", "add", project, "--email", address, "--server", server.url],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.timeout(120)
def test_an_alert_arrives_by_mail_over_starttls_with_a_login(
    tmp_path: Path, relay: Relay, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = tmp_path / "smtp-password"
    password.write_text("relay-pass\n")
    server = Server(tmp_path / "data")
    server.start(
        extra_args=(
            "--smtp-url",
            f"smtp://bot@127.0.0.1:{relay.port}",
            "--smtp-from",
            "trainlog <alerts@example.com>",
            "--smtp-password-file",
            str(password),
            "--smtp-ca-file",
            str(relay.ca_file),
        )
    )
    try:
        monkeypatch.setenv("TRAINLOG_SERVER", server.url)
        monkeypatch.setenv("TRAINLOG_DIR", str(tmp_path / "client-state"))
        run = trainlog.init(project="mailed", name="night-run", system_metrics_interval=None)
        refused = add_email_channel(server, "mailed", "not-an-address")
        assert refused.returncode != 0 and "url:" in refused.stderr and "not an e-mail address" in refused.stderr
        added = add_email_channel(server, "mailed", "ana@example.com")
        assert added.returncode == 0 and "mailto:ana@example.com" in added.stdout, added.stderr
        run.log({"loss": 1.0}, step=41)
        run.alert("loss is NaN", "loss went NaN at step 42", level="error")
        run.finish()
        [mail] = wait_for("the mail", lambda: relay.mails, 30)
        assert mail["tls"] and mail["login"] == "bot", "STARTTLS, then the login"
        assert (mail["from"], mail["to"]) == ("alerts@example.com", ["ana@example.com"])
        message = mail["message"]
        assert message["Subject"] == f"[trainlog] [ERROR] loss is NaN (mailed / {run.id})"
        body = message.get_content()
        assert "loss went NaN at step 42" in body and "Step: 41" in body
        assert f"{server.url}/#/run/{run.id}" in body
        delivered = wait_for("the delivery recorded sent", lambda: sent_deliveries(server, "mailed"), 30)
        assert delivered[0]["answer"].startswith("SMTP 250"), delivered
    finally:
        server.stop()


@pytest.mark.timeout(60)
def test_a_server_without_a_relay_refuses_an_email_channel(server: Server, client_env: dict) -> None:
    trainlog.init(project="unmailed", name="setup", system_metrics_interval=None).finish()
    refused = add_email_channel(server, "unmailed", "ana@example.com")
    assert refused.returncode != 0 and "kind:" in refused.stderr and "--smtp-url" in refused.stderr, refused.stderr
