"""Your own training and predict functions (`FunctionEstimator`), a model from a builder function or an MLflow URI
(`ScoringModel`), and the fitted torch model logged to MLflow: on real ranks (np < 0, launcher "direct"), real
executors and a real MLflow sqlite store; oracles: the generating function, the model's own forward pass, and
the pids that built the model."""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from packaging.version import Version
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.feature import SQLTransformer

from sparkrunner.ml import FunctionEstimator, FunctionModel, ScoringModel, TorchEstimator
from tests.ml.nets import BIAS, WEIGHTS, least_squares, linear_predict, linear_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_function_estimator_trains_with_your_function_and_scores_with_your_predict(
    spark_ml: Any, store: Path, tracking_uri: str, tmp_path: Path
) -> None:
    """As the last stage of a Pipeline whose first stage marks the validation rows; the fitted model scores
    alone, after its own save/load, and inside the saved and loaded PipelineModel."""
    estimator = FunctionEstimator(
        train_fn=least_squares, predict_fn=linear_predict, feature_cols=["x"], label_cols=["y"], np=-2,
        launcher="direct", store=str(store), tracking=tracking_uri, verbose=0, validation="held_out",
    )  # fmt: skip
    held_out = SQLTransformer(statement="SELECT *, id % 5 = 0 AS held_out FROM __THIS__")
    fitted = Pipeline(stages=[held_out, estimator]).fit(linear_rows(spark_ml, 1000))
    model = fitted.stages[-1]
    weights, train_rows, val_rows = model.getModel()
    np.testing.assert_allclose(weights, [*WEIGHTS, BIAS], atol=1e-4)
    assert (train_rows, val_rows) == (800, 200)  # ids 0..999: every fifth is held out

    test = linear_rows(spark_ml, 200, partitions=2, seed=50)
    expected = [(r["id"], r["y"]) for r in test.collect()]
    model.write().save(str(tmp_path / "function-model"))
    fitted.write().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(loaded.stages[-1], FunctionModel)
    for scorer in (model, FunctionModel.load(str(tmp_path / "function-model")), loaded):
        scored = dict((r["id"], r["prediction"]) for r in scorer.transform(test).collect())
        np.testing.assert_allclose([scored[i] for i, _ in expected], [y for _, y in expected], atol=1e-3)


def test_scoring_model_builds_once_per_python_worker(spark_ml: Any, tmp_path: Path) -> None:
    log = tmp_path / "builds.txt"

    def build() -> torch.nn.Module:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        net = torch.nn.Linear(3, 1)
        with torch.no_grad():
            net.weight.copy_(torch.from_numpy(WEIGHTS[None].astype(np.float32)))
            net.bias.fill_(BIAS)
        return net

    model = ScoringModel(builder=build, feature_cols=["x"], batch_size=7)
    test = linear_rows(spark_ml, 600, partitions=6, seed=5)
    for _ in range(2):
        rows = model.transform(test).select("x", "y", "prediction").collect()
        np.testing.assert_allclose([r["prediction"] for r in rows], [r["y"] for r in rows], atol=1e-5)
    pids = log.read_text().split()
    assert len(pids) == len(set(pids)), f"a worker built the model more than once: {pids}"
    assert str(os.getpid()) not in pids and 1 <= len(pids) < 12


MODEL_MB = 21
"""Each model of the bounded-memory test: Linear(2048, 2560), 5.2M float32 weights."""


def _big_model(seed: int) -> Any:
    def build() -> torch.nn.Module:
        torch.manual_seed(seed)
        return torch.nn.Linear(2048, 2560)

    return build


def _worker_pid(model: Any, x: np.ndarray) -> np.ndarray:
    return np.full((len(x), 1), os.getpid(), dtype=np.float64)


def _rss_mb(pid: int) -> float:
    """A process's resident set, read from /proc by the test itself."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) / 1024


def test_reused_python_workers_keep_three_models_and_give_the_others_memory_back(spark_ml: Any) -> None:
    """Eight distinct 21 MB models, each scored by both Python workers of one application (reused): once a worker
    holds three (the default count), its RSS grows by less than two models' worth however many more it scores
    (kept for good, the five more added 100 MB), and never exceeds the budget (its RSS with one model, plus the
    two more it keeps) by more than a margin of one model (the next one is built before the oldest goes). The workers' pids come back as the prediction; their RSS is read from
    /proc. A wrong count setting is refused before any job. Checks what no in-process test can: Spark's real,
    reused workers and the memory the operating system sees."""
    from sparkrunner.errors import InvalidArgumentError
    from sparkrunner.ml.model_cache import MODELS_CONF

    frame = spark_ml.range(0, 2, numPartitions=2).selectExpr("cast(id as double) as x")
    rss: dict[int, list[float]] = {}
    for seed in range(8):
        model = ScoringModel(builder=_big_model(seed), predict_fn=_worker_pid, feature_cols=["x"])
        for row in model.transform(frame).collect():
            rss.setdefault(int(row["prediction"]), []).append(_rss_mb(int(row["prediction"])))
    full = {pid: sizes for pid, sizes in rss.items() if len(sizes) >= 6}
    assert full, f"no worker scored six or more of the models: {rss}"
    for pid, sizes in full.items():
        growth = max(sizes[3:]) - sizes[2]
        assert growth < 2 * MODEL_MB, f"worker {pid} grew {growth:.0f} MB after its third model: {sizes}"
        assert max(sizes) < sizes[0] + 2 * MODEL_MB + MODEL_MB, f"worker {pid} over its budget: {sizes}"
    spark_ml.conf.set(MODELS_CONF, "0")
    try:
        with pytest.raises(InvalidArgumentError, match=MODELS_CONF):
            ScoringModel(builder=_big_model(0), feature_cols=["x"]).transform(frame)
    finally:
        spark_ml.conf.unset(MODELS_CONF)


def mixed_rows(spark: Any, rows: int, partitions: int = 4, seed: int = 0) -> Any:
    """`linear_rows`' x as every kind of feature column the estimator takes: a double, a float, an ML vector,
    an array of doubles and an array of floats (y stays x . WEIGHTS + BIAS)."""
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    x = F.col("x")
    return linear_rows(spark, rows, partitions, seed).select(
        "id", "y", x[0].cast("double").alias("a"), x[1].alias("f"),
        array_to_vector(F.array(x[2])).alias("v"), F.array(x[0].cast("double")).alias("ad"),
        F.array(x[1]).alias("af"),
    )  # fmt: skip


MIXED = ["a", "f", "v", "ad", "af"]


def test_the_logged_model_takes_what_the_estimator_takes_through_each_mlflow_client(
    spark_ml: Any, store: Path, tracking_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Fitted (np=-1, launcher "direct") on a double, a float, an ML vector and arrays of doubles and floats; the
    logged model's signature names those columns, and `mlflow.pyfunc.load_model`, `mlflow.pyfunc.spark_udf` (the
    double and vector columns as Spark holds them) and a REST request to `mlflow models serve` give
    `transform`'s predictions; a ScoringModel of its URI too. A missing column is refused by name. The fit
    logs the model with the requirements it knows: no process MLflow's requirement inference starts (its
    ``_capture_modules`` loads the model again and imports torch once more) runs during the fit, and the
    model's requirements.txt pins the versions installed where the rank ran (this environment)."""
    users_store = os.environ["MLFLOW_TRACKING_URI"]  # conftest's; the fit logs to another store
    torch.manual_seed(0)
    net = torch.nn.Linear(5, 1)
    with _processes_started() as started:
        subprocess.run([sys.executable, "-c", "pass"], check=True)  # the hook's own check: it sees this one
        model = TorchEstimator(
            model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05), loss="mse", feature_cols=MIXED,
            label_cols=["y"], epochs=2, np=-1, launcher="direct", store=str(store), tracking=tracking_uri,
            verbose=0,
        ).fit(mixed_rows(spark_ml, 400))  # fmt: skip
    assert model.mlflow_model_uri is not None and model.mlflow_run_id is not None
    assert "-c', 'pass'" in started[0], started
    assert not [argv for argv in started if "_capture_modules" in argv], started
    assert os.environ.get("MLFLOW_TRACKING_URI") == users_store, "the fit changed the user's tracking URI"

    monkeypatch.setenv(
        "MLFLOW_TRACKING_URI", tracking_uri
    )  # never mlflow.set_tracking_uri: it outlives the test
    info = mlflow.models.get_model_info(model.mlflow_model_uri)
    assert info.run_id == model.mlflow_run_id
    required = Path(mlflow.pyfunc.get_model_dependencies(model.mlflow_model_uri)).read_text().split()
    pinned = {
        f"{name}=={Version(metadata.version(name)).public}" for name in ("torch", "cloudpickle", "numpy")
    }
    assert pinned <= set(required), required
    assert [(c.name, str(c.type)) for c in info.signature.inputs.inputs] == [
        ("a", "DataType.double"), ("f", "DataType.double"), ("v", "Any"), ("ad", "Any"), ("af", "Any")
    ]  # fmt: skip

    test = mixed_rows(spark_ml, 60, partitions=2, seed=9)
    transformed = {r["id"]: r["prediction"] for r in model.transform(test).collect()}
    ids = sorted(transformed)
    expected = [transformed[i] for i in ids]

    records = [
        {"a": r["a"], "f": r["f"], "v": r["v"].toArray().tolist(), "ad": list(r["ad"]), "af": list(r["af"])}
        for r in test.orderBy("id").collect()
    ]
    loaded = mlflow.pyfunc.load_model(model.mlflow_model_uri)
    np.testing.assert_allclose(np.asarray(loaded.predict(pd.DataFrame(records)))[:, 0], expected, rtol=1e-6)
    with pytest.raises(mlflow.exceptions.MlflowException, match=r"missing inputs.*'af'"):
        loaded.predict(pd.DataFrame(records).drop(columns=["af"]))
    local = mlflow.artifacts.download_artifacts(model.mlflow_model_uri, dst_path=str(tmp_path / "model"))
    first, again = (mlflow.pyfunc.load_model(local)._model_impl for _ in range(2))  # spark_udf: once per task
    assert again is first, "a process loaded the same model files twice"
    os.utime(next(p for p in Path(local, "data").iterdir() if p.is_file()), ns=(1, 10**18))
    assert mlflow.pyfunc.load_model(local)._model_impl is not first, (
        "a changed model file was not loaded again"
    )

    udf = mlflow.pyfunc.spark_udf(spark_ml, model.mlflow_model_uri, result_type="double", env_manager="local")
    from pyspark.ml.functions import vector_to_array  # MLflow's schema check refuses Spark's vector struct

    columns = [vector_to_array("v").alias("v") if c == "v" else c for c in MIXED]
    by_udf = {r["id"]: r["p"] for r in test.select("id", udf(*columns).alias("p")).collect()}
    np.testing.assert_allclose([by_udf[i] for i in ids], expected, rtol=1e-6)

    served = _served(
        model.mlflow_model_uri, {"dataframe_records": records}, tmp_path
    )  # records of the outputs
    np.testing.assert_allclose(
        pd.DataFrame(served["predictions"]).to_numpy(dtype=float).reshape(-1), expected, rtol=1e-6
    )

    from_uri = ScoringModel(model_uri=model.mlflow_model_uri, feature_cols=MIXED).transform(test).collect()
    assert {r["id"]: r["prediction"] for r in from_uri} == pytest.approx(transformed, rel=1e-6)


_RECORDING: list[list[str]] = []
"""The lists `_processes_started` fills: an audit hook cannot be removed, so the one hook records only while one
is open."""


def _record_process_starts(event: str, args: tuple[Any, ...]) -> None:
    if _RECORDING and event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn"):
        _RECORDING[-1].append(repr(args))


@contextlib.contextmanager
def _processes_started() -> Iterator[list[str]]:
    """The arguments (executable, argv, ...) of every process this Python process starts inside the block, as its
    audit events name them."""
    _hooked()
    started: list[str] = []
    _RECORDING.append(started)
    try:
        yield started
    finally:
        _RECORDING.remove(started)


@functools.cache
def _hooked() -> None:
    sys.addaudithook(_record_process_starts)


def _served(uri: str, body: dict[str, Any], tmp_path: Path) -> Any:
    """`body`'s answer from ``mlflow models serve -m uri`` (the venv's own environment: --env-manager local), on
    a port of its own; the server and its workers are stopped after."""
    import json

    from bench.model_serve import post, serving

    with open(tmp_path / "serve.log", "w+b") as log, serving(uri, log, start_timeout_s=180) as base:
        return post(f"{base}/invocations", json.dumps(body).encode())


def test_a_logged_models_requirements_pin_the_ranks_versions_else_the_drivers() -> None:
    """`requirements.pip_requirements`: rank 0's version where it reported one (local label dropped), the
    driver's for the rest (a module named as its distribution's underscore spelling too), nothing for a module
    no distribution provides; the pyfunc wrapper's numpy and pandas always."""
    from sparkrunner.ml import requirements

    found = requirements.pip_requirements({"torch", "pytorch_lightning", "builtins"}, {"torch": "9.9.9+cpu"})
    driver = {
        name: Version(metadata.version(name)).public for name in ("pytorch-lightning", "numpy", "pandas")
    }
    assert found == sorted(["torch==9.9.9", *(f"{name}=={version}" for name, version in driver.items())])
