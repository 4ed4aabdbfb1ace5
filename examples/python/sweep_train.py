"""A sweep trial with no dependency beyond trainlog: fits y = 3x - 2 with minibatch SGD whose
hyperparameters come from the sweep (as --key=value arguments). It resumes from its checkpoint
when the sweep restarts it after a preemption, and stops early when the sweep prunes it.

    trainlog sweep run examples/sweep.yaml --project examples --cpu-slots 2
"""

import argparse
import json
import os
import random
import tempfile

import trainlog


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.0)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=27)
    args, _ = parser.parse_known_args()

    rng = random.Random(0)
    data = [(x, 3 * x - 2 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(512))]
    train, val = data[:448], data[448:]
    run = trainlog.init(project="examples", config=vars(args))
    state = {"epoch": -1, "w": 0.0, "b": 0.0, "vw": 0.0, "vb": 0.0}
    latest = run.latest_checkpoint()
    if latest is not None:
        restore = tempfile.mkdtemp()
        trainlog.restore_checkpoint(run.id, restore)
        with open(os.path.join(restore, "state.json")) as f:
            state = json.load(f)
    for epoch in range(state["epoch"] + 1, args.epochs):
        order = list(range(len(train)))
        random.Random(epoch).shuffle(order)
        for start in range(0, len(order), args.batch):
            batch = [train[i] for i in order[start:start + args.batch]]
            grad_w = sum(2 * (state["w"] * x + state["b"] - y) * x for x, y in batch) / len(batch)
            grad_b = sum(2 * (state["w"] * x + state["b"] - y) for x, y in batch) / len(batch)
            state["vw"] = args.momentum * state["vw"] + grad_w
            state["vb"] = args.momentum * state["vb"] + grad_b
            state["w"] -= args.lr * state["vw"]
            state["b"] -= args.lr * state["vb"]
        val_loss = sum((state["w"] * x + state["b"] - y) ** 2 for x, y in val) / len(val)
        run.log({"val/loss": val_loss, "w": state["w"], "b": state["b"]}, step=epoch)
        state["epoch"] = epoch
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump(state, f)
            run.log_checkpoint(folder, step=epoch, keep_last=1)
        if run.should_stop():
            print(f"pruned by the sweep after epoch {epoch}")
            break
    run.finish()


if __name__ == "__main__":
    main()
