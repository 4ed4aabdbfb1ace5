"""PyTorch Lightning: `lightning.Trainer(logger=TrainlogLogger(project="mnist", name="baseline"))`.

Logs the hyperparameters Lightning hands its loggers (`save_hyperparameters()`, a datamodule's
too) as params under dotted keys, every metric the module logs (`self.log("train_loss", ...)`,
and Lightning's `epoch`) under its own name at the trainer's step, and every checkpoint file a
`ModelCheckpoint` saves as a trainlog checkpoint at its global step; its file is uploaded with
`upload_checkpoints=True`, else only recorded with its path. The run the logger started ends
with the training: `finished`, `failed` on an exception (`killed` on Ctrl-C), and on SIGTERM
`preempted` where something says it is a preemption, else `killed`. Only rank 0 logs.

`TrainlogFlops()` among the trainer's callbacks logs `flops`, the FLOPs the model did so far on
every rank, from Lightning's throughput convention (the module's `flops_per_batch`, measured with
`lightning.fabric.utilities.throughput.measure_flops`); trainlog derives the run's `mfu` from it.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from argparse import Namespace
from typing import Any, Dict, Mapping, Optional, Set, Tuple, Union

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers.logger import Logger, rank_zero_experiment
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only

import trainlog
from trainlog._evidence import sigterm_end
from trainlog._run import LAST_LINES, Run
from trainlog.integrations._attach import attach, flatten, metric_value


class TrainlogLogger(Logger):
    """A Lightning logger writing to a trainlog run.

    - `upload_checkpoints`: upload each checkpoint file, so a restart on another machine gets it
      (default False: the record keeps the file's path on this machine as `local_path`).
    - The other keyword arguments are `trainlog.init`'s; the run starts on first use. Without
      them the logger writes to `trainlog.run` when one is started and leaves it to its owner.
    A run the logger started is finished with the training; later logs (`trainer.test()` after
    `trainer.fit()`) reopen it. Checkpoints that could not be recorded are in `checkpoint_errors`.
    """

    def __init__(self, upload_checkpoints: bool = False, **init_kwargs: Any) -> None:
        super().__init__()
        self.upload_checkpoints = upload_checkpoints
        self.init_kwargs = init_kwargs
        #: (file, error) for each checkpoint whose record failed: training went on.
        self.checkpoint_errors: list[Tuple[str, str]] = []
        self._run: Optional[Run] = None
        self._owned = False
        self._ended: Optional[str] = None
        # Files saved before this logger existed (a resumed training's) are not this run's.
        self._since = time.time() - 1.0
        self._seen: Set[Tuple[str, int, int]] = set()
        self._steps: Set[int] = set()

    @property
    @rank_zero_experiment
    def experiment(self) -> Run:
        """The trainlog run (started here on first use)."""
        if self._run is None or (not self._owned and self._run.finished):
            self._run, self._owned = attach(self.init_kwargs)
            self._ended = None
        return self._run

    def _open(self) -> Run:
        """The run to log to: ours, continued when logs come after the training ended well
        (a `trainer.test()` after `trainer.fit()`)."""
        run: Run = self.experiment
        if run.finished and self._owned and self._ended == "finished":
            kwargs = {**self.init_kwargs, "project": run.project, "run_id": run.id, "resume": "must"}
            self._run, self._ended = trainlog.init(**kwargs), None
            return self._run
        return run

    @property
    def name(self) -> str:
        """The run's project (the first folder of Lightning's checkpoint path)."""
        run = self.experiment
        return run.project if isinstance(run, Run) else str(self.init_kwargs.get("project") or "")

    @property
    def version(self) -> str:
        """The run's id (the second folder of Lightning's checkpoint path)."""
        run = self.experiment
        return run.id if isinstance(run, Run) else ""

    @rank_zero_only
    def log_hyperparams(self, params: Union[Mapping[str, Any], Namespace], *args: Any, **kwargs: Any) -> None:
        """Sends `params` (nested ones under dotted keys) as the run's params."""
        values = vars(params) if isinstance(params, Namespace) else dict(params)
        flat = flatten("", values, {})
        if flat:
            self._open().log_params(flat)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: Optional[int] = None) -> None:
        """Logs the numbers among `metrics` (tensors of one value included) at `step`."""
        values: Dict[str, float] = {}
        for key, value in metrics.items():
            number = metric_value(value)
            if number is not None:
                values[key] = number
        if values:
            self._open().log(values, step=step)

    @rank_zero_only
    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Records the checkpoint file `checkpoint_callback` (a `ModelCheckpoint`) just saved."""
        cb = checkpoint_callback
        # Set by the callback right before it calls its loggers; else the last step logged.
        step: Optional[int] = getattr(cb, "_last_global_step_saved", None)
        paths = [cb.last_model_path, cb.best_model_path, *getattr(cb, "best_k_models", {})]
        for path in dict.fromkeys(p for p in paths if p):
            try:
                stat = os.stat(path)
            except OSError:
                continue
            key = (os.path.abspath(path), stat.st_mtime_ns, stat.st_size)
            if key in self._seen or stat.st_mtime < self._since:
                continue
            self._seen.add(key)
            if step is not None and step in self._steps:
                # Another file of the same step (`last.ckpt` after a top-k file) holds the same state.
                continue
            self._record(path, step, cb)

    def _record(self, path: str, step: Optional[int], cb: Any) -> None:
        metadata: Dict[str, Any] = {"framework": "lightning", "file": os.path.basename(path)}
        if getattr(cb, "monitor", None):
            metadata["monitor"] = cb.monitor
            score = metric_value(getattr(cb, "best_k_models", {}).get(path))
            if score is not None:
                metadata["score"] = score
        try:
            saved = self._open().log_checkpoint(path, step=step, metadata=metadata, upload=self.upload_checkpoints)
        except (trainlog.TrainlogError, OSError) as e:
            # Training goes on: the checkpoint is on disk, only its record is missing.
            self.checkpoint_errors.append((path, str(e)))
            print(f"trainlog: could not record checkpoint {path}: {e}", file=sys.stderr)
            return
        if isinstance(saved.get("step"), int):
            self._steps.add(saved["step"])

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Ends the run the logger started: Lightning's "success"/"finished" → finished, "failed" →
        failed, killed on Ctrl-C, and on SIGTERM preempted where something says it is a
        preemption (a spot instance, Slurm), else killed."""
        run = self._run
        if run is None or run.finished:
            # Already ended: by trainlog's SIGTERM hook, the owner, or an earlier finalize.
            return
        if not self._owned:
            run.flush()
            return
        if status != "failed":
            self._ended = "finished"
            run.finish("finished")
            return
        exc_type, exc, tb = sys.exc_info()
        reason, last_lines = None, None
        if exc_type is None or exc is None:
            self._ended = "failed"
        elif issubclass(exc_type, SIGTERMException):
            self._ended, reason = sigterm_end(run.job)
        else:
            self._ended = "killed" if issubclass(exc_type, KeyboardInterrupt) else "failed"
            reason = f"{exc_type.__name__}: {exc}" if str(exc) else exc_type.__name__
            lines = "".join(traceback.format_exception(exc_type, exc, tb)).splitlines()
            last_lines = "\n".join(lines[-LAST_LINES:])
        run.finish(self._ended, reason=reason, last_lines=last_lines)

    def save(self) -> None:
        """Nothing to do: the run sends what it logs in the background."""


class TrainlogFlops(Callback):
    """Logs `flops` to the trainer's `TrainlogLogger` at each step it logs at and at the end of
    training: the module's `flops_per_batch` (FLOPs of one batch on one device, Lightning's
    `ThroughputMonitor` convention) times the batches trained times the world size. The run's
    `mfu` series follows from it (FLOPs over its GPUs' peak). Nothing without `flops_per_batch`."""

    def __init__(self) -> None:
        super().__init__()
        #: FLOPs done so far, every rank together.
        self.flops = 0.0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        per_batch = getattr(pl_module, "flops_per_batch", None)
        if per_batch is None:
            return
        self.flops += float(per_batch) * trainer.world_size
        if trainer.global_step % max(trainer.log_every_n_steps, 1) == 0:
            self._log(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.flops > 0:
            self._log(trainer)

    def _log(self, trainer: Any) -> None:
        for logger in trainer.loggers:
            if isinstance(logger, TrainlogLogger):
                logger.log_metrics({"flops": self.flops}, step=trainer.global_step)
