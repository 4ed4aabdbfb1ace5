"""Benchmark of trainlog's TPE against Optuna's TPESampler: the best value found after 100 and 200
trials on Branin (2-D) and Hartmann6 (6-D), median over seeds 0..4, with the per-seed values.

    .venv/bin/python bench/sweep/bench_tpe.py [--seeds 5] [--trials 200] [--tpe-flags="..."]

Both samplers run sequentially (one suggestion, then its evaluation, then the next suggestion),
with the same budget and their default settings (Optuna: `TPESampler(seed=s)`). trainlog's side is
the `tpe_trace` example of trainlog-sweep, built in release mode first; `--tpe-flags` passes extra
flags to it (e.g. `--tpe-flags=--optuna-settings`). It prints figures only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import optuna

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "target" / "release" / "examples" / "tpe_trace"

GLOBAL_MINIMUM = {"branin": 0.397887, "hartmann6": -3.32237}

HARTMANN6_ALPHA = [1.0, 1.2, 3.0, 3.2]
HARTMANN6_A = [
    [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
    [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
    [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
    [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
]
HARTMANN6_P = [
    [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
    [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
    [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
    [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
]


def branin(x1: float, x2: float) -> float:
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def hartmann6(x: list[float]) -> float:
    return -sum(
        alpha * math.exp(-sum(a * (xj - p) ** 2 for a, xj, p in zip(row_a, x, row_p)))
        for alpha, row_a, row_p in zip(HARTMANN6_ALPHA, HARTMANN6_A, HARTMANN6_P)
    )


def optuna_trace(function: str, seed: int, trials: int) -> list[float]:
    """Best value so far after each trial of Optuna's TPESampler with its default settings."""
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    if function == "branin":
        objective = lambda t: branin(t.suggest_float("x1", -5, 10), t.suggest_float("x2", 0, 15))
    else:
        objective = lambda t: hartmann6([t.suggest_float(f"x{i}", 0, 1) for i in range(1, 7)])
    study.optimize(objective, n_trials=trials)
    best, trace = math.inf, []
    for trial in study.trials:
        best = min(best, trial.value)
        trace.append(best)
    return trace


def trainlog_trace(function: str, seed: int, trials: int, flags: list[str]) -> list[float]:
    """Best value so far after each trial of trainlog's TPE (the tpe_trace example)."""
    command = [str(TRACE), "--function", function, "--seed", str(seed), "--trials", str(trials), *flags]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return [json.loads(line)["best"] for line in output.splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    parser.add_argument("--trials", type=int, default=200, help="trials per run (default 200)")
    parser.add_argument("--tpe-flags", default="", help="extra flags for tpe_trace")
    args = parser.parse_args()
    checkpoints = [n for n in (100, 200) if n <= args.trials] or [args.trials]

    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "trainlog-sweep", "--example", "tpe_trace"], cwd=REPO, check=True
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    seeds = list(range(args.seeds))
    flags = shlex.split(args.tpe_flags)

    results: dict[tuple[str, str], list[list[float]]] = {}
    seconds: dict[str, float] = {"trainlog": 0.0, "optuna": 0.0}
    for function in GLOBAL_MINIMUM:
        for sampler in ("trainlog", "optuna"):
            started = time.perf_counter()
            results[(function, sampler)] = [
                trainlog_trace(function, seed, args.trials, flags)
                if sampler == "trainlog"
                else optuna_trace(function, seed, args.trials)
                for seed in seeds
            ]
            seconds[sampler] += time.perf_counter() - started

    extra = f", tpe_trace flags `{args.tpe_flags}`" if args.tpe_flags else ""
    print(
        f"## TPE: trainlog-sweep vs Optuna {optuna.__version__} TPESampler (defaults), "
        f"best value found, median over seeds {seeds[0]}..{seeds[-1]}{extra}\n"
    )
    print(
        "| function | trials | median best (trainlog) | median best (Optuna) | global minimum "
        "| seeds where trainlog is better |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for function, minimum in GLOBAL_MINIMUM.items():
        for n in checkpoints:
            ours = [trace[n - 1] for trace in results[(function, "trainlog")]]
            theirs = [trace[n - 1] for trace in results[(function, "optuna")]]
            wins = sum(a < b for a, b in zip(ours, theirs))
            print(
                f"| {function} | {n} | {statistics.median(ours):.6f} | {statistics.median(theirs):.6f} "
                f"| {minimum} | {wins}/{len(seeds)} |"
            )

    print("\n### Per seed: best value after N trials (trainlog / Optuna)\n")
    columns = [(function, n) for function in GLOBAL_MINIMUM for n in checkpoints]
    print("| seed | " + " | ".join(f"{function} @{n}" for function, n in columns) + " |")
    print("|---:|" + "---|" * len(columns))
    for i, seed in enumerate(seeds):
        cells = [
            f"{results[(function, 'trainlog')][i][n - 1]:.6f} / {results[(function, 'optuna')][i][n - 1]:.6f}"
            for function, n in columns
        ]
        print(f"| {seed} | " + " | ".join(cells) + " |")
    print(
        f"\nWall time: trainlog {seconds['trainlog']:.1f} s, Optuna {seconds['optuna']:.1f} s "
        f"({len(seeds) * len(GLOBAL_MINIMUM)} runs of {args.trials} trials each).",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
