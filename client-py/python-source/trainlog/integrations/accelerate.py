"""Accelerate: `import trainlog.integrations.accelerate`, then `Accelerator(log_with="trainlog")`.

Importing this module registers `TrainlogTracker` under the name "trainlog".
`accelerator.init_trackers(project, config=..., init_kwargs={"trainlog": {...}})` starts a run in
project `project`, with `trainlog.init`'s keyword arguments from `init_kwargs["trainlog"]`;
`config` becomes its params (nested dicts as dotted keys). `accelerator.log(values, step=...)`
logs the numbers among `values` (one-element tensors too) at `step`. `accelerator.end_training()` finishes the run.
Without `init_kwargs`, a run already started with `trainlog.init` is joined and left to its owner.
As with every Accelerate tracker, only the main process logs.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from accelerate.tracking import GeneralTracker, register_tracker_class  # type: ignore[import-untyped]

import trainlog
from trainlog._run import Run
from trainlog.integrations._attach import flatten, release


class TrainlogTracker(GeneralTracker):  # type: ignore[misc]
    """The Accelerate tracker named "trainlog"."""

    name = "trainlog"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, run_name: Optional[str], **init_kwargs: Any) -> None:
        super().__init__()
        self.project = run_name
        self.init_kwargs = init_kwargs
        self.run: Optional[Run] = None
        self._owned = False

    @property
    def tracker(self) -> Optional[Run]:
        return self.run

    def start(self) -> None:
        current = trainlog.run
        if current is not None and not current.finished and not self.init_kwargs:
            self.run, self._owned = current, False
        else:
            self.run, self._owned = trainlog.init(**{"project": self.project, **self.init_kwargs}), True

    def store_init_configuration(self, values: Dict[str, Any]) -> None:
        if self.run is not None:
            self.run.log_params(flatten("", values, {}))

    def log(self, values: Dict[str, Any], step: Optional[int] = None, **kwargs: Any) -> None:
        if self.run is None:
            return
        self.run.log(_read_tensors(values), step=step)

    def finish(self) -> None:
        release(self.run, self._owned)


def _read_tensors(values: Dict[str, Any]) -> Dict[str, Any]:
    """`values` with one-element tensors read out as numbers (nested dicts kept nested); the
    SDK skips what is still not a number, with one warning."""
    out: Dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out[key] = _read_tensors(value)
            continue
        item = getattr(value, "item", None)
        if callable(item) and getattr(value, "numel", lambda: 0)() == 1:
            value = item()
        out[key] = value
    return out


register_tracker_class(TrainlogTracker)
