"""Hugging Face Transformers: `Trainer(..., callbacks=[TrainlogCallback()])` (TRL's trainers too).

At the start of training: the `TrainingArguments` as params under `args.`, the model's config
under `model.` with `model.num_parameters` and `model.num_trainable_parameters`, and a PEFT
adapter's config under `peft.{adapter}.`. Every `on_log` at the trainer's `global_step`, renamed
as the Hub's trackers do: `eval_loss` → `eval/loss`, `test_…` → `test/…`, anything else →
`train/…`. Every checkpoint the trainer saves as a trainlog checkpoint at its step, kept by the
trainer's own `save_total_limit` (and its best by `metric_for_best_model`); its files are
uploaded with `upload_checkpoints=True`, else only recorded with their folder.
`resume_checkpoint(run)` gives the folder to pass to `trainer.train(resume_from_checkpoint=…)`.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, Optional, Union

from transformers import TrainerCallback

import trainlog
from trainlog._run import Run
from trainlog.integrations._attach import attach, flatten, metric_value, release

#: The trainer's name for a checkpoint folder under `output_dir`.
CHECKPOINT_PREFIX = "checkpoint"


class TrainlogCallback(TrainerCallback):  # type: ignore[misc]
    """Logs a `Trainer`'s params, metrics and checkpoints to a trainlog run.

    - `log_checkpoints`: record each checkpoint the trainer saves (default True).
    - `upload_checkpoints`: also upload its files, so a restart on another machine restores
      them (default False: the record keeps the folder's path on this machine).
    - The other keyword arguments are `trainlog.init`'s. Without them the callback logs to
      `trainlog.run` when one is started, else starts a run (named after `run_name`).
    A run the callback started is finished when training ends; logs that come after (a
    `trainer.evaluate()`) reopen it, and the process's exit finishes it again.
    """

    def __init__(self, log_checkpoints: bool = True, upload_checkpoints: bool = False, **init_kwargs: Any) -> None:
        self.log_checkpoints = log_checkpoints
        self.upload_checkpoints = upload_checkpoints
        self.init_kwargs = init_kwargs
        self.run: Optional[Run] = None
        self._owned = False
        #: Checkpoints that could not be recorded, with the error: training went on.
        self.checkpoint_errors: list[tuple[str, str]] = []

    def _attach(self, args: Any) -> Run:
        if self.run is not None and not self.run.finished:
            return self.run
        if self.run is not None and self._owned:
            # A finished run of ours gets later logs (an evaluation after training): reopen it.
            kwargs = {**self.init_kwargs, "run_id": self.run.id, "resume": "must", "project": self.run.project}
            self.run = trainlog.init(**kwargs)
            return self.run
        kwargs = dict(self.init_kwargs)
        if kwargs and "name" not in kwargs and getattr(args, "run_name", None):
            kwargs["name"] = args.run_name
        if not kwargs and (trainlog.run is None or trainlog.run.finished) and getattr(args, "run_name", None):
            kwargs["name"] = args.run_name
        self.run, self._owned = attach(kwargs)
        return self.run

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        run = self._attach(args)
        if state.is_world_process_zero:
            run.log_params(training_params(args, model))

    def on_log(self, args: Any, state: Any, control: Any, logs: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        if not logs:
            return
        run = self._attach(args)
        metrics = rename_logs(logs)
        if metrics and state.is_world_process_zero:
            run.log(metrics, step=int(state.global_step))

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.log_checkpoints or not state.is_world_process_zero:
            return
        folder = os.path.join(args.output_dir, f"{CHECKPOINT_PREFIX}-{state.global_step}")
        if not os.path.isdir(folder):
            return
        run = self._attach(args)
        keep_best, metric, mode = None, None, "min"
        if args.metric_for_best_model and args.load_best_model_at_end:
            name = args.metric_for_best_model
            metric = "eval/" + (name[len("eval_") :] if name.startswith("eval_") else name)
            keep_best, mode = 1, ("max" if args.greater_is_better else "min")
        metadata = {
            "framework": "transformers",
            "epoch": state.epoch,
            "folder": os.path.basename(folder),
            "local_path": os.path.abspath(folder),
        }
        try:
            run.log_checkpoint(
                folder,
                step=int(state.global_step),
                metadata=metadata,
                keep_last=args.save_total_limit,
                keep_best=keep_best,
                metric=metric,
                mode=mode,
                upload=self.upload_checkpoints,
            )
        except trainlog.TrainlogError as e:
            # Training goes on: the checkpoint is on disk, only its record is missing.
            self.checkpoint_errors.append((folder, str(e)))
            print(f"trainlog: could not record checkpoint {folder}: {e}", file=sys.stderr)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        release(self.run, self._owned)


def rename_logs(logs: Dict[str, Any]) -> Dict[str, float]:
    """The trainer's logs as trainlog metrics: numbers only, `eval_`/`test_` become `eval/`/`test/`,
    anything else goes under `train/`."""
    metrics: Dict[str, float] = {}
    for key, value in logs.items():
        number = metric_value(value)
        if number is None:
            continue
        if key.startswith("eval_"):
            key = "eval/" + key[len("eval_") :]
        elif key.startswith("test_"):
            key = "test/" + key[len("test_") :]
        else:
            key = "train/" + key
        metrics[key] = number
    return metrics


def training_params(args: Any, model: Any) -> Dict[str, Any]:
    """`args.*` from the `TrainingArguments`, `model.*` from the model's config and size, and
    `peft.{adapter}.*` from a PEFT adapter's config."""
    params: Dict[str, Any] = {}
    flatten("args", args.to_dict(), params)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        flatten("model", config.to_dict(), params)
    if model is not None:
        params["model.num_parameters"] = _count(model, only_trainable=False)
        params["model.num_trainable_parameters"] = _count(model, only_trainable=True)
    for adapter, peft_config in (getattr(model, "peft_config", None) or {}).items():
        as_dict = peft_config.to_dict() if hasattr(peft_config, "to_dict") else vars(peft_config)
        flatten(f"peft.{adapter}", as_dict, params)
    return params


def _count(model: Any, only_trainable: bool) -> int:
    counter = getattr(model, "num_parameters", None)
    if callable(counter):
        return int(counter(only_trainable=only_trainable))
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not only_trainable)


def resume_checkpoint(
    run: Union[Run, str, None] = None, dest: Optional[str] = None, server: Optional[str] = None
) -> Optional[str]:
    """The folder to pass to `trainer.train(resume_from_checkpoint=…)`: the run's newest
    checkpoint (a `Run`, a run id, or `trainlog.run`), None when it has none.

    Its recorded folder when it is still on this disk; else its uploaded files, downloaded and
    verified into `dest` (default: that folder's path). A checkpoint recorded without its files
    whose folder is gone raises `TrainlogError`."""
    if run is None:
        run = trainlog.run
        if run is None:
            raise trainlog.TrainlogError("resume_checkpoint needs a run: pass one, or call trainlog.init() first")
    if isinstance(run, Run):
        run_id, server = run.id, server or run.server
        latest = run.latest_checkpoint()
    else:
        run_id = run
        checkpoints = trainlog.Api(server).run(run_id).checkpoints()
        latest = max(checkpoints, key=lambda c: c["step"]) if checkpoints else None
    if latest is None:
        return None
    metadata = latest.get("metadata") or {}
    local = metadata.get("local_path")
    if local and os.path.isdir(local):
        return str(local)
    if not latest.get("files"):
        raise trainlog.TrainlogError(
            f"checkpoint {latest['name']} of run {run_id} was recorded without its files and "
            f"{local or 'its folder'} is not on this machine: log checkpoints with upload_checkpoints=True"
        )
    target = (
        dest or local or os.path.join("trainlog-checkpoints", run_id, str(metadata.get("folder") or latest["name"]))
    )
    trainlog.restore_checkpoint(run_id, target, name=latest["name"], server=server)
    return str(target)
