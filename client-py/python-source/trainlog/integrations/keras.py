"""Keras 3 (any backend): `model.fit(..., callbacks=[TrainlogCallback()])`.

At the start of training, as params: the optimizer's configuration under `optimizer.`
(`optimizer.name`, `optimizer.learning_rate`, `optimizer.beta_1`, ...; a learning-rate schedule's
configuration under `optimizer.learning_rate_schedule.`, with `optimizer.learning_rate` its value
at the start), what `fit` tells its callbacks under `fit.` (`fit.epochs`, `fit.steps` per epoch,
`fit.verbose`), `model.num_parameters`, `model.num_trainable_parameters` and `model.loss`.

Every epoch's logs under the names Keras gives them (`loss`, `accuracy`, `val_loss`, ...), as in
`history.history`, at step = the epoch's index (0-based, as `on_epoch_end` counts it, so
`initial_epoch` continues the series); with a schedule, also the `learning_rate` at the epoch's end.
With `log_every_n_batches=n`, the training logs of every n-th batch (Keras's running means over
the epoch so far) under `batch/{name}` (`batch/loss`), at step = the number of batches trained.
Only numbers are logged.

The run the callback starts is finished when training ends (early stopping included). Keras tells
callbacks nothing of an exception: a `fit` that raises leaves the run to trainlog's process hooks
("failed" on an uncaught exception, "preempted" on SIGTERM), or to the callback's next `fit`,
which marks it "failed" before it starts another.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional

import keras  # type: ignore[import-untyped]
import numpy

from trainlog._run import Run
from trainlog.integrations._attach import attach, flatten


class TrainlogCallback(keras.callbacks.Callback):
    """Logs a `model.fit`'s params and metrics to a trainlog run.

    - `log_every_n_batches`: also log the training logs every n batches (0, the default: epochs only).
    - The other keyword arguments are `trainlog.init`'s: each `fit` starts a run with them and
      finishes it when training ends. Without them the callback logs to `trainlog.run` when one
      is started (and leaves it to its owner), else starts a run.
    """

    def __init__(self, log_every_n_batches: int = 0, **init_kwargs: Any) -> None:
        super().__init__()
        if log_every_n_batches < 0:
            raise ValueError("log_every_n_batches must be 0 (epochs only) or more")
        self.log_every_n_batches = log_every_n_batches
        self.init_kwargs = init_kwargs
        self.run: Optional[Run] = None
        self._owned = False
        self._epoch_start = 0
        self._batches = 0
        self._steps: Optional[int] = None
        self._schedule = False
        # Keras calls batch hooks from a thread pool unless a callback needs them in order; this
        # one only does when it logs batches.
        self.async_safe = log_every_n_batches == 0

    def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
        previous = self.run
        if previous is not None and self._owned and not previous.finished:
            # The previous `fit` raised an exception that its caller caught.
            previous.finish("failed", reason="fit did not complete")
        self.run, self._owned = attach(self.init_kwargs)
        self._batches = self._epoch_start = 0
        params: Dict[str, Any] = {}
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            params.update(self._optimizer_params(optimizer))
        flatten("fit", {k: v for k, v in (self.params or {}).items() if not callable(v)}, params)
        params.update(self._model_params())
        self.run.log_params(params)

    def on_epoch_begin(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        steps = (self.params or {}).get("steps")
        self._steps = steps if isinstance(steps, int) and steps > 0 else None
        # A resumed `fit(initial_epoch=...)` counts the batches of the epochs before it.
        if self._steps is not None:
            self._batches = epoch * self._steps
        self._epoch_start = self._batches

    def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        n = self.log_every_n_batches
        if n == 0 or self.run is None:
            return
        # Under `steps_per_execution`, one call for several batches, the last one past the epoch's end.
        done = batch + 1 if self._steps is None else min(batch + 1, self._steps)
        before, self._batches = self._batches, self._epoch_start + done
        # Log when a multiple of n was reached or passed.
        if self._batches // n > before // n:
            values = _numbers(logs)
            if values:
                self.run.log({f"batch/{k}": v for k, v in values.items()}, step=self._batches)

    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        if self.run is None:
            return
        values = _numbers(logs)
        if self._schedule and "learning_rate" not in values:
            rate = _learning_rate(self.model.optimizer)
            if rate is not None:
                values["learning_rate"] = rate
        if values:
            self.run.log(values, step=epoch)

    def on_train_end(self, logs: Optional[Dict[str, Any]] = None) -> None:
        if self.run is not None and self._owned:
            self.run.finish()

    def _optimizer_params(self, optimizer: Any) -> Dict[str, Any]:
        try:
            config = dict(optimizer.get_config())
        except Exception:  # noqa: BLE001 (a custom optimizer's config must not stop training)
            config = {}
        rate = config.pop("learning_rate", None)
        params: Dict[str, Any] = {}
        self._schedule = isinstance(rate, Mapping)
        if isinstance(rate, Mapping):
            # A schedule, as Keras serializes it: its class and its own configuration.
            inner = rate.get("config")
            inner = inner if isinstance(inner, Mapping) else {"config": inner}
            schedule = {"class_name": rate.get("class_name"), **inner}
            flatten("optimizer.learning_rate_schedule", schedule, params)
            rate = _learning_rate(optimizer)
        flatten("optimizer", config, params)
        if isinstance(rate, (int, float)):
            params["optimizer.learning_rate"] = _shortest(float(rate))
        return {k: _shortest(v) if isinstance(v, float) else v for k, v in params.items()}

    def _model_params(self) -> Dict[str, Any]:
        model = self.model
        params: Dict[str, Any] = {}
        try:
            params["model.num_parameters"] = int(model.count_params())
            params["model.num_trainable_parameters"] = int(sum(math.prod(w.shape) for w in model.trainable_weights))
        except Exception:  # noqa: BLE001 (a model not built yet has no count)
            params = {}
        loss = getattr(model, "loss", None)
        if isinstance(loss, Mapping):
            params.update({f"model.loss.{k}": _name(v) for k, v in loss.items()})
        elif isinstance(loss, (list, tuple)):
            params["model.loss"] = ", ".join(_name(v) for v in loss)
        elif loss is not None:
            params["model.loss"] = _name(loss)
        return params


def _numbers(logs: Optional[Mapping[str, Any]]) -> Dict[str, float]:
    """The logs' values that are numbers (a tensor holding one included), as floats."""
    values = {str(key): _float(value) for key, value in (logs or {}).items()}
    return {key: value for key, value in values.items() if value is not None}


def _float(value: Any) -> Optional[float]:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _learning_rate(optimizer: Any) -> Optional[float]:
    """The optimizer's learning rate now (a schedule's value at its current iteration)."""
    try:
        return _shortest(float(keras.ops.convert_to_numpy(optimizer.learning_rate)))
    except Exception:  # noqa: BLE001 (a custom schedule may not evaluate outside training)
        return None


def _shortest(value: float) -> float:
    """A 32-bit float (as Keras keeps its learning rate: 0.009999999776) as its shortest
    decimal (0.01); any other float as it is."""
    single = numpy.float32(value)
    return float(str(single)) if math.isfinite(value) and float(single) == value else value


def _name(loss: Any) -> str:
    """A loss as its name: Keras's own identifier, a `Loss`'s name, a function's name."""
    if isinstance(loss, str):
        return loss
    return str(getattr(loss, "name", None) or getattr(loss, "__name__", None) or type(loss).__name__)
