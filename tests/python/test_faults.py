"""Fault tests against the real binary: an object store that stops answering, and a full disk.

Every loop is bounded by a count of requests; nothing here asserts how long anything took.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path

import pytest

from conftest import TrainlogServer, start_trainlog, stop_trainlog

POINTS_PER_BATCH = 20_000
# A request the server does not answer within this long counts as a hang, and fails the test.
REQUEST_TIMEOUT_S = 20


def call(server: TrainlogServer, method: str, path: str, body: dict | None = None) -> tuple[int, dict, Message]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + "/api/v1" + path, data=data, method=method)
    if data is not None:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return response.status, json.loads(response.read() or b"{}"), response.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), e.headers


def batch(first_step: int) -> dict:
    return {"points": [{"key": "loss", "step": s, "value": s * 0.5} for s in range(first_step, first_step + POINTS_PER_BATCH)]}


def rss_mib(pid: int) -> tuple[int, int]:
    """(current, peak) resident memory of a process in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    kib = lambda name: int(fields[name].split()[0])  # noqa: E731
    return kib("VmRSS") // 1024, kib("VmHWM") // 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_back(server: TrainlogServer, run: str) -> dict[int, float]:
    status, body, _ = call(server, "GET", f"/runs/{run}/metrics?key=loss")
    assert status == 200, body
    return {p["step"]: p["value"] for p in body["points"]}


@pytest.fixture
def moto(tmp_path):
    binary = Path(sys.executable).parent / "moto_server"
    if not binary.exists():
        pytest.skip(f"{binary} is missing: pip install 'moto[server]'")
    port = free_port()
    log = open(tmp_path / "moto.log", "w")
    process = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    urllib.request.urlopen(urllib.request.Request(f"{url}/outage", method="PUT"), timeout=10)
    yield process, url
    process.send_signal(signal.SIGCONT)
    process.kill()
    process.wait()
    log.close()


def test_an_object_store_outage_turns_ingest_into_503_within_the_memory_bound_and_loses_nothing(tmp_path, moto):
    process, endpoint = moto
    max_buffer = 48 << 20  # two million points
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    server = start_trainlog(
        tmp_path, ["--store", "s3://outage/data", "--max-buffer-bytes", str(max_buffer)], env=env
    )
    try:
        status, run, _ = call(server, "POST", "/runs", {"project": "outage", "name": "r"})
        assert status == 201, run
        run_id = run["id"]
        acknowledged: set[int] = set()
        step = 0

        def send_one() -> int:
            nonlocal step
            status, body, headers = call(server, "POST", f"/runs/{run_id}/metrics", batch(step))
            if status == 200:
                acknowledged.update(range(step, step + POINTS_PER_BATCH))
                step += POINTS_PER_BATCH
            elif status == 503:
                assert headers.get("Retry-After"), headers
                assert body["error"]["code"] == "unavailable", body
            else:
                pytest.fail(f"unexpected answer {status}: {body}")
            return status

        for _ in range(5):
            assert send_one() == 200
        process.send_signal(signal.SIGSTOP)
        answers = {200: 0, 503: 0}
        peak_during = 0
        # Ingest goes on while the store is frozen: the buffer fills to its bound, then 503s.
        for _ in range(400):
            answers[send_one()] += 1
            peak_during = max(peak_during, rss_mib(server.process.pid)[0])
            if answers[503] >= 20:
                break
        _, stats, _ = call(server, "GET", "/admin/stats")
        print(
            f"outage: {answers[200]} batches acknowledged, {answers[503]} refused with 503, "
            f"buffered {stats['buffered_bytes']} of {max_buffer} bytes, peak RSS {peak_during} MiB"
        )
        assert answers[503] >= 20, "ingest never reached the buffer bound"
        assert stats["buffered_bytes"] <= max_buffer
        assert stats["ingest_refused_buffer_full"] >= 20
        assert peak_during < 400, f"RSS {peak_during} MiB with a {max_buffer >> 20} MiB buffer bound"

        # The store comes back: everything acknowledged is persisted, and ingest resumes.
        process.send_signal(signal.SIGCONT)
        for _ in range(600):
            _, stats, _ = call(server, "GET", "/admin/stats")
            if stats["buffered_points"] == 0:
                break
            time.sleep(0.2)
        assert stats["buffered_points"] == 0, stats
        assert stats["persisted_points"] >= len(acknowledged)
        assert send_one() == 200
        stored = read_back(server, run_id)
        assert set(stored) == acknowledged
        assert all(stored[s] == s * 0.5 for s in acknowledged)
        print(f"outage: {len(acknowledged)} points acknowledged, {len(stored)} read back from Parquet")
    finally:
        process.send_signal(signal.SIGCONT)
        stop_trainlog(server)


def test_a_full_disk_answers_507_keeps_serving_reads_and_recovers_without_loss(tmp_path):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.strip() or 'not root'}); the full-disk test needs one")
    server = None
    try:
        filler = mount / "filler"
        server = start_trainlog(mount)
        status, run, _ = call(server, "POST", "/runs", {"project": "disk", "name": "r"})
        assert status == 201, run
        run_id = run["id"]
        acknowledged: dict[int, float] = {}
        step = 0
        # Leave only a few MiB free, then ingest until the disk refuses.
        free = shutil.disk_usage(mount).free
        with open(filler, "wb") as f:
            f.write(b"\0" * (free - (4 << 20)))
        answers = {200: 0, 507: 0}
        for _ in range(200):
            status, body, _ = call(server, "POST", f"/runs/{run_id}/metrics", batch(step))
            if status == 200:
                acknowledged.update({s: s * 0.5 for s in range(step, step + POINTS_PER_BATCH)})
                answers[200] += 1
                step += POINTS_PER_BATCH
            else:
                assert status == 507, body
                assert body["error"]["code"] == "insufficient_storage"
                assert "full" in body["error"]["message"], body
                answers[507] += 1
                if answers[507] >= 3:
                    break
        assert answers[507] >= 3, f"the disk never filled: {answers}"
        # Reads go on while the disk is full.
        assert read_back(server, run_id) == acknowledged

        filler.unlink()
        status, body, _ = call(server, "POST", f"/runs/{run_id}/metrics", batch(step))
        assert status == 200, body
        acknowledged.update({s: s * 0.5 for s in range(step, step + POINTS_PER_BATCH)})
        status, body, _ = call(server, "POST", "/admin/flush", {})
        assert status == 200, body
        assert read_back(server, run_id) == acknowledged
        print(f"full disk: {answers[200]} batches acknowledged before {answers[507]} answers of 507; "
              f"{len(acknowledged)} points read back after space was freed")
        stop_trainlog(server)
        server = None
        restarted = start_trainlog(mount)
        try:
            assert read_back(restarted, run_id) == acknowledged
        finally:
            stop_trainlog(restarted)
    finally:
        if server is not None:
            server.process.kill()
            server.process.wait()
        subprocess.run(["umount", "-l", str(mount)], check=False)
