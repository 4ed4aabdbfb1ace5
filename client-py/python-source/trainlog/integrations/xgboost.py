"""XGBoost: `xgboost.train(params, dtrain, evals=[(dvalid, "valid")], callbacks=[TrainlogCallback()])`.

Logs the booster's whole configuration as params (`xgboost.learner...`, the values XGBoost
actually used, defaults included) and every evaluation metric at every iteration as
`{data}/{metric}` (`valid/logloss`); under `xgboost.cv`, the mean over folds as `{data}/{metric}`
and the deviation as `{data}/{metric}_std`.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

import xgboost
from xgboost.callback import TrainingCallback

from trainlog._run import Run
from trainlog.integrations._attach import attach, flatten


class TrainlogCallback(TrainingCallback):
    """Logs a training's params and evaluation metrics to a trainlog run.

    `log_every`: log every n-th iteration (and the last); the keyword arguments are `trainlog.init`'s.
    """

    def __init__(self, log_every: int = 1, **init_kwargs: Any) -> None:
        super().__init__()
        if log_every < 1:
            raise ValueError("log_every must be at least 1")
        self.log_every = log_every
        self.init_kwargs = init_kwargs
        self.run: Optional[Run] = None
        self._owned = False
        self._last: Dict[str, float] = {}
        self._last_step = -1

    def before_training(self, model: Any) -> Any:
        self.run, self._owned = attach(self.init_kwargs)
        params = flatten("xgboost.learner", _learner_config(model), {})
        # XGBoost keeps its float params in 32 bits and saves them with 9 digits ("0.200000003").
        self.run.log_params({k: float(f"{v:.7g}") if isinstance(v, float) else v for k, v in params.items()})
        return model

    def after_iteration(self, model: Any, epoch: int, evals_log: Dict[str, Dict[str, Any]]) -> bool:
        values: Dict[str, float] = {}
        for data, metrics in evals_log.items():
            for name, history in metrics.items():
                last = history[-1]
                if isinstance(last, tuple):
                    values[f"{data}/{name}"] = float(last[0])
                    values[f"{data}/{name}_std"] = float(last[1])
                else:
                    values[f"{data}/{name}"] = float(last)
        if self.run is not None and values:
            if epoch % self.log_every == 0:
                self.run.log(values, step=epoch)
            self._last, self._last_step = values, epoch
        return False

    def after_training(self, model: Any) -> Any:
        run = self.run
        if run is None:
            return model
        if self._last and self._last_step % self.log_every != 0:
            run.log(self._last, step=self._last_step)
        best = model.attr("best_iteration") if isinstance(model, xgboost.Booster) else None
        if best is not None:
            run.log_params({"xgboost.best_iteration": int(best)})
        if self._owned:
            run.finish()
        return model


def _learner_config(model: Any) -> Dict[str, Any]:
    """The learner's configuration as XGBoost saves it (`xgboost.cv` passes its folds' boosters)."""
    folds = getattr(model, "cvfolds", None)
    booster = folds[0].bst if folds else model
    try:
        learner = json.loads(booster.save_config()).get("learner", {})
    except (AttributeError, ValueError):
        return {}
    return learner if isinstance(learner, dict) else {}
