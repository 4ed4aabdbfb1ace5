"""Fuzzes the HTTP API with schemathesis against the OpenAPI document the server derives from
its own types: every check schemathesis has (no 5xx, every status, header and body as the
document says, schema-valid requests accepted, schema-violating ones refused, 405 for a method
a route does not take), a fixed number of examples per operation and a fixed seed.

Real ids (a run with metrics, artifacts and a checkpoint, a project, a sweep with a trial) are
given to the operations that need them, so they are tested beyond their 404. Models, which a
test may delete, are reached through the stateful phase, which follows what it creates.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

from conftest import TrainlogServer, start_trainlog, stop_trainlog

EXAMPLES_PER_OPERATION = int(os.environ.get("TRAINLOG_FUZZ_EXAMPLES", "25"))
SEED = int(os.environ.get("TRAINLOG_FUZZ_SEED", "20261122"))
RUN_ID = "fuzz-run-1"
MODEL = "fuzz-model"
USER = "fuzz-user"
DOOMED_USER = "fuzz-doomed"
SWEEP_FILE = """
project: fuzz
name: fuzz-sweep
command: [python, train.py]
method: random
metric: {name: loss, goal: minimize}
parameters:
  lr: {distribution: log_uniform, min: 1.0e-4, max: 0.5}
run_cap: 1000
"""


def admin_key(server: TrainlogServer) -> str:
    return (server.data / "admin.key").read_text().strip()


def call(server: TrainlogServer, method: str, path: str, body: object = None, raw: bytes | None = None) -> dict:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(server.url + "/api/v1" + path, data=data, method=method)
    request.add_header("content-type", "application/octet-stream" if raw is not None else "application/json")
    request.add_header("authorization", f"Bearer {admin_key(server)}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


def make_fixtures(server: TrainlogServer) -> dict[str, str]:
    """Creates what the operations act on; answers the ids."""
    call(server, "POST", "/runs", {"project": "fuzz", "id": RUN_ID, "name": "fuzzed", "params": {"lr": 0.1}})
    call(server, "POST", f"/runs/{RUN_ID}/metrics", {"points": [{"key": "loss", "step": s, "value": 1 / (s + 1)} for s in range(10)]})
    call(server, "PUT", "/projects/fuzz/views/fuzz%20view", {"state": {"query": "filter=params.lr%20%3E%200"}})
    weights = b"weights"
    call(server, "PUT", f"/runs/{RUN_ID}/artifacts/checkpoints/best/model.bin", raw=weights)
    call(server, "PUT", f"/runs/{RUN_ID}/artifacts/notes.txt", raw=b"notes")
    call(server, "POST", f"/runs/{RUN_ID}/checkpoints", {
        "step": 9, "name": "best", "metric": "loss",
        "files": [{"path": "model.bin", "size": len(weights), "sha256": hashlib.sha256(weights).hexdigest()}],
    })
    call(server, "POST", "/models", {"name": MODEL})
    call(server, "POST", f"/models/{MODEL}/versions", {"run_id": RUN_ID, "checkpoint": "best", "alias": "champion"})
    sweep = call(server, "POST", "/sweeps", {"config": SWEEP_FILE})
    call(server, "POST", f"/sweeps/{sweep['id']}/next", {"agent": "fuzz:1", "slot": "cpu0"})
    # Users of its own: one to hold roles, one whose removal and keys' revocation act on something
    # real but never on the admin key the fuzzer sends.
    call(server, "POST", "/users", {"name": USER})
    call(server, "POST", "/users", {"name": DOOMED_USER})
    spare = call(server, "POST", f"/users/{DOOMED_USER}/keys")
    return {"run": RUN_ID, "sweep": sweep["id"], "key": spare["key_id"]}


def config(ids: dict[str, str]) -> str:
    """schemathesis.toml: the real ids per path, and the statuses a schema-valid request may
    get where validity depends on more than its schema can say."""
    grammar = ["2xx", "400", "404", "409"]
    return f"""
[[operations]]
include-path-regex = '^/api/v1/runs/\\{{id\\}}'
parameters = {{ "path.id" = "{ids['run']}" }}

# Deleting a view aims at another name, so the fixed view the other view routes read stays.
[[operations]]
include-name = "DELETE /api/v1/projects/{{name}}/views/{{view}}"
parameters = {{ "path.name" = "fuzz", "path.view" = "fuzz doomed view" }}

[[operations]]
include-path-regex = '^/api/v1/projects/\\{{name\\}}'
parameters = {{ "path.name" = "fuzz", "path.user" = "{USER}", "path.view" = "fuzz view" }}

[[operations]]
include-path-regex = '^/api/v1/users/\\{{name\\}}'
parameters = {{ "path.name" = "{DOOMED_USER}" }}

[[operations]]
include-path-regex = '^/api/v1/keys/\\{{id\\}}'
parameters = {{ "path.id" = "{ids['key']}" }}

[[operations]]
include-path-regex = '^/api/v1/sweeps/\\{{id\\}}'
parameters = {{ "path.id" = "{ids['sweep']}", "path.index" = "0" }}

# A filter and an order_by follow the search grammar (docs/api.md, "Run search"), which a JSON Schema
# cannot express: a string the grammar refuses gets 400 with the position of the error.
[[operations]]
include-name = ["POST /api/v1/runs/search", "GET /api/v1/projects/{{name}}/runs"]
checks.positive_data_acceptance.expected-statuses = {grammar}

# A sweep file is YAML with its own rules (docs/sweeps.md).
[[operations]]
include-name = "POST /api/v1/sweeps"
checks.positive_data_acceptance.expected-statuses = {grammar}

# The report's filter follows the search grammar, and `by`, `since`, `until` and `active_above`
# their own forms (docs/report.md).
[[operations]]
include-name = "GET /api/v1/report"
checks.positive_data_acceptance.expected-statuses = {grammar}

# A price row needs a price, an instance row its cloud and instance type, a rate its GPU model or
# cluster (docs/report.md, "Prices"); a restore that worked names no error.
[[operations]]
include-name = ["POST /api/v1/prices", "POST /api/v1/runs/{{id}}/checkpoints/{{name}}/restores"]
checks.positive_data_acceptance.expected-statuses = {grammar}

# A blob's body must have the SHA-256 its path names; a media item's boxes have their minimum
# at most their maximum, and its class labels are keyed by integers; a histogram's edges
# increase and number one more than its counts; a table's rows hold a value per column, an
# appended part has the columns of the part before, and a read sorts and filters by columns the
# table has; a read names a key a series could have (no control characters) (docs/media.md).
[[operations]]
include-name = [
    "PUT /api/v1/runs/{{id}}/media/blobs/{{sha256}}",
    "POST /api/v1/runs/{{id}}/media",
    "GET /api/v1/runs/{{id}}/media",
    "POST /api/v1/runs/{{id}}/histograms",
    "GET /api/v1/runs/{{id}}/histograms",
    "POST /api/v1/runs/{{id}}/tables",
    "GET /api/v1/runs/{{id}}/tables",
]
checks.positive_data_acceptance.expected-statuses = {grammar}

# An artifact path's rules are in its pattern, but the stateful phase builds paths from other
# answers and percent-encoded text that can carry control characters the server refuses (400).
[[operations]]
include-path-regex = '^/api/v1/runs/\\{{id\\}}/artifacts/\\{{path\\}}$'
checks.positive_data_acceptance.expected-statuses = {grammar}

# A joining process's rank is below its world size and its node rank below its node count
# (docs/jobs.md): rules across fields, which the document cannot state.
[[operations]]
include-name = "POST /api/v1/runs"
checks.positive_data_acceptance.expected-statuses = {grammar}

# An alert's title has something besides whitespace and neither has control characters; a
# channel's url is an http(s) URL whose host resolves to a public address (docs/alerts.md), and
# a channel or rule removed is one the project has (or the installation); a rule is one of the
# forms docs/alerts.md lists.
[[operations]]
include-name = [
    "POST /api/v1/runs/{{id}}/alerts",
    "POST /api/v1/projects/{{name}}/alert-channels",
    "DELETE /api/v1/projects/{{name}}/alert-channels/{{channel}}",
    "POST /api/v1/projects/{{name}}/alert-rules",
    "DELETE /api/v1/projects/{{name}}/alert-rules/{{rule}}",
    "POST /api/v1/alert-rules",
    "DELETE /api/v1/alert-rules/{{rule}}",
]
checks.positive_data_acceptance.expected-statuses = {grammar}

# Console lines: a rank list is comma-separated, a search with regex=true is a regular
# expression, and one page start is given at most; a line's text is at most 16 KiB in bytes and
# one line (docs/logs.md). A follow streams until the run ends: the fuzzer reads pages only.
[[operations]]
include-name = ["GET /api/v1/runs/{{id}}/logs", "POST /api/v1/runs/{{id}}/logs"]
parameters = {{ "query.follow" = false }}
checks.positive_data_acceptance.expected-statuses = {grammar}

# keep_best needs `metric`, and the metric must be one the run logged.
[[operations]]
include-name = "POST /api/v1/runs/{{id}}/checkpoints"
checks.positive_data_acceptance.expected-statuses = {grammar}
"""


def test_the_api_matches_its_openapi_document(tmp_path: Path) -> None:
    # With --auth, so the document's security holds as well: every operation but the health
    # check refuses a request without the key (schemathesis checks that too).
    (tmp_path / "server").mkdir()
    # Schemathesis sends wrong keys on purpose: the per-address throttle of failed key checks is
    # off here (tests/tests/trust_defects.rs checks it).
    trainlog_server = start_trainlog(tmp_path / "server", ["--auth", "--max-key-failures", "0"])
    try:
        run_schemathesis(trainlog_server, tmp_path)
    finally:
        stop_trainlog(trainlog_server)


def no_nul() -> list[str]:
    """No text the server keeps may hold the NUL character (PostgreSQL's cannot, and the server
    refuses it on every database with 400 naming the field), which the schema does not say for
    each string: schemathesis generates none."""
    return ["--generation-allow-x00", "false"]


# The fixtures' ids are fixed, so one stateful step may delete what a later one reads (a member,
# a saved view): that 404 is right, so the check for created resources that vanish is left out.
def run_schemathesis(trainlog_server: TrainlogServer, tmp_path: Path) -> None:
    ids = make_fixtures(trainlog_server)
    (tmp_path / "schemathesis.toml").write_text(config(ids))
    st = Path(sys.executable).with_name("st")
    result = subprocess.run(
        [str(st), "--config-file", str(tmp_path / "schemathesis.toml"), "run", f"{trainlog_server.url}/api/v1/openapi.json",
         "--url", trainlog_server.url, "--header", f"Authorization: Bearer {admin_key(trainlog_server)}", "--checks", "all", "--exclude-checks", "ensure_resource_availability", "--max-examples", str(EXAMPLES_PER_OPERATION),
         "--seed", str(SEED), "--no-color",
         "--request-timeout", "30", "--suppress-health-check", "all", *no_nul()],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )
    out = result.stdout + result.stderr
    (tmp_path / "schemathesis.log").write_text(out)
    if os.environ.get("TRAINLOG_FUZZ_LOG"):
        Path(os.environ["TRAINLOG_FUZZ_LOG"]).write_text(out)
    summary = out[out.rfind("SUMMARY"):] if "SUMMARY" in out else out[-4000:]
    print(summary)
    generated = re.search(r"(\d+) generated", summary)
    assert generated and int(generated.group(1)) > 0, summary
    failure = out[-20000:] + "\n--- the server's errors ---\n" + server_errors(trainlog_server)
    assert "Server error" not in out, failure
    assert result.returncode == 0, failure


def server_errors(trainlog_server: TrainlogServer) -> str:
    """The server's ERROR lines, which say what an internal error was."""
    return "\n".join(line for line in trainlog_server.log().splitlines() if "ERROR" in line)[-8000:]
