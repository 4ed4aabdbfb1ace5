"""The Lightning logger: a small MLP trained for a few epochs on this CPU, each training in a
fresh interpreter against the real server, read back through `trainlog.Api()`: the module's
saved hyperparameters, every metric at every step equal to what Lightning handed its loggers,
every checkpoint file at its step, and the run's status after success, an exception in
training, SIGTERM (trainlog's handler, and Lightning's own) or Ctrl-C, and a run started by its
owner; and a checkpoint the server cannot record while it is down."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import trainlog
from helpers import Server, gpu, run_script, spawn_script, wait_for_line, write_gpus

pytestmark = [pytest.mark.timeout(240), pytest.mark.frameworks]

# RAISE_AT, SLEEP, EPOCHS, LOGGER (the TrainlogLogger expression) and TEST are set before this.
TRAINING = """
import json, time
import torch
torch.set_num_threads(1)
import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import Logger
from trainlog.integrations.lightning import TrainlogLogger

torch.manual_seed(0)
X = torch.randn(96, 4)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [0.0]]) + 0.1 * torch.randn(96, 1)
loader = lambda a, b: torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X[a:b], Y[a:b]), batch_size=16)


class MLP(L.LightningModule):
    def __init__(self, hidden=8, lr=0.05, optimizer={"name": "sgd", "momentum": 0.9}, scheduler=None):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

    def training_step(self, batch, index):
        if self.global_step == RAISE_AT:
            raise RuntimeError("the loss diverged")
        print("step", self.global_step, flush=True)
        time.sleep(SLEEP)
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, index):
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))

    def test_step(self, batch, index):
        self.log("test_loss", torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))

    def configure_optimizers(self):
        opt = self.hparams.optimizer
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=opt["momentum"])


class Recorder(Logger):
    # What Lightning hands its loggers, printed as it comes (a killed process keeps its lines).
    name, version = "recorder", "0"

    def log_metrics(self, metrics, step=None):
        print("LOGGED", json.dumps({"step": step, "metrics": {k: float(v) for k, v in metrics.items()}}), flush=True)

    def log_hyperparams(self, params, *args, **kwargs):
        pass


logger = LOGGER
checkpoints = ModelCheckpoint(save_top_k=-1, save_last=True)
trainer = L.Trainer(accelerator="cpu", max_epochs=EPOCHS, logger=[logger, Recorder()], callbacks=[checkpoints],
                    enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
                    default_root_dir=ROOT)
model = MLP()
trainer.fit(model, loader(0, 64), loader(64, 96))
assert logger.experiment.finished == bool(logger.init_kwargs)
if TEST:
    trainer.test(model, loader(64, 96))
print("RUN", logger.version, flush=True)
print("CHECKPOINTS", json.dumps(sorted(os.listdir(checkpoints.dirpath))), flush=True)
"""


def script(root: str, logger: str, raise_at: int = -1, sleep: float = 0.0, epochs: int = 3, test: bool = False) -> str:
    head = f"import os\nROOT, RAISE_AT, SLEEP, EPOCHS, TEST = {root!r}, {raise_at}, {sleep}, {epochs}, {test}\n"
    # Ctrl-C raises KeyboardInterrupt even when the tests run where SIGINT is ignored (a job a
    # shell started in the background inherits that, and Python then keeps it ignored).
    head += "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    return head + TRAINING.replace("LOGGER", logger)


def owned(project: str, name: str, extra: str = "") -> str:
    return f"TrainlogLogger(project={project!r}, name={name!r}, system_metrics_interval=None{extra})"


def logged(stdout: str) -> Dict[str, Dict[int, float]]:
    """Each metric's value at each step, as Lightning handed them to its loggers (the last
    value at a step wins, as on the server)."""
    series: Dict[str, Dict[int, float]] = {}
    for line in stdout.splitlines():
        if line.startswith("LOGGED "):
            point = json.loads(line[len("LOGGED ") :])
            for key, value in point["metrics"].items():
                series.setdefault(key, {})[point["step"]] = value
    return series


def stored(run: Any, key: str) -> List[Tuple[int, float]]:
    return [(p["step"], p["value"]) for p in run.history(key)]


def assert_every_metric_arrived(run: Any, expected: Dict[str, Dict[int, float]]) -> None:
    for key, points in expected.items():
        # The same floats: Lightning's values are printed with every digit and stored as f64.
        assert stored(run, key) == sorted(points.items()), key


def test_a_training_logs_its_params_metrics_and_checkpoints(server: Server, client_env: dict, tmp_path: Path) -> None:
    done = run_script(script(str(tmp_path), owned("mlp", "ok"), test=True), client_env, timeout=200)
    assert done.returncode == 0, done.stderr
    run = trainlog.Api().runs("mlp")[0]
    assert (run.status, run.name, run.id) == ("finished", "ok", done.stdout.split("RUN ", 1)[1].split()[0])
    params = run.params
    assert (params["hidden"], params["lr"], params["scheduler"]) == (8, 0.05, "None")
    assert (params["optimizer.name"], params["optimizer.momentum"]) == ("sgd", 0.9)

    expected = logged(done.stdout)
    assert set(expected) == {"train_loss", "val_loss", "test_loss", "epoch"}
    # 4 batches an epoch, 3 epochs: a training loss at every step, a validation loss after each epoch.
    assert sorted(expected["train_loss"]) == list(range(12)) and sorted(expected["val_loss"]) == [3, 7, 11]
    assert_every_metric_arrived(run, expected)
    # The test after the fit reopened the run, logged at the last step, and finished it again.
    assert [p[0] for p in stored(run, "test_loss")] == [12]

    # Every epoch's file at its step (`last.ckpt`, saved at the same steps, holds the same state).
    files = json.loads(done.stdout.split("CHECKPOINTS ", 1)[1].splitlines()[0])
    assert files == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt", "last.ckpt"]
    checkpoints = sorted(run.checkpoints(), key=lambda c: c["step"])
    assert [c["step"] for c in checkpoints] == [4, 8, 12]
    for c, file in zip(checkpoints, files):
        assert c["metadata"]["framework"] == "lightning" and c["metadata"]["file"] == file
        assert os.path.isfile(c["metadata"]["local_path"]) and c["files"] == []


def test_an_exception_in_training_fails_the_run(server: Server, client_env: dict, tmp_path: Path) -> None:
    failed = run_script(script(str(tmp_path), owned("mlp", "boom"), raise_at=6), client_env, timeout=200)
    assert failed.returncode == 1 and "the loss diverged" in failed.stderr, failed.stderr
    run = trainlog.Api().runs("mlp")[0]
    assert run.status == "failed"
    expected = logged(failed.stdout)
    assert sorted(expected["train_loss"]) == list(range(6))
    assert_every_metric_arrived(run, expected)
    assert [c["step"] for c in run.checkpoints()] == [4]


@pytest.mark.parametrize(
    ("handler", "sent", "spot", "returncode", "status"),
    [
        # On a spot instance trainlog's handler marks the run preempted, then the process dies of SIGTERM.
        ("trainlog", signal.SIGTERM, "1", -signal.SIGTERM, "preempted"),
        # Without it (handle_sigterm=False), Lightning's own stops the training after the batch;
        # on an on-demand machine nothing says it was a preemption: someone stopped it.
        ("lightning", signal.SIGTERM, "0", 0, "killed"),
        # Ctrl-C: Lightning stops the training and exits with 1.
        ("lightning", signal.SIGINT, "0", 1, "killed"),
    ],
    ids=["sigterm-spot-trainlog", "sigterm-lightning", "ctrl-c"],
)
def test_a_signal_during_training_ends_the_run_as_what_it_means(
    server: Server, client_env: dict, tmp_path: Path, handler: str, sent: int, spot: str, returncode: int, status: str
) -> None:
    extra = "" if handler == "trainlog" else ", handle_sigterm=False"
    env = {**client_env, "TRAINLOG_SPOT": spot}
    proc = spawn_script(script(str(tmp_path), owned("mlp", "spot", extra), sleep=0.05, epochs=1000), env)
    wait_for_line(proc, "step 6", timeout=180)
    proc.send_signal(sent)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == returncode, stderr
    run = trainlog.Api().runs("mlp")[0]
    assert run.status == status
    steps = [p[0] for p in stored(run, "train_loss")]
    assert steps[:6] == list(range(6)) and len(steps) < 100, steps
    assert [c["step"] for c in run.checkpoints()] == [4]


def test_without_init_arguments_the_logger_writes_to_the_started_run_and_leaves_it_open(
    server: Server, client_env: dict, tmp_path: Path
) -> None:
    code = "import trainlog\n"
    code += "run = trainlog.init(project='joined', name='mine', config={'seed': 1}, system_metrics_interval=None)\n"
    code += script(str(tmp_path), "TrainlogLogger(upload_checkpoints=True)", epochs=2)
    code += "assert not run.finished, 'the logger leaves the run to its owner'\n"
    code += "run.log({'after': 1.0}, step=100)\nrun.finish()\n"
    done = run_script(code, client_env, timeout=200)
    assert done.returncode == 0, done.stderr
    runs = trainlog.Api().runs("joined")
    assert len(runs) == 1 and runs[0].status == "finished" and runs[0].name == "mine"
    run = runs[0]
    assert run.params["seed"] == 1 and run.params["hidden"] == 8
    assert_every_metric_arrived(run, logged(done.stdout))
    assert stored(run, "after") == [(100, 1.0)]
    # Uploaded: each checkpoint holds its file.
    checkpoints = sorted(run.checkpoints(), key=lambda c: c["step"])
    assert [c["step"] for c in checkpoints] == [4, 8]
    assert [[f["path"] for f in c["files"]] for c in checkpoints] == [["epoch=0-step=4.ckpt"], ["epoch=1-step=8.ckpt"]]


def test_a_checkpoint_that_cannot_be_recorded_leaves_the_training_going(
    server: Server, client_env: dict, tmp_path: Path
) -> None:
    from types import SimpleNamespace

    from trainlog.integrations.lightning import TrainlogLogger

    logger = TrainlogLogger(project="mlp", name="outage", system_metrics_interval=None)
    logger.log_metrics({"train_loss": 1.0}, step=3)
    first, second = tmp_path / "epoch=0-step=4.ckpt", tmp_path / "epoch=1-step=8.ckpt"
    first.write_bytes(b"weights")
    port = server.port
    server.stop()
    logger.after_save_checkpoint(SimpleNamespace(last_model_path="", best_model_path=str(first), best_k_models={}))
    assert [path for path, _ in logger.checkpoint_errors] == [str(first)]
    server.start(port)
    second.write_bytes(b"weights")
    saved = {"last_model_path": "", "best_model_path": str(second), "best_k_models": {}}
    logger.after_save_checkpoint(SimpleNamespace(**saved, _last_global_step_saved=8))
    logger.finalize("success")
    run = trainlog.Api().runs("mlp")[0]
    assert run.status == "finished" and len(logger.checkpoint_errors) == 1
    assert [(c["step"], c["metadata"]["file"]) for c in run.checkpoints()] == [(8, second.name)]


FLOPS_TRAINING = """
import torch
torch.set_num_threads(1)
# The stand-in NVML shows torch a GPU this machine does not have; the training runs on the CPU.
torch.cuda.is_available = lambda: False
import lightning as L
from lightning.fabric.utilities.throughput import measure_flops
from trainlog.integrations.lightning import TrainlogFlops, TrainlogLogger

torch.manual_seed(0)
X, Y = torch.randn(64, 32), torch.randn(64, 1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=16)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        with torch.device("meta"):
            meta = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
            x = torch.randn(16, 32)
        self.flops_per_batch = measure_flops(meta, lambda: meta(x), lambda y: y.sum())
        print("FLOPS_PER_BATCH", self.flops_per_batch, flush=True)

    def training_step(self, batch, index):
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


trainer = L.Trainer(accelerator="cpu", max_epochs=2, enable_progress_bar=False, enable_model_summary=False,
                    enable_checkpointing=False, log_every_n_steps=2, default_root_dir=ROOT,
                    logger=TrainlogLogger(project="pl-mfu", system_metrics_interval=None),
                    callbacks=[TrainlogFlops()])
trainer.fit(Net(), loader)
"""


def test_lightning_flops_give_the_run_its_mfu_against_the_gpus_peak(
    server: Server, client_env: dict, tmp_path: Path, standin_dir: Path
) -> None:
    # The stand-in NVML shows the process one H100 (989.4 dense BF16 TFLOPS in the peak file).
    gpus = tmp_path / "gpus.txt"
    write_gpus(gpus, [gpu("NVIDIA H100 80GB HBM3", 0)])
    env = {**client_env, "LD_LIBRARY_PATH": str(standin_dir), "TRAINLOG_NVML_STANDIN": str(gpus)}
    done = run_script(f"ROOT = {str(tmp_path)!r}\n" + FLOPS_TRAINING, env, timeout=200)
    assert done.returncode == 0, done.stderr
    per_batch = float(done.stdout.split("FLOPS_PER_BATCH ", 1)[1].split()[0])
    # A batch of 16 through 32→64→1: forward 2·16·(32·64 + 64·1) FLOPs; backward the weights'
    # gradients (as much again) and the hidden activations' (2·16·64·1), not the input's.
    forward = 2 * 16 * (32 * 64 + 64 * 1)
    assert per_batch == 2 * forward + 2 * 16 * 64 * 1 == 137_216
    [run] = trainlog.Api().runs("pl-mfu")
    full = trainlog.Api().run(run.id)
    # 4 batches an epoch, 2 epochs, one process: logged every 2 steps and at the end.
    flops = {p["step"]: p["value"] for p in run.history("flops")}
    assert flops == {step: per_batch * step for step in (2, 4, 6, 8)}
    [process] = full.attempts[0]["processes"]
    for point in run.history("mfu"):
        seconds = (point["timestamp"] - process["start_time"]) / 1000
        assert point["value"] == pytest.approx(flops[point["step"]] / (989.4e12 * seconds), rel=1e-9)
    assert [p["step"] for p in run.history("mfu")] == [2, 4, 6, 8]
