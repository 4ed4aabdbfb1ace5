"""What a SIGTERM means on Kubernetes and on a cloud VM: the pod's `DisruptionTarget` condition
read from the API server with the pod's service account (a process of a real training, SIGTERMed,
against a loopback HTTPS server answering as the API server does), and each cloud's interruption
notice as its metadata service words it."""

from __future__ import annotations

import http.server
import json
import signal
import ssl
import subprocess
import textwrap
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import trainlog
from helpers import Server, spawn_script, wait_for, wait_for_line
from trainlog._evidence import cloud_notice, pod_end

EVICTED = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "EvictionByEvictionAPI",
    "message": "Eviction API: evicting",
}


def pod(conditions: List[Dict[str, str]], deleting: bool = False) -> Dict[str, Any]:
    metadata: Dict[str, Any] = {"name": "bert-worker-0", "namespace": "ml"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-28T10:00:00Z"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": metadata,
        "status": {"phase": "Running", "conditions": conditions},
    }


def test_a_pod_kubernetes_disrupted_is_preempted_one_deleted_by_someone_is_killed() -> None:
    ready = {"type": "Ready", "status": "True"}
    assert pod_end(pod([ready, EVICTED], deleting=True)) == (
        "preempted",
        "SIGTERM; Kubernetes marked the pod DisruptionTarget (EvictionByEvictionAPI): "
        "it was evicted (a node drain, or the eviction API)",
    )
    preempted = dict(EVICTED, reason="PreemptionByScheduler")
    assert pod_end(pod([preempted]))[0] == "preempted"  # type: ignore[index]
    assert pod_end(pod([dict(EVICTED, status="False")], deleting=True)) == (
        "killed",
        "SIGTERM; Kubernetes is deleting the pod with no disruption condition (someone deleted it)",
    )
    assert pod_end(pod([ready])) is None


class Answers(http.server.BaseHTTPRequestHandler):
    """Answers each (method, path) from `routes`, to requests bearing `bearer` when it is set."""

    routes: Dict[Tuple[str, str], Tuple[int, str]] = {}
    bearer: Optional[str] = None

    def answer(self) -> None:
        status, body = self.routes.get((self.command, self.path), (404, "not found"))
        if self.bearer is not None and self.headers.get("Authorization") != f"Bearer {self.bearer}":
            status, body = 401, '{"kind": "Status", "reason": "Unauthorized"}'
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = answer

    def log_message(self, *args: Any) -> None:
        pass


def serve(
    routes: Dict[Tuple[str, str], Tuple[int, str]], tls: Optional[ssl.SSLContext] = None, bearer: Optional[str] = None
) -> Iterator[str]:
    handler = type("Handler", (Answers,), {"routes": routes, "bearer": bearer})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    scheme = "https" if tls else "http"
    yield f"{scheme}://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_each_clouds_interruption_notice_as_its_metadata_service_words_it() -> None:
    aws = {
        ("PUT", "/latest/api/token"): (200, "token-1"),
        ("GET", "/latest/meta-data/spot/instance-action"): (
            200,
            '{"action": "terminate", "time": "2026-11-28T10:02:00Z"}',
        ),
    }
    for url in serve(aws):
        assert (
            cloud_notice("Amazon EC2", metadata=url)
            == "AWS spot interruption notice: terminate at 2026-11-28T10:02:00Z"
        )
        assert cloud_notice("QEMU", metadata=url) is None, "no cloud, nothing asked"
    for url in serve({("PUT", "/latest/api/token"): (200, "token-1")}):
        assert cloud_notice("Amazon EC2", metadata=url) is None, "404: no notice"
    for url in serve({("GET", "/computeMetadata/v1/instance/preempted"): (200, "TRUE")}):
        assert cloud_notice("Google", gce_metadata=url) == "GCE says the instance was preempted"
    for url in serve({("GET", "/computeMetadata/v1/instance/preempted"): (200, "FALSE")}):
        assert cloud_notice("Google", gce_metadata=url) is None
    events = {
        "DocumentIncarnation": 2,
        "Events": [{"EventId": "a", "EventType": "Preempt", "NotBefore": "Sat, 28 Nov 2026 10:00:30 GMT"}],
    }
    for url in serve({("GET", "/metadata/scheduledevents?api-version=2020-07-01"): (200, json.dumps(events))}):
        assert (
            cloud_notice("Microsoft Corporation", metadata=url)
            == "Azure scheduled event Preempt, not before Sat, 28 Nov 2026 10:00:30 GMT"
        )


HOLDING = textwrap.dedent(
    """
    import time
    import trainlog
    run = trainlog.init(project="k8s", name="pod", system_metrics_interval=None, cost={"per_hour": 3.0})
    run.log({"loss": 1.0}, step=0)
    run.flush()
    print("READY", flush=True)
    time.sleep(300)
    """
)


@pytest.fixture
def api_server_tls(tmp_path: Path) -> Tuple[ssl.SSLContext, Path]:
    """A self-signed certificate for 127.0.0.1, and a service account folder trusting it."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token\n")
    (account / "namespace").write_text("ml")
    (account / "ca.crt").write_text(cert.read_text())
    return tls, account


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("answer", "status", "evidence"),
    [
        (
            (200, json.dumps(pod([EVICTED], deleting=True))),
            "preempted",
            "rank 0 preempted: SIGTERM; Kubernetes marked the pod DisruptionTarget (EvictionByEvictionAPI): "
            "it was evicted (a node drain, or the eviction API)",
        ),
        (
            (403, '{"kind": "Status", "reason": "Forbidden"}'),
            "killed",
            "rank 0 killed: SIGTERM; nothing says it was a preemption (Kubernetes answered 403 for pod "
            "ml/bert-worker-0 (its service account needs `get` on pods))",
        ),
    ],
)
def test_a_sigtermed_pod_ends_as_its_disruption_condition_says(
    server: Server,
    client_env: dict,
    api_server_tls: Tuple[ssl.SSLContext, Path],
    answer: Tuple[int, str],
    status: str,
    evidence: str,
) -> None:
    tls, account = api_server_tls
    routes = {("GET", "/api/v1/namespaces/ml/pods/bert-worker-0"): answer}
    # The API server answers the pod's service account only.
    for url in serve(routes, tls, bearer="pod-token"):
        port = url.rsplit(":", 1)[1]
        env = {
            **client_env,
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": port,
            "TRAINLOG_KUBERNETES_SERVICE_ACCOUNT": str(account),
            "TRAINLOG_POD_NAME": "bert-worker-0",
        }
        proc = spawn_script(HOLDING, env)
        try:
            wait_for_line(proc, "READY", timeout=60)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        [listed] = trainlog.Api().runs("k8s")
        run = wait_for(
            "the run to end",
            lambda rid=listed.id: (d := trainlog.Api()._native.run(rid))["status"] != "running" and d,
            30,
        )
        assert run["status"] == status, run["attempts"]
        [attempt] = run["attempts"]
        assert attempt["ended_by"] == evidence
