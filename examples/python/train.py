"""A training loop with no dependency beyond trainlog: fits y = 3x - 2 by gradient descent.

    python examples/python/train.py [--steps 500] [--lr 0.05]
"""

import argparse
import math
import random

import trainlog


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--project", default="examples")
    args = parser.parse_args()

    rng = random.Random(0)
    data = [(x, 3 * x - 2 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(256))]
    w, b = 0.0, 0.0
    with trainlog.init(project=args.project, name=f"linear-lr{args.lr}", config={"lr": args.lr, "model": {"kind": "linear"}},
                       tags=["example"]) as run:
        for step in range(args.steps):
            grad_w = sum(2 * (w * x + b - y) * x for x, y in data) / len(data)
            grad_b = sum(2 * (w * x + b - y) for x, y in data) / len(data)
            w -= args.lr * grad_w
            b -= args.lr * grad_b
            loss = sum((w * x + b - y) ** 2 for x, y in data) / len(data)
            run.log({"train/loss": loss, "params/w": w, "params/b": b, "lr": args.lr}, step=step)
        print(f"run {run.id}: w={w:.3f} b={b:.3f} loss={loss:.5f} (log10 {math.log10(loss):.2f})")


if __name__ == "__main__":
    main()
