"""Seeds a trainlog server for the UI benchmark: 10,000 runs in project `many`, and 20 runs of
1,000,000 points each in project `long` (through the Python client, which sends Arrow batches).
Prints the ids of the long runs, comma-separated."""

import math
import sys
from concurrent.futures import ThreadPoolExecutor

import trainlog

server = sys.argv[1]


def small(i: int) -> None:
    with trainlog.init(project="many", name=f"run-{i:05d}", config={"lr": 10 ** -(1 + i % 4), "batch": 32 * (1 + i % 3)},
                       server=server, system_metrics_interval=None, capture_environment=False, capture_code=False, cost=False,
                       handle_sigterm=False) as run:
        run.log({"val_loss": 0.1 + (i * 7919 % 1000) / 1000}, step=0)


with ThreadPoolExecutor(8) as pool:
    list(pool.map(small, range(10_000)))

ids = []
for r in range(20):
    run = trainlog.init(project="long", name=f"long-{r:02d}", config={"lr": 0.001 * (r + 1)}, server=server,
                        system_metrics_interval=None, capture_environment=False, capture_code=False, cost=False, handle_sigterm=False)
    for step in range(1_000_000):
        run.log({"loss": 2 * math.exp(-step / 200_000) + 0.01 * math.sin(step * (r + 1)) + (30 if step == 777_777 else 0)}, step=step)
    run.finish()
    ids.append(run.id)
print(",".join(ids))
