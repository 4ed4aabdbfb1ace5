"""trainlog: experiment tracking for machine-learning training.

import trainlog
run = trainlog.init(project="resnet", config={"lr": 3e-4})
for step in range(steps):
    run.log({"train/loss": loss}, step=step)
run.finish()
"""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import timedelta
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Union

from trainlog._api import Api, ApiRun, MediaItem, Model, ModelVersion
from trainlog._environment import installed_packages, python_info
from trainlog._media import Audio, File, Histogram, Image, Table, Text, Video
from trainlog._run import Config, FinishReport, Run, _register
from trainlog._trainlog import (
    ChecksumError,
    ConflictError,
    InvalidArgumentError,
    NativeRun,
    NotFoundError,
    ServerError,
    SourceDeletedError,
    TrainlogError,
    UnreachableError,
    __version__,
)
from trainlog._trainlog import sync as _sync

__all__ = [
    "Api",
    "ApiRun",
    "Audio",
    "ChecksumError",
    "Config",
    "ConflictError",
    "File",
    "FinishReport",
    "Histogram",
    "Image",
    "InvalidArgumentError",
    "MediaItem",
    "Model",
    "ModelVersion",
    "NotFoundError",
    "Run",
    "ServerError",
    "SourceDeletedError",
    "Table",
    "Text",
    "TrainlogError",
    "UnreachableError",
    "Video",
    "__version__",
    "alert",
    "autolog",
    "config",
    "finish",
    "init",
    "log",
    "register_model",
    "restore_checkpoint",
    "run",
    "sync",
]

#: The run started last by `init` in this process, or None.
run: Optional[Run] = None
#: Its config.
config: Config = Config()


def init(
    project: Optional[str] = None,
    name: Optional[str] = None,
    config: Any = None,
    tags: Optional[Union[Iterable[str], Mapping[str, str]]] = None,
    *,
    run_id: Optional[str] = None,
    resume: Optional[str] = None,
    mode: str = "online",
    server: Optional[str] = None,
    group: Optional[str] = None,
    notes: Optional[str] = None,
    system_metrics_interval: Optional[float] = 10.0,
    capture_environment: bool = True,
    capture_packages: bool = True,
    capture_code: bool = True,
    capture_code_diff: bool = True,
    cost: Union[bool, Mapping[str, float]] = True,
    spool_dir: Optional[str] = None,
    handle_sigterm: bool = True,
    job: Optional[Mapping[str, Any]] = None,
    rank_metrics: bool = False,
    on_stop: Optional[Callable[[Run], None]] = None,
    console: str = "all",
    console_max_bytes: Optional[int] = None,
) -> Run:
    """Start a run (or continue one) and make it `trainlog.run`.

    - `project`: else `TRAINLOG_PROJECT`, else "default". `server`: else `TRAINLOG_SERVER`, else local.
    - `config`: a dict, an `argparse.Namespace` or a dataclass, recorded as typed params; changing
      `run.config` later (`update`, `run.config[k] = v`) records the change too.
    - Prints one line with the run's page (`run.url`); `TRAINLOG_QUIET=1` silences it.
    - `run_id` (else `TRAINLOG_RUN_ID`) with `resume` "allow" (continue or create; the default when
      an id is given), "must" (continue, refuse if unknown) or "never" (refuse an existing id).
    - `mode="offline"` only writes the local spool; `trainlog sync` sends it later.
    - `capture_code_diff=False` (or `TRAINLOG_CAPTURE_CODE_DIFF=0`) records the commit, branch,
      remote and dirty flag but not the uncommitted diff, which may hold secrets.
    - The command line is recorded with the values of secret-looking flags (`--password`,
      `--api-key`, ...) and the credentials in URLs replaced by `***`.
    - `cost={"per_hour": 2.5}` sets the price (else `TRAINLOG_COST_PER_HOUR`, else the shipped
      price table for the detected GPUs); `cost=False` turns cost accounting off.
    - `cost={"per_gpu_hour": 2.5}` prices each GPU of the node instead.
    - On SIGTERM the run is flushed for a bounded time and marked `preempted` where something says
      it is a preemption (a spot instance: `TRAINLOG_SPOT` or the launcher; Slurm's job state),
      else `killed`; then the process's own SIGTERM handling goes on. The server marks a `killed`
      job `preempted` when its launcher starts it again (a requeue), and ends `lost` a job none of
      whose processes sends heartbeats (`trainlog server --lost-after-s`).
    - A job of several processes is one run: the launcher's environment (torchrun, Slurm, MPI,
      SkyPilot, Kubernetes, SageMaker, Vertex AI, or `TRAINLOG_JOB_ID`, `TRAINLOG_RANK`, ...)
      gives the job and this process's rank; every rank and every restart of the job joins the
      run whose id the job derives. Only rank 0's `log` records, unless `rank_metrics=True`
      (every rank's series under `rank/{r}/`). `job={"job_id": ..., "rank": ..., ...}` sets
      what the environment does not say; it wins over it. Each start of the job is an attempt
      of the run, with its nodes, prices and how it ended.
    - A stop asked of the run (`Api().run(id).stop()`, `trainlog stop`, the UI's Stop button)
      arrives with the next heartbeat: it raises KeyboardInterrupt in the main thread, or calls
      `on_stop(run)` when given, and the run ends `killed` saying who stopped it (`run.stopped`).
    - The process's stdout and stderr are captured at the file-descriptor level (`print`,
      `logging`, C extensions, child processes) into the run's console logs, each line with its
      rank, node, attempt and the last step logged; the terminal still shows everything.
      `console="all"` (every rank, the default), `"rank0"` or `"off"`; `TRAINLOG_CONSOLE` wins.
      Secrets are masked; past `console_max_bytes` (128 MiB) a process keeps its first and last
      halves and a line saying how much was left out between.
    """
    project = project or os.environ.get("TRAINLOG_PROJECT") or "default"
    config = _config_mapping(config)
    sweep_params = os.environ.get("TRAINLOG_SWEEP_PARAMS") if os.environ.get("TRAINLOG_SWEEP_ID") else None
    if sweep_params:
        # A sweep trial: the trial's params win over the script's defaults.
        config = {**dict(config or {}), **json.loads(sweep_params)}
    run_id = run_id or os.environ.get("TRAINLOG_RUN_ID") or None
    if resume is None:
        resume = os.environ.get("TRAINLOG_RESUME") or ("allow" if run_id else "never")
    metadata: Dict[str, Any] = {}
    if capture_environment:
        metadata["python"] = python_info()
        if capture_packages:
            metadata["packages"] = installed_packages()
    per_gpu_hour: Optional[float] = None
    if isinstance(cost, Mapping):
        per_hour: Optional[float] = float(cost["per_hour"]) if "per_hour" in cost else None
        per_gpu_hour = float(cost["per_gpu_hour"]) if "per_gpu_hour" in cost else None
        cost_on = True
    else:
        per_hour = None
        cost_on = bool(cost)
    tags_arg: Any = dict(tags) if isinstance(tags, Mapping) else (list(tags) if tags is not None else None)
    native = NativeRun(
        project,
        name=name,
        run_id=run_id,
        config=dict(config or {}),
        tags=tags_arg,
        group=group,
        notes=notes,
        server=server,
        resume=resume,
        mode=mode,
        spool_dir=spool_dir,
        metadata=metadata,
        system_interval=float(system_metrics_interval or 0.0),
        capture_environment=capture_environment,
        capture_code=capture_code,
        capture_code_diff=capture_code_diff,
        cost=cost_on,
        cost_per_hour=per_hour,
        cost_per_gpu_hour=per_gpu_hour,
        job=dict(job) if job is not None else None,
        rank_metrics=rank_metrics,
        console=console,
        console_max_bytes=console_max_bytes,
    )
    new_run = Run(native, name, dict(config or {}))
    new_run.on_stop = on_stop
    _register(new_run, handle_sigterm)
    _set_current(new_run)
    return new_run


def _config_mapping(config: Any) -> Optional[Mapping[str, Any]]:
    """`init`'s config as a mapping: a dict as it is; an `argparse.Namespace`, a dataclass or
    another object by its attributes (as W&B takes them)."""
    if config is None or isinstance(config, Mapping):
        return config
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    if hasattr(config, "__dict__"):
        return {k: v for k, v in vars(config).items() if not k.startswith("_")}
    raise TypeError(
        f"config must be a mapping, an argparse.Namespace, a dataclass or an object with attributes, "
        f"not {type(config).__name__}"
    )


def _set_current(r: Optional[Run]) -> None:
    global run, config
    run = r
    config = r.config if r is not None else Config()


def log(data: Mapping[str, Any], step: Optional[int] = None) -> None:
    """Log to `trainlog.run`; raises TrainlogError only if no run was started."""
    if run is None:
        raise TrainlogError("trainlog.log needs a run: call trainlog.init() first")
    run.log(data, step=step)


def alert(title: str, text: str = "", level: str = "info", wait_duration: Union[float, timedelta, None] = None) -> bool:
    """Raise an alert on `trainlog.run` (`Run.alert`); raises TrainlogError only if no run was started."""
    if run is None:
        raise TrainlogError("trainlog.alert needs a run: call trainlog.init() first")
    return run.alert(title, text, level=level, wait_duration=wait_duration)


def finish(status: str = "finished", timeout: float = 60.0) -> Optional[FinishReport]:
    """Finish `trainlog.run`, if any; returns its `FinishReport` (None without a run)."""
    if run is not None:
        return run.finish(status, timeout)
    return None


def autolog(disable: bool = False, **init_kwargs: Any) -> None:
    """Log every training of Hugging Face Transformers, Accelerate, Lightning, Keras, XGBoost
    and LightGBM, imported already or later, through trainlog's integrations, without changing
    the training code; `autolog(disable=True)` undoes it. The keyword arguments are `init`'s,
    given to every integration (see `trainlog.integrations.autolog`)."""
    from trainlog.integrations.autolog import autolog as patch_frameworks

    patch_frameworks(disable=disable, **init_kwargs)


def sync(dir: Optional[str] = None, server: Optional[str] = None, include_live: bool = False) -> Dict[str, Any]:
    """Send spools left on this machine (what `trainlog sync` does)."""
    return dict(_sync(dir, server, include_live))


def restore_checkpoint(
    run_id: str, dest: str, name: Optional[str] = None, server: Optional[str] = None
) -> Dict[str, Any]:
    """Download a run's checkpoint (the latest when `name` is None) into `dest`, every file
    verified against its recorded sha256: a corrupted checkpoint raises ChecksumError, never loads.
    The outcome is recorded with the checkpoint (the report's restore rate), with `trainlog.run`
    as the run that restored it when one is started."""
    restored_by = run.id if run is not None else None
    return dict(Api(server)._native.restore_checkpoint(run_id, os.fspath(dest), name, restored_by))


def register_model(
    name: str,
    run_id: Optional[str] = None,
    checkpoint: Any = None,
    artifact: Optional[str] = None,
    alias: Optional[str] = None,
    description: str = "",
    tags: Optional[Mapping[str, str]] = None,
    server: Optional[str] = None,
) -> ModelVersion:
    """Register a new version of model `name` from a run (default: `trainlog.run`).

    `checkpoint` is what `run.log_checkpoint` returned, its name, or a step (default: the run's
    latest checkpoint); or give `artifact`, a file path or folder of the run's artifacts.
    `alias` (e.g. "champion") then points at the new version.
    """
    if run_id is None:
        if run is None:
            raise TrainlogError("register_model needs run_id= or a run started with trainlog.init()")
        run_id = run.id
        server = server or run.server
    api = Api(server)
    data = api._native.register_model(name, run_id, checkpoint, artifact, alias, description, dict(tags or {}))
    return ModelVersion(api, data)
