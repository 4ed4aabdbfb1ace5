"""Integrations with training frameworks, each importing its framework only when it is itself imported.

- `trainlog.integrations.hf.TrainlogCallback`: `Trainer(..., callbacks=[TrainlogCallback()])`
- `trainlog.integrations.accelerate`: imported, it registers `Accelerator(log_with="trainlog")`
- `trainlog.integrations.lightning.TrainlogLogger`: `lightning.Trainer(logger=TrainlogLogger())`
- `trainlog.integrations.keras.TrainlogCallback`: `model.fit(..., callbacks=[TrainlogCallback()])`
- `trainlog.integrations.xgboost.TrainlogCallback`: `xgboost.train(..., callbacks=[TrainlogCallback()])`
- `trainlog.integrations.lightgbm.trainlog_callback`: `lightgbm.train(..., callbacks=[trainlog_callback()])`
- `trainlog.autolog()` adds them all to the frameworks' trainings without changing their code.

Each takes the keyword arguments of `trainlog.init` (`project`, `name`, `config`, `tags`,
`run_id`, ...) and starts its own run with them, which it finishes when training ends; without
them it logs to `trainlog.run` when one is started (and leaves it to its owner), else starts one.
"""
