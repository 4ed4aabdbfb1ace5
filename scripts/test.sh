#!/usr/bin/env bash
# Runs every test: Rust unit and end-to-end tests (once on SQLite, again on a throwaway
# PostgreSQL cluster), the storage tests again against an S3-compatible server on 127.0.0.1,
# the Python tests (the code blocks of README.md and docs/ among them), the documentation site's
# build and the UI tests, after the lints (rustfmt, clippy, ruff). Installs what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# Each stage's wall time, printed at the end (on failure too), so the cost of every stage shows.
stage_names=()
stage_seconds=()
stage_name=
stage_began=$SECONDS
stage() {
    end_stage
    stage_name=$1
    stage_began=$SECONDS
    echo "== $1"
}
end_stage() {
    if [[ -n "$stage_name" ]]; then
        stage_names+=("$stage_name")
        stage_seconds+=($((SECONDS - stage_began)))
        stage_name=
    fi
}
print_stage_times() {
    end_stage
    echo "== Stage times (wall clock, seconds)"
    for i in "${!stage_names[@]}"; do
        printf '%6d  %s\n' "${stage_seconds[$i]}" "${stage_names[$i]:0:100}"
    done
    printf '%6d  total\n' "$SECONDS"
}

stage "Lint: rustfmt first; clippy (in the background) after the build, ruff once the Python environment is there"
cargo fmt --all -- --check

stage "Python test environments, installed in the background while the Rust code builds"
# .venv: the tests' packages and MkDocs (docs/requirements.txt); .venv-mlflow: MLflow's own server, which the import tests start
# (and bench/python/bench_mlflow_compat.py). Downloading overlaps compiling; the Python stages
# wait for it below.
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
if [[ ! -x .venv-mlflow/bin/python ]]; then
    python3 -m venv .venv-mlflow
fi
pip_log=$(mktemp "${TMPDIR:-/tmp}/trainlog-pip.XXXXXX")
(
    .venv/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt -r docs/requirements.txt
    .venv-mlflow/bin/pip install --quiet --disable-pip-version-check -r tests/python/mlflow-server-requirements.txt
) >"$pip_log" 2>&1 &
pip_pid=$!
wait_for_python() {
    if [[ -n "$pip_pid" ]]; then
        if ! wait "$pip_pid"; then
            cat "$pip_log"
            echo "installing the Python test environments failed" >&2
            exit 1
        fi
        pip_pid=
        cat "$pip_log"
    fi
}

# Waits for a stage run in the background, prints its output, and fails the run if it failed.
finish_background() {
    local what=$1 pid=$2 log=$3 status=0
    wait "$pid" || status=$?
    cat "$log"
    if [[ $status -ne 0 ]]; then
        echo "$what failed" >&2
        exit 1
    fi
}

stage "Tools the tests call (openssl makes a test certificate; curl talks HTTPS to it; the stand-in NVML library)"
if ! command -v openssl >/dev/null || ! command -v curl >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl curl >/dev/null
fi
mkdir -p target/nvml-standin && cc -shared -fPIC -O2 -o target/nvml-standin/libnvidia-ml.so.1 tests/nvml-standin/nvml_standin.c
export TRAINLOG_NVML_STANDIN_DIR="$root/target/nvml-standin"

stage "PostgreSQL: a throwaway cluster on 127.0.0.1 (Debian's package)"
pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/trainlog-pg.XXXXXX")
moto_pid=
clippy_pid=
python_pid=
cleanup() {
    if [[ -n "$moto_pid" ]]; then kill "$moto_pid" 2>/dev/null || true; fi
    for pid in "$pip_pid" "$clippy_pid" "$python_pid"; do
        if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; fi
    done
    scripts/postgres.sh stop "$pg_dir"
    rm -rf "$pg_dir"
    print_stage_times
}
trap cleanup EXIT
TRAINLOG_TEST_PG=$(scripts/postgres.sh start "$pg_dir")
export TRAINLOG_TEST_PG

stage "Build (release, once)"
cargo build --release --workspace --locked

stage "Rust tests (local object store)"
cargo test --release --workspace --locked --no-run
# Clippy (every crate and target, warnings as errors) checks in a target folder of its own, in the
# background: the test stages below mostly wait on servers, so its compiling fills idle cores.
# Its result is read at the end.
clippy_log=$(mktemp "${TMPDIR:-/tmp}/trainlog-clippy.XXXXXX")
(
    began=$SECONDS
    status=0
    CARGO_TARGET_DIR="$root/target/clippy" cargo clippy --workspace --all-targets --locked -- -D warnings || status=$?
    echo "clippy took $((SECONDS - began)) s"
    exit "$status"
) >"$clippy_log" 2>&1 &
clippy_pid=$!
cargo test --release --workspace --locked

stage "The metadata tests and the end-to-end suite again, on PostgreSQL"
TRAINLOG_TEST_META=postgres cargo test --release --locked -p trainlog-meta -p trainlog-tests

stage "Lint: ruff (the Python package), once the Python environment is installed"
wait_for_python
.venv/bin/ruff check client-py/python-source
.venv/bin/ruff format --check client-py/python-source

stage "The documentation site (mkdocs.yml, docs/): built strict, so a broken link or a page missing from nav fails"
docs_site=$(mktemp -d "${TMPDIR:-/tmp}/trainlog-site.XXXXXX")
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$docs_site"
rm -rf "$docs_site"

stage "Python package (maturin, into .venv) and its stubs"
(cd client-py && VIRTUAL_ENV="$root/.venv" "$root/.venv/bin/maturin" develop --release --locked)
.venv/bin/python -m mypy.stubtest trainlog._trainlog
.venv/bin/python -m mypy client-py/python-source/trainlog

stage "The package as users install it: pip install ./client-py, and of its sdist, each in a fresh virtualenv"
# Then the wheel's server serves and a run logs (tests/install). Both builds share target/, whose
# crates cargo reuses (their build keys do not depend on the folder they are built in).
TRAINLOG_INSTALL_TARGET_DIR="$root/target" .venv/bin/pytest tests/install -q

stage "Storage, artifact, registry tests against S3 (moto_server on 127.0.0.1)"
port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
.venv/bin/moto_server -H 127.0.0.1 -p "$port" >"${TMPDIR:-/tmp}/trainlog-moto-$port.log" 2>&1 &
moto_pid=$!
for _ in $(seq 1 150); do
    curl -sf -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.2
done
curl -sf -X PUT "http://127.0.0.1:$port/trainlog-test" -o /dev/null
AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 \
AWS_ENDPOINT="http://127.0.0.1:$port" AWS_ALLOW_HTTP=true \
TRAINLOG_TEST_STORE="s3://trainlog-test/run-$$" \
    cargo test --release --locked --workspace --test storage --test artifacts --test media --test registry --test replicas --test logs \
        --test trust_defects
AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 \
AWS_ENDPOINT="http://127.0.0.1:$port" AWS_ALLOW_HTTP=true \
TRAINLOG_TEST_STORE="s3://trainlog-test/py-$$" TRAINLOG_BIN="$root/target/release/trainlog" \
    .venv/bin/pytest client-py/tests/test_registry.py "client-py/tests/test_examples.py::test_resume_after_preemption_example" -q

stage "Python tests, on SQLite and again on PostgreSQL (the framework trainings once): tests/python beside client-py/tests"
# Two sessions: each folder has its own conftest. pytest.ini (found from both) gives every
# test a timeout, so a hang fails that test instead of holding CI. tests/python includes
# test_docs_snippets.py: every ```python block of README.md and docs/ run against a server.
# The two folders run side by side (their servers take free ports and their databases have
# names of their own); client-py/tests alone starts a Slurm cluster, on fixed ports, so each
# folder's two passes run one after the other.
# On PostgreSQL: the MLflow import reads MLflow and writes only through trainlog's HTTP API, which
# the tests here and the Rust suite already run on PostgreSQL; it runs once. So do the
# documentation's code blocks, which check the pages, not the metadata store.
python_log=$(mktemp "${TMPDIR:-/tmp}/trainlog-pytest.XXXXXX")
(
    TRAINLOG_BIN="$root/target/release/trainlog" .venv/bin/pytest tests/python -q
    TRAINLOG_TEST_META=postgres TRAINLOG_BIN="$root/target/release/trainlog" .venv/bin/pytest tests/python -q -m "not frameworks" \
        --ignore=tests/python/test_mlflow_import.py --ignore=tests/python/test_docs_snippets.py
) >"$python_log" 2>&1 &
python_pid=$!
TRAINLOG_BIN="$root/target/release/trainlog" .venv/bin/pytest client-py/tests -q
# What only the client decides (its accounting, redaction, media encoding, the examples, the
# SkyPilot task) is checked once, above; on PostgreSQL the server's share of it is the Rust suite's.
TRAINLOG_TEST_META=postgres TRAINLOG_BIN="$root/target/release/trainlog" .venv/bin/pytest client-py/tests -q -m "not frameworks" \
    --ignore=client-py/tests/test_client_keeps_everything.py --ignore=client-py/tests/test_redaction.py \
    --ignore=client-py/tests/test_media.py --ignore=client-py/tests/test_examples.py \
    --ignore=client-py/tests/test_sweep_skypilot.py
echo "-- tests/python (run beside the above):"
finish_background "tests/python" "$python_pid" "$python_log"
python_pid=

if [[ -n "${MLFLOW_TESTS:-}" ]]; then
    stage "MLflow's REST test modules against trainlog (a report: counts per module)"
    TRAINLOG_BIN="$root/target/release/trainlog" tests/mlflow_conformance/run.sh "$MLFLOW_TESTS" || true
fi

stage "UI tests in headless Chromium"
if [[ ! -x /usr/bin/chromium ]]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
(cd ui/tests && npm ci --no-audit --no-fund --silent)
(cd ui/tests && TRAINLOG_BIN="$root/target/release/trainlog" node --test --test-timeout=180000 vendor.test.mjs browser.test.mjs media.test.mjs watch.test.mjs workspace.test.mjs logs.test.mjs)

stage "Clippy's result (it ran in the background since the Rust tests; its own time is printed)"
finish_background "clippy" "$clippy_pid" "$clippy_log"
clippy_pid=
