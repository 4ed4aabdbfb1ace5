#!/usr/bin/env bash
# Runs MLflow's REST test modules against trainlog. Usage: run.sh [MLFLOW_TESTS_DIR] [pytest args...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
mlflow_tests="${1:-${MLFLOW_TESTS:-/tmp/mlflow-tests}}"
shift || true
python="${MLFLOW_PYTHON:-$repo/.venv-mlflow/bin/python}"
out="${OUT_DIR:-$(mktemp -d)}"
mkdir -p "$out"
cd "$mlflow_tests"
status=0
for module in tests/tracking/test_rest_tracking.py tests/tracking/test_model_registry.py; do
  [ -f "$module" ] || { echo "$module: missing"; continue; }
  name="$(basename "$module" .py)"
  PYTHONPATH="$here:$mlflow_tests" "$python" -m pytest "$module" \
    -p trainlog_plugin -p no:cacheprovider --noconftest --rootdir "$mlflow_tests" \
    --timeout "${TEST_TIMEOUT_S:-60}" -q -rfEs --junitxml "$out/$name.xml" "$@" \
    > "$out/$name.log" 2>&1 || status=1
  "$python" - "$out/$name.xml" "$name" <<'PY'
import sys, xml.etree.ElementTree as ET
s = ET.parse(sys.argv[1]).getroot()
s = s if s.tag == "testsuite" else s.find("testsuite")
t, f, e, k = (int(s.get(a, 0)) for a in ("tests", "failures", "errors", "skipped"))
x = sum(1 for c in s.iter("skipped") if c.get("type") == "pytest.xfail")
print(f"{sys.argv[2]}: passed={t - f - e - k} failed={f} errors={e} skipped={k - x} xfailed={x}")
PY
done
echo "logs and junit xml: $out"
exit $status
