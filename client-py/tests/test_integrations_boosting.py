"""The XGBoost and LightGBM callbacks: 20 boosting rounds on this CPU, each in a fresh
interpreter against the real server, read back through `trainlog.Api()`: every param, every
evaluation metric at every iteration (equal to what the framework itself recorded), and the run's
status after success, an exception in training, and SIGTERM."""

from __future__ import annotations

import json
import signal
import textwrap

import pytest

import trainlog
from helpers import Server, run_script, spawn_script, wait_for_line

pytestmark = [pytest.mark.timeout(240), pytest.mark.frameworks]

DATA = """
import numpy as np
rng = np.random.default_rng(7)
X = rng.normal(size=(400, 6))
y = (X[:, 0] + 0.5 * X[:, 1] - X[:, 2] + rng.normal(scale=0.5, size=400) > 0).astype(int)
"""

XGBOOST = {
    "train": DATA
    + """
import xgboost
from trainlog.integrations.xgboost import TrainlogCallback
dtrain, dvalid = xgboost.DMatrix(X[:300], label=y[:300]), xgboost.DMatrix(X[300:], label=y[300:])
recorded = {}
callbacks = [TrainlogCallback(project=PROJECT, name=NAME, system_metrics_interval=None)] + EXTRA
params = {"objective": "binary:logistic", "eta": 0.2, "max_depth": 3, "eval_metric": ["logloss", "error"]}
xgboost.train(params, dtrain, num_boost_round=ROUNDS, evals=[(dtrain, "train"), (dvalid, "valid")],
              evals_result=recorded, callbacks=callbacks)
print("RECORDED", json.dumps(recorded), flush=True)
""",
    "stop_at": """
class Stop(xgboost.callback.TrainingCallback):
    def after_iteration(self, model, epoch, evals_log):
        print("iteration", epoch, flush=True)
        time.sleep(SLEEP)
        if epoch == RAISE_AT:
            raise RuntimeError("out of patience")
        return False
EXTRA = [Stop()]
""",
    "metrics": {"train": ["logloss", "error"], "valid": ["logloss", "error"]},
    "params": {"xgboost.learner.gradient_booster.tree_train_param.eta": 0.2, "xgboost.learner.learner_train_param.objective": "binary:logistic"},
}

LIGHTGBM = {
    "train": DATA
    + """
import lightgbm
from trainlog.integrations.lightgbm import trainlog_callback
train = lightgbm.Dataset(X[:300], label=y[:300])
valid = lightgbm.Dataset(X[300:], label=y[300:], reference=train)
recorded = {}
callbacks = [trainlog_callback(project=PROJECT, name=NAME, system_metrics_interval=None),
             lightgbm.record_evaluation(recorded)] + EXTRA
params = {"objective": "binary", "learning_rate": 0.2, "num_leaves": 7, "metric": ["binary_logloss", "binary_error"], "verbose": -1}
lightgbm.train(params, train, num_boost_round=ROUNDS, valid_sets=[train, valid], valid_names=["train", "valid"],
               callbacks=callbacks)
print("RECORDED", json.dumps(recorded), flush=True)
""",
    "stop_at": """
def stop(env):
    print("iteration", env.iteration, flush=True)
    time.sleep(SLEEP)
    if env.iteration == RAISE_AT:
        raise RuntimeError("out of patience")
stop.order = 40
EXTRA = [stop]
""",
    "metrics": {"train": ["binary_logloss", "binary_error"], "valid": ["binary_logloss", "binary_error"]},
    "params": {"lightgbm.learning_rate": 0.2, "lightgbm.num_leaves": 7, "lightgbm.objective": "binary"},
}

FRAMEWORKS = {"xgboost": XGBOOST, "lightgbm": LIGHTGBM}


def script(framework: str, name: str, rounds: int = 20, raise_at: int = -1, sleep: float = 0.0) -> str:
    spec = FRAMEWORKS[framework]
    head = f"import json, time\nPROJECT, NAME, ROUNDS, RAISE_AT, SLEEP = {framework!r}, {name!r}, {rounds}, {raise_at}, {sleep}\n"
    stop = spec["stop_at"] if raise_at >= 0 or sleep > 0 else "EXTRA = []\n"
    train = spec["train"]
    # The stopping callback needs the framework imported first.
    first_import = train.index("from trainlog")
    return head + train[:first_import] + textwrap.dedent(stop) + train[first_import:]


@pytest.mark.parametrize("framework", ["xgboost", "lightgbm"])
def test_a_training_logs_its_params_and_every_metric_at_every_iteration(server: Server, client_env: dict, framework: str) -> None:
    done = run_script(script(framework, "ok"), client_env, timeout=180)
    assert done.returncode == 0, done.stderr
    recorded = json.loads(done.stdout.split("RECORDED ", 1)[1])
    run = trainlog.Api().runs(framework)[0]
    assert run.status == "finished"
    for key, value in FRAMEWORKS[framework]["params"].items():
        assert run.params.get(key) == value, (key, run.params)
    for data, metrics in FRAMEWORKS[framework]["metrics"].items():
        for metric in metrics:
            history = run.history(f"{data}/{metric}")
            expected = recorded[data][metric]
            assert [p["step"] for p in history] == list(range(20)), (data, metric)
            assert [p["value"] for p in history] == pytest.approx(expected, rel=1e-6), (data, metric)


@pytest.mark.parametrize("framework", ["xgboost", "lightgbm"])
def test_an_exception_in_training_fails_the_run_after_what_it_logged(server: Server, client_env: dict, framework: str) -> None:
    failed = run_script(script(framework, "boom", raise_at=5), client_env, timeout=180)
    assert failed.returncode == 1 and "out of patience" in failed.stderr, failed.stderr
    run = trainlog.Api().runs(framework)[0]
    assert run.status == "failed"
    metric = FRAMEWORKS[framework]["metrics"]["valid"][0]
    steps = [p["step"] for p in run.history(f"valid/{metric}")]
    assert steps[:5] == list(range(5)) and max(steps) <= 5, steps


@pytest.mark.parametrize("framework", ["xgboost", "lightgbm"])
def test_sigterm_on_a_spot_instance_marks_the_run_preempted(server: Server, client_env: dict, framework: str) -> None:
    proc = spawn_script(script(framework, "spot", rounds=2000, sleep=0.05), {**client_env, "TRAINLOG_SPOT": "1"})
    wait_for_line(proc, "iteration 3", timeout=120)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    run = trainlog.Api().runs(framework)[0]
    assert run.status == "preempted"
    metric = FRAMEWORKS[framework]["metrics"]["valid"][0]
    steps = [p["step"] for p in run.history(f"valid/{metric}")]
    assert steps[:4] == list(range(4)) and len(steps) < 2000, steps


def test_without_init_arguments_a_callback_logs_to_the_started_run_and_leaves_it_open(server: Server, client_env: dict) -> None:
    code = (
        "import trainlog\n"
        "run = trainlog.init(project='joined', name='mine', config={'lr': 0.1}, system_metrics_interval=None)\n"
        + DATA
        + textwrap.dedent(
            """
            import xgboost, lightgbm
            from trainlog.integrations.xgboost import TrainlogCallback
            from trainlog.integrations.lightgbm import trainlog_callback
            xgboost.train({"eta": 0.3}, xgboost.DMatrix(X, label=y), num_boost_round=5,
                          evals=[(xgboost.DMatrix(X, label=y), "xgb")], callbacks=[TrainlogCallback()])
            assert not run.finished, "the callback leaves the run to its owner"
            train = lightgbm.Dataset(X, label=y)
            lightgbm.train({"objective": "binary", "verbose": -1}, train, num_boost_round=5, valid_sets=[train],
                           valid_names=["lgb"], callbacks=[trainlog_callback()])
            assert not run.finished
            run.log({"after": 1.0}, step=100)
            run.finish()
            print("RUN", run.id, flush=True)
            """
        )
    )
    done = run_script(code, client_env, timeout=180)
    assert done.returncode == 0, done.stderr
    runs = trainlog.Api().runs("joined")
    assert len(runs) == 1 and runs[0].status == "finished"
    run = runs[0]
    assert run.params["lr"] == 0.1 and run.params["xgboost.learner.gradient_booster.tree_train_param.eta"] == 0.3
    assert run.params["lightgbm.objective"] == "binary"
    assert len(run.history("xgb/rmse")) == 5 and len(run.history("lgb/binary_logloss")) == 5
    assert [p["step"] for p in run.history("after")] == [100]


def test_log_params_adds_params_after_the_start_and_keeps_them_through_the_spool(server: Server, client_env: dict) -> None:
    run = trainlog.init(project="params", name="later", config={"lr": 0.1}, system_metrics_interval=None)
    run.log_params({"optimizer": {"name": "adam", "beta1": 0.9}, "lr": 0.05})
    port = server.port
    server.stop()
    run.log_params({"epochs": 3})
    run.log({"loss": 1.0}, step=0)
    report = run.finish(timeout=2)
    assert report is not None and report["spooled"] == 1
    server.start(port)
    trainlog.sync()
    params = trainlog.Api().run(run.id).params
    assert params["optimizer.name"] == "adam" and params["optimizer.beta1"] == 0.9
    assert params["lr"] == 0.05 and params["epochs"] == 3
    assert run.config["epochs"] == 3


def test_cross_validation_logs_the_mean_and_deviation_over_folds(server: Server, client_env: dict) -> None:
    code = DATA + textwrap.dedent(
        """
        import json
        import xgboost, lightgbm
        from trainlog.integrations.xgboost import TrainlogCallback
        from trainlog.integrations.lightgbm import trainlog_callback
        xgb = xgboost.cv({"objective": "binary:logistic", "eval_metric": "logloss"}, xgboost.DMatrix(X, label=y),
                         num_boost_round=10, nfold=3, seed=1,
                         callbacks=[TrainlogCallback(project="cv", name="xgb", system_metrics_interval=None)])
        lgb = lightgbm.cv({"objective": "binary", "metric": "binary_logloss", "verbose": -1}, lightgbm.Dataset(X, label=y),
                          num_boost_round=10, nfold=3, seed=1,
                          callbacks=[trainlog_callback(project="cv", name="lgb", system_metrics_interval=None)])
        print("XGB", json.dumps({c: list(xgb[c]) for c in xgb.columns}), flush=True)
        print("LGB", json.dumps({k: list(v) for k, v in lgb.items()}), flush=True)
        """
    )
    done = run_script(code, client_env, timeout=180)
    assert done.returncode == 0, done.stderr
    xgb = json.loads(done.stdout.split("XGB ", 1)[1].splitlines()[0])
    lgb = json.loads(done.stdout.split("LGB ", 1)[1].splitlines()[0])
    runs = {r.name: r for r in trainlog.Api().runs("cv")}
    values = lambda run, key: [p["value"] for p in run.history(key)]  # noqa: E731
    assert values(runs["xgb"], "test/logloss") == pytest.approx(xgb["test-logloss-mean"], rel=1e-6)
    assert values(runs["xgb"], "test/logloss_std") == pytest.approx(xgb["test-logloss-std"], rel=1e-6, abs=1e-12)
    assert values(runs["lgb"], "valid/binary_logloss") == pytest.approx(lgb["valid binary_logloss-mean"], rel=1e-6)
    assert values(runs["lgb"], "valid/binary_logloss_std") == pytest.approx(lgb["valid binary_logloss-stdv"], rel=1e-6, abs=1e-12)
    assert runs["xgb"].params["xgboost.learner.learner_train_param.objective"] == "binary:logistic"
    assert {r.status for r in runs.values()} == {"finished"}
