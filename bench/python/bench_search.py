"""Server-side time of one run search answering 1,000 runs, each with 10 params and 5 metric
summaries: through the MLflow routes (`runs/search`) and the native API (`/api/v1/runs/search`),
medians of 15 requests over one kept-alive connection. It asserts nothing.

    .venv/bin/python bench/python/bench_search.py target/release/trainlog
"""
import http.client
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
binary = sys.argv[1]
tmp = tempfile.mkdtemp()
p = subprocess.Popen([binary, "server", "--host", "127.0.0.1", "--port", "0", "--data", tmp + "/d"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
for line in p.stdout:
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
    if m: port = int(m.group(1)); break
c = http.client.HTTPConnection("127.0.0.1", port)
def call(method, path, body=None):
    c.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers={"Content-Type": "application/json"})
    r = c.getresponse(); d = r.read(); assert r.status in (200, 201), (r.status, d[:200]); return d
exp = json.loads(call("POST", "/api/2.0/mlflow/experiments/create", {"name": "s"}))["experiment_id"]
now = int(time.time()*1000)
for i in range(1000):
    rid = json.loads(call("POST", "/api/2.0/mlflow/runs/create", {"experiment_id": exp, "start_time": now + i}))["run"]["info"]["run_id"]
    call("POST", "/api/2.0/mlflow/runs/log-batch", {"run_id": rid, "params": [{"key": f"p{k}", "value": str(i*k)} for k in range(10)],
         "metrics": [{"key": f"m{k}", "value": (i % 97)/97 + k, "timestamp": now, "step": 1} for k in range(5)]})
for name, method, path, body in [("mlflow runs/search", "POST", "/api/2.0/mlflow/runs/search", {"experiment_ids": [exp], "max_results": 1000}),
                                  ("native search", "POST", "/api/v1/runs/search", {"project": "s", "limit": 1000})]:
    t = []
    for _ in range(15):
        s = time.perf_counter(); d = call(method, path, body); t.append(time.perf_counter() - s)
    print(f"{name}: median {statistics.median(t)*1000:.1f} ms, {len(d)/1e3:.0f} KB")
p.terminate(); p.wait()
