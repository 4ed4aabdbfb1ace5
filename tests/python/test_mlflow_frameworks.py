"""Frameworks' own MLflow integrations pointed at trainlog with `MLFLOW_TRACKING_URI`, unchanged:
Hugging Face's `report_to="mlflow"` (checkpoints as logged models), Lightning's `MLFlowLogger`
(checkpoints as artifacts), `mlflow.keras.autolog()` and `mlflow.xgboost.autolog()` (models,
one registered). Each tiny training runs in a fresh interpreter; what arrived is checked through
trainlog's own API, and each model or checkpoint is loaded back and compared with the trained one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainlog
from conftest import TrainlogServer

pytestmark = [pytest.mark.timeout(300), pytest.mark.frameworks]


def train(server: TrainlogServer, code: str, cwd: Path) -> dict:
    """Runs `code` with MLflow pointed at `server`; answers the JSON it printed after "RESULT"."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TRAINLOG_"))}
    env.update({"MLFLOW_TRACKING_URI": server.url, "HF_HUB_OFFLINE": "1", "KERAS_BACKEND": "torch"})
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])


def steps_and_values(run: trainlog.ApiRun, key: str) -> tuple[list[int], list[float]]:
    history = run.history(key)
    return [p["step"] for p in history], [p["value"] for p in history]


def test_hugging_face_report_to_mlflow(trainlog_server: TrainlogServer, tmp_path: Path) -> None:
    code = """
import json, os
os.environ["HF_MLFLOW_LOG_ARTIFACTS"] = "1"
os.environ["MLFLOW_EXPERIMENT_NAME"] = "door-hf"
import torch, mlflow
torch.manual_seed(0)
torch.set_num_threads(1)
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

logged = []
class Record(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kwargs):
        logged.append([state.global_step, logs])

ids = torch.randint(0, 50, (16, 8), generator=torch.Generator().manual_seed(0))
data = [{"input_ids": row, "labels": row} for row in ids]
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=1, n_embd=16, vocab_size=50, n_positions=8))
args = TrainingArguments(output_dir="out", max_steps=4, logging_steps=1, per_device_train_batch_size=4, use_cpu=True,
                         learning_rate=1e-3, report_to="mlflow", save_steps=4, disable_tqdm=True, run_name="door")
Trainer(model=model, args=args, train_dataset=data, callbacks=[Record()]).train()
run = mlflow.last_active_run()
checkpoint = mlflow.last_logged_model()
version = mlflow.register_model(f"models:/{checkpoint.model_id}", "hf-door")
folder = mlflow.artifacts.download_artifacts(f"models:/hf-door/{version.version}", dst_path="restored")
loaded = GPT2LMHeadModel.from_pretrained(os.path.join(folder, "artifacts", "checkpoint-4"))
same = all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
print("RESULT", json.dumps({"run": run.info.run_id, "logged": logged, "same": same, "model": checkpoint.model_id}))
"""
    result = train(trainlog_server, code, tmp_path)
    assert result["same"], "the registered checkpoint loads back as the trained model"
    run = trainlog.Api(trainlog_server.url).run(result["run"])
    assert run.status == "finished" and run.name == "door"
    # HF logs the arguments and the model config merged, as strings.
    assert run.params["learning_rate"] == "0.001" and run.params["n_layer"] == "1" and run.params["max_steps"] == "4"
    losses = [(step, logs["loss"]) for step, logs in result["logged"] if "loss" in logs]
    steps, values = steps_and_values(run, "loss")
    assert steps == [s for s, _ in losses] == [1, 2, 3, 4]
    assert values == pytest.approx([v for _, v in losses], rel=1e-6)
    files = {a["path"] for a in run.artifacts()}
    assert f"models/{result['model']}/artifacts/checkpoint-4/model.safetensors" in files


def test_lightning_mlflow_logger(trainlog_server: TrainlogServer, tmp_path: Path) -> None:
    code = """
import json, os
import torch, lightning as L
from lightning.pytorch.loggers import MLFlowLogger
torch.manual_seed(0)
torch.set_num_threads(1)

class Regression(L.LightningModule):
    def __init__(self, hidden=8, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
        self.losses = []
    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        self.losses.append([self.global_step, loss.item()])
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
logger = MLFlowLogger(experiment_name="door-lightning", tracking_uri=os.environ["MLFLOW_TRACKING_URI"], log_model=True)
module = Regression()
trainer = L.Trainer(max_epochs=2, logger=logger, accelerator="cpu", enable_progress_bar=False, log_every_n_steps=1,
                    default_root_dir="out", enable_model_summary=False)
trainer.fit(module, data)
import mlflow
ckpt = [a.path for a in mlflow.MlflowClient().list_artifacts(logger.run_id, "epoch=1-step=8") if a.path.endswith(".ckpt")][0]
local = mlflow.artifacts.download_artifacts(run_id=logger.run_id, artifact_path=ckpt, dst_path="restored")
loaded = Regression.load_from_checkpoint(local)
same = all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), module.state_dict().values()))
print("RESULT", json.dumps({"run": logger.run_id, "losses": module.losses, "same": same, "ckpt": ckpt}))
"""
    result = train(trainlog_server, code, tmp_path)
    assert result["same"], "the uploaded checkpoint loads back as the trained module"
    run = trainlog.Api(trainlog_server.url).run(result["run"])
    assert run.status == "finished"
    assert (run.params["hidden"], run.params["lr"]) == ("8", "0.05")
    # Lightning logs a training step's metrics at the step count after the optimizer's step.
    steps, values = steps_and_values(run, "train_loss")
    assert len(steps) == 8 and steps == sorted(steps)
    assert values == pytest.approx([v for _, v in result["losses"]], rel=1e-6)
    assert result["ckpt"] in {a["path"] for a in run.artifacts()}


def test_keras_autolog(trainlog_server: TrainlogServer, tmp_path: Path) -> None:
    code = """
import json
import numpy as np, keras, mlflow, mlflow.keras
keras.utils.set_random_seed(0)
mlflow.set_experiment("door-keras")
mlflow.keras.autolog()
rng = np.random.default_rng(0)
X = rng.normal(size=(128, 4)).astype("float32")
y = (X[:, 0] > 0).astype("float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"])
with mlflow.start_run() as run:
    history = model.fit(X, y, epochs=3, batch_size=32, validation_split=0.25, verbose=0)
logged = mlflow.last_logged_model()
loaded = mlflow.keras.load_model(f"models:/{logged.model_id}")
same = bool(np.allclose(loaded.predict(X, verbose=0), model.predict(X, verbose=0)))
print("RESULT", json.dumps({"run": run.info.run_id, "history": history.history, "same": same, "model": logged.model_id}))
"""
    result = train(trainlog_server, code, tmp_path)
    assert result["same"], "the logged model loads back and predicts as the trained one"
    run = trainlog.Api(trainlog_server.url).run(result["run"])
    assert run.status == "finished"
    assert run.params["epochs"] == "3" and run.params["batch_size"] == "32" and run.params["optimizer_name"] == "adam"
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        steps, values = steps_and_values(run, key)
        assert steps == [0, 1, 2], key
        assert values == pytest.approx(result["history"][key], rel=1e-6), key
    assert f"models/{result['model']}/data/model.keras" in {a["path"] for a in run.artifacts()}


def test_xgboost_autolog_registers_a_model_that_loads_back(trainlog_server: TrainlogServer, tmp_path: Path) -> None:
    code = """
import json
import numpy as np, xgboost, mlflow, mlflow.xgboost
rng = np.random.default_rng(7)
X = rng.normal(size=(300, 5))
y = (X[:, 0] - X[:, 1] > 0).astype(int)
mlflow.set_experiment("door-xgb")
mlflow.xgboost.autolog(registered_model_name="xgb-door", importance_types=[])
dtrain, dvalid = xgboost.DMatrix(X[:200], label=y[:200]), xgboost.DMatrix(X[200:], label=y[200:])
recorded = {}
with mlflow.start_run() as run:
    booster = xgboost.train({"objective": "binary:logistic", "eta": 0.3, "max_depth": 2}, dtrain, 10,
                            evals=[(dvalid, "valid")], evals_result=recorded, verbose_eval=False)
loaded = mlflow.xgboost.load_model("models:/xgb-door/1")
same = bool(np.allclose(loaded.predict(dvalid), booster.predict(dvalid)))
print("RESULT", json.dumps({"run": run.info.run_id, "logloss": recorded["valid"]["logloss"], "same": same}))
"""
    result = train(trainlog_server, code, tmp_path)
    assert result["same"], "version 1 of the registered model loads back and predicts as the trained booster"
    api = trainlog.Api(trainlog_server.url)
    run = api.run(result["run"])
    assert run.status == "finished"
    assert run.params["eta"] == "0.3" and run.params["max_depth"] == "2" and run.params["num_boost_round"] == "10"
    steps, values = steps_and_values(run, "valid-logloss")
    assert steps == list(range(10))
    assert values == pytest.approx(result["logloss"], rel=1e-6)
    [version] = api.model("xgb-door").versions()
    assert version.run_id == run.id
