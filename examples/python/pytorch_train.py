"""A PyTorch training loop logged to trainlog: a small MLP on a synthetic classification task.
Uses the GPU when there is one; system metrics (GPU utilisation, memory, power) and cost are
sampled by trainlog itself.

    python examples/python/pytorch_train.py [--epochs 5]
"""

import argparse

import torch
from torch import nn

import trainlog


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--project", default="examples")
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.randn(8192, 32, device=device)
    y = (x[:, :4].sum(dim=1) > 0).long()
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 2)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    config = {"lr": args.lr, "batch": args.batch, "epochs": args.epochs, "device": device, "model": {"hidden": 128}}
    with trainlog.init(project=args.project, name=f"mlp-{device}", config=config, tags=["example", "pytorch"],
                       system_metrics_interval=1.0) as run:
        step = 0
        for epoch in range(args.epochs):
            perm = torch.randperm(len(x), device=device)
            for i in range(0, len(x), args.batch):
                idx = perm[i:i + args.batch]
                loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                run.log({"train/loss": loss, "epoch": epoch}, step=step)  # a 0-d tensor logs as a number
                step += 1
            with torch.no_grad():
                accuracy = (model(x).argmax(dim=1) == y).float().mean()
            run.log({"val/accuracy": accuracy}, step=step)
        print(f"run {run.id} on {device}: accuracy {float(accuracy):.3f}")


if __name__ == "__main__":
    main()
