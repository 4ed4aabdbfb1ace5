"""The Keras callback: a small MLP trained for a few epochs on random data, each training in a
fresh interpreter (on the JAX and on the PyTorch backend) against the real server, read back
through `trainlog.Api()`: the optimizer's and `fit`'s params, every epoch metric equal to
`history.history`, the batch metrics every n batches, and the run's status after success, an
exception in training, SIGTERM, and a `fit` whose exception its caller caught."""

from __future__ import annotations

import json
import signal

import pytest
import trainlog
from helpers import Server, run_script, spawn_script, wait_for_line

pytestmark = [pytest.mark.timeout(240), pytest.mark.frameworks]

MODEL = """
import json, time
import numpy as np
import keras
from trainlog.integrations.keras import TrainlogCallback

rng = np.random.default_rng(7)
X = rng.normal(size=(320, 8)).astype("float32")
y = (X[:, 0] + 0.5 * X[:, 1] - X[:, 2] > 0).astype("int32")
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile(optimizer=keras.optimizers.Adam(learning_rate=LEARNING_RATE), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])

class Watch(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = []
    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(dict(logs))
    def on_epoch_end(self, epoch, logs=None):
        print("epoch", epoch, flush=True)
        time.sleep(SLEEP)
        if epoch == RAISE_AT:
            raise RuntimeError("out of patience")

def fit(callback, epochs=EPOCHS):
    watch = Watch()
    # 256 examples in batches of 32: 8 batches an epoch.
    history = model.fit(X[:256], y[:256], batch_size=32, epochs=epochs, validation_data=(X[256:], y[256:]),
                        verbose=0, callbacks=[callback, watch])
    return {"epochs": history.history, "batches": watch.batches}
"""


def script(name: str, epochs: int = 4, every: int = 0, raise_at: int = -1, sleep: float = 0.0, after: str = "") -> str:
    head = f"LEARNING_RATE, EPOCHS, RAISE_AT, SLEEP = 0.01, {epochs}, {raise_at}, {sleep}\n"
    train = (
        f"callback = TrainlogCallback(project='keras', name={name!r}, system_metrics_interval=None, "
        f"log_every_n_batches={every})\n"
        'print("RECORDED", json.dumps(fit(callback)), flush=True)\n'
    )
    return head + MODEL + (after or train)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_training_logs_its_params_and_every_epoch_metric(server: Server, client_env: dict, backend: str) -> None:
    done = run_script(script("ok", every=3), {**client_env, "KERAS_BACKEND": backend}, timeout=200)
    assert done.returncode == 0, done.stderr
    recorded = json.loads(done.stdout.split("RECORDED ", 1)[1])
    run = trainlog.Api().runs("keras")[0]
    assert run.status == "finished"
    params = run.params
    # Adam keeps its learning rate in 32 bits; the param is the value that was set.
    assert params["optimizer.learning_rate"] == 0.01 and params["optimizer.name"] == "adam", params
    assert params["optimizer.beta_1"] == 0.9 and params["optimizer.amsgrad"] is False, params
    assert params["fit.epochs"] == 4 and params["fit.steps"] == 8, params
    assert params["model.num_parameters"] == 8 * 8 + 8 + 8 * 2 + 2 == params["model.num_trainable_parameters"]
    assert params["model.loss"] == "sparse_categorical_crossentropy"
    epochs = recorded["epochs"]
    assert set(epochs) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    for key, values in epochs.items():
        history = run.history(key)
        assert [p["step"] for p in history] == list(range(4)), key
        assert [p["value"] for p in history] == pytest.approx(values, rel=1e-6), key
    # 32 batches, logged every 3: after the 3rd, 6th, ..., 30th, with Keras's running means.
    batches = recorded["batches"]
    assert len(batches) == 32
    for key in ("loss", "accuracy"):
        history = run.history(f"batch/{key}")
        assert [p["step"] for p in history] == list(range(3, 31, 3)), key
        expected = [batches[step - 1][key] for step in range(3, 31, 3)]
        assert [p["value"] for p in history] == pytest.approx(expected, rel=1e-6), key
    assert set(run.summary) == set(epochs) | {"batch/loss", "batch/accuracy"}, run.summary


def test_an_exception_in_training_fails_the_run_after_what_it_logged(server: Server, client_env: dict) -> None:
    failed = run_script(script("boom", raise_at=2), {**client_env, "KERAS_BACKEND": "jax"}, timeout=200)
    assert failed.returncode == 1 and "out of patience" in failed.stderr, failed.stderr
    run = trainlog.Api().runs("keras")[0]
    assert run.status == "failed"
    # The callback comes before the one that raises: the failing epoch is logged too.
    assert [p["step"] for p in run.history("val_loss")] == [0, 1, 2]


def test_sigterm_on_a_spot_instance_marks_the_run_preempted(server: Server, client_env: dict) -> None:
    proc = spawn_script(script("spot", epochs=1000, sleep=0.05), {**client_env, "KERAS_BACKEND": "jax", "TRAINLOG_SPOT": "1"})
    try:
        wait_for_line(proc, "epoch 3", timeout=180)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGTERM
    run = trainlog.Api().runs("keras")[0]
    assert run.status == "preempted"
    steps = [p["step"] for p in run.history("loss")]
    assert steps[:4] == list(range(4)) and len(steps) < 1000, steps


JOINED = """
import trainlog
run = trainlog.init(project="joined", name="mine", config={"batch_size": 32}, system_metrics_interval=None)
schedule = keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=10, decay_rate=0.5)
model.compile(optimizer=keras.optimizers.SGD(learning_rate=schedule), loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
fit(TrainlogCallback(), epochs=3)
assert not run.finished, "the callback leaves the run to its owner"
assert trainlog.run is run
run.log({"after": 1.0}, step=100)
run.finish()
"""


def test_without_init_arguments_the_callback_logs_to_the_started_run_and_leaves_it_open(
    server: Server, client_env: dict
) -> None:
    done = run_script(script("", after=JOINED), {**client_env, "KERAS_BACKEND": "jax"}, timeout=200)
    assert done.returncode == 0, done.stderr
    runs = trainlog.Api().runs("joined")
    assert len(runs) == 1 and runs[0].status == "finished"
    run = runs[0]
    params = run.params
    assert params["batch_size"] == 32 and params["optimizer.name"] == "sgd", params
    # A schedule: its configuration, and its value at the start as the learning rate.
    assert params["optimizer.learning_rate_schedule.class_name"] == "ExponentialDecay", params
    assert params["optimizer.learning_rate_schedule.initial_learning_rate"] == 0.05
    assert params["optimizer.learning_rate_schedule.decay_steps"] == 10
    assert params["optimizer.learning_rate"] == 0.05
    # ... and its value at the end of each epoch (8 batches an epoch) as a metric.
    rates = [p["value"] for p in run.history("learning_rate")]
    assert rates == pytest.approx([0.05 * 0.5 ** (8 * (epoch + 1) / 10) for epoch in range(3)], rel=1e-6)
    assert [p["step"] for p in run.history("loss")] == [0, 1, 2]
    assert [p["step"] for p in run.history("after")] == [100]


REFIT = """
callback = TrainlogCallback(project="keras", name="refit", system_metrics_interval=None)
RAISE_AT = 1
try:
    fit(callback)
except RuntimeError:
    pass
RAISE_AT = -1
fit(callback, epochs=3)
"""


def test_a_fit_whose_exception_was_caught_is_failed_when_the_next_fit_starts(server: Server, client_env: dict) -> None:
    done = run_script(script("", after=REFIT), {**client_env, "KERAS_BACKEND": "jax"}, timeout=200)
    assert done.returncode == 0, done.stderr
    runs = sorted(trainlog.Api().runs("keras"), key=lambda r: len(r.history("loss")))
    assert [(r.status, len(r.history("loss"))) for r in runs] == [("failed", 2), ("finished", 3)]
