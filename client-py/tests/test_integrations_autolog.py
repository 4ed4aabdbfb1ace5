"""`trainlog.autolog()`: frameworks imported before it (Transformers) and after it (XGBoost,
LightGBM, Keras, Lightning, Accelerate) log through trainlog's integrations without any change to
the training code (the scikit-learn estimators of XGBoost and LightGBM included), and
`autolog(disable=True)` puts them back."""

from __future__ import annotations

import pytest

import trainlog
from helpers import Server, run_script

pytestmark = [pytest.mark.timeout(300), pytest.mark.frameworks]

SCRIPT = """
import os
os.environ["HF_HUB_OFFLINE"] = "1"
import numpy as np
import torch
torch.set_num_threads(1)
import transformers  # imported before autolog: its Trainer is patched when it loads
import trainlog
trainlog.autolog(project="auto", system_metrics_interval=None)

import xgboost, lightgbm  # imported after autolog
rng = np.random.default_rng(7)
X = rng.normal(size=(300, 5))
y = (X[:, 0] - X[:, 1] > 0).astype(int)
xgboost.XGBClassifier(n_estimators=8, max_depth=2).fit(X[:200], y[:200], eval_set=[(X[200:], y[200:])], verbose=False)
lightgbm.LGBMClassifier(n_estimators=6, verbose=-1).fit(X[:200], y[:200], eval_set=[(X[200:], y[200:])])
assert trainlog.run is None or trainlog.run.finished

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
ids = torch.randint(0, 50, (16, 8), generator=torch.Generator().manual_seed(0))
data = [{"input_ids": row, "labels": row} for row in ids]
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=16, vocab_size=50, n_positions=8))
args = TrainingArguments(output_dir=OUT, max_steps=4, logging_steps=1, per_device_train_batch_size=4, use_cpu=True,
                         report_to="none", save_strategy="no", disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=data).train()

os.environ["KERAS_BACKEND"] = "torch"
import keras
net = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
net.compile(optimizer="sgd", loss="mse")
net.fit(X.astype("float32"), y.astype("float32"), epochs=2, verbose=0)

import lightning as L
class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(5, 1)
    def training_step(self, batch, i):
        loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        self.log("fit_loss", loss)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 5), torch.randn(32, 1)), batch_size=8)
L.Trainer(max_epochs=1, accelerator="cpu", enable_progress_bar=False, log_every_n_steps=1, enable_checkpointing=False,
          default_root_dir=OUT).fit(Module(), loader)

from accelerate import Accelerator
accelerator = Accelerator(cpu=True)
accelerator.init_trackers("ignored-by-autolog-kwargs")
accelerator.log({"acc_loss": 0.5}, step=0)
accelerator.end_training()

trainlog.autolog(disable=True)
xgboost.XGBClassifier(n_estimators=3).fit(X, y, eval_set=[(X, y)], verbose=False)
Trainer(model=model, args=args, train_dataset=data).train()
net.fit(X.astype("float32"), y.astype("float32"), epochs=1, verbose=0)
print("DONE", flush=True)
"""


def test_autolog_logs_frameworks_imported_before_and_after_it_and_is_undone(server: Server, client_env: dict, tmp_path) -> None:
    done = run_script(f"OUT = {str(tmp_path / 'out')!r}\n" + SCRIPT, client_env, timeout=240)
    assert done.returncode == 0 and "DONE" in done.stdout, done.stderr
    runs = trainlog.Api().runs("auto")
    assert len(runs) == 6, [sorted(r.params)[:3] for r in runs]
    assert {r.status for r in runs} == {"finished"}
    by_kind = {}
    for run in runs:
        keys = set(run.params) | set(run.summary)
        kind = next(k for k, marker in KINDS.items() if any(key.startswith(marker) for key in keys))
        by_kind[kind] = run
    assert set(by_kind) == set(KINDS)
    assert [p["step"] for p in by_kind["xgboost"].history("validation_0/logloss")] == list(range(8))
    assert [p["step"] for p in by_kind["lightgbm"].history("valid_0/binary_logloss")] == list(range(6))
    assert [p["step"] for p in by_kind["hf"].history("train/loss")] == [1, 2, 3, 4]
    assert by_kind["hf"].params["args.max_steps"] == 4
    assert [p["step"] for p in by_kind["keras"].history("loss")] == [0, 1]
    assert len(by_kind["lightning"].history("fit_loss")) == 4
    assert [p["value"] for p in by_kind["accelerate"].history("acc_loss")] == [0.5]


#: How each framework's run is told apart: a param or metric key only it has.
KINDS = {
    "xgboost": "xgboost.",
    "lightgbm": "lightgbm.",
    "hf": "args.",
    "keras": "optimizer.",
    "lightning": "fit_loss",
    "accelerate": "acc_loss",
}
