"""Callbacks for training frameworks, each importing its framework only when it is itself imported.

- `trainlog.integrations.xgboost.TrainlogCallback`: `xgboost.train(..., callbacks=[TrainlogCallback()])`
- `trainlog.integrations.lightgbm.trainlog_callback`: `lightgbm.train(..., callbacks=[trainlog_callback()])`

Each takes the keyword arguments of `trainlog.init` (`project`, `name`, `config`, `tags`,
`run_id`, ...) and starts its own run with them, which it finishes when training ends; without
them it logs to `trainlog.run` when one is started (and leaves it to its owner), else starts one.
"""
