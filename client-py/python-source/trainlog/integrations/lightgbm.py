"""LightGBM: `lightgbm.train(params, train_set, valid_sets=[valid], callbacks=[trainlog_callback()])`.

Logs the training's params (`lightgbm.{name}`) and every evaluation metric at every iteration
as `{data}/{metric}` (`valid_0/binary_logloss`); under `lightgbm.cv`, the mean over folds as
`{data}/{metric}` and the deviation as `{data}/{metric}_std`. The run it starts is finished at
the last iteration (after early stopping, at the interpreter's exit).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from trainlog._run import Run
from trainlog.integrations._attach import attach, flatten


def trainlog_callback(log_every: int = 1, **init_kwargs: Any) -> Callable[[Any], None]:
    """A LightGBM callback logging to a trainlog run.

    `log_every`: log every n-th iteration (and the last); the keyword arguments are `trainlog.init`'s.
    """
    if log_every < 1:
        raise ValueError("log_every must be at least 1")
    state: Dict[str, Any] = {"run": None, "owned": False}

    def callback(env: Any) -> None:
        run: Optional[Run] = state["run"]
        if run is None:
            run, state["owned"] = attach(init_kwargs)
            state["run"] = run
            params = {k: v for k, v in (env.params or {}).items() if not callable(v)}
            run.log_params(flatten("lightgbm", params, {}))
        values: Dict[str, float] = {}
        for item in env.evaluation_result_list or []:
            data, name, value = item[0], item[1], item[2]
            values[f"{data}/{name}"] = float(value)
            if len(item) > 4:
                values[f"{data}/{name}_std"] = float(item[4])
        last = env.iteration == env.end_iteration - 1
        if values and (env.iteration % log_every == 0 or last):
            run.log(values, step=env.iteration)
        if last and state["owned"]:
            run.finish()

    # After LightGBM's own callbacks that record evaluations (order 20) and before early stopping (30).
    callback.order = 25  # type: ignore[attr-defined]
    callback.is_trainlog_callback = True  # type: ignore[attr-defined]
    return callback
