"""Unfitted stages of every kind (the four estimators, the Horovod drop-ins, a ScoringModel) for the persistence
tests, and what must survive their save and load, as JSON that a new process prints for the test to compare."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tests.ml.nets import classifier, least_squares, linear_predict

COMMON: dict[str, Any] = dict(
    feature_cols=["x"], label_cols=["y"], batch_size=16, np=-1, launcher="direct", tracking=False, verbose=0
)  # fmt: skip


def unfitted() -> dict[str, Any]:
    """One unfitted stage of each kind, each holding live objects JSON cannot: models, optimizers, functions."""
    import tf_keras as keras

    from sparkrunner.compat import horovod_spark, horovod_spark_lightning
    from sparkrunner.ml import FunctionEstimator, KerasEstimator, LightningEstimator, ScoringModel
    from tests.ml.keras_nets import linear_model
    from tests.ml.lightning_nets import LinearRegression

    hvd_net = torch.nn.Linear(3, 1)
    return {
        "lightning": LightningEstimator(
            model=LinearRegression(lr=0.2), trainer_args={"gradient_clip_val": 0.5}, epochs=3, **COMMON
        ),
        "keras": KerasEstimator(
            model=linear_model(), optimizer=keras.optimizers.Adam(0.05), metrics=["mae"], **COMMON
        ),
        "function": FunctionEstimator(train_fn=least_squares, predict_fn=linear_predict, **COMMON),
        "horovod_torch": horovod_spark.TorchEstimator(
            num_proc=2,
            model=hvd_net,
            optimizer=torch.optim.SGD(hvd_net.parameters(), lr=0.3),
            loss=torch.nn.functional.mse_loss,
            feature_cols=["x"],
            label_cols=["y"],
            random_seed=4,
        ),
        "horovod_keras": horovod_spark.KerasEstimator(
            num_proc=2,
            model=linear_model(),
            optimizer=keras.optimizers.SGD(0.1),
            loss="mae",
            feature_cols=["x"],
            label_cols=["y"],
            batch_size=8,
        ),
        "horovod_lightning": horovod_spark_lightning.TorchEstimator(
            num_proc=2, model=LinearRegression(), feature_cols=["x"], label_cols=["y"], epochs=2
        ),
        "scoring": ScoringModel(builder=classifier, feature_cols=["x"], output_size=2, probability="softmax"),
    }


def fingerprint(stage: Any) -> dict[str, Any]:
    """The class, uid and every Param of `stage` as JSON: a model by its weights' sums, an optimizer by its type,
    settings and whether it optimizes the stage's own model's parameters, a function by its name."""
    params = stage.extractParamMap()
    model = next((v for p, v in params.items() if p.name == "model"), None)
    described = {p.name: _describe(v, model) for p, v in params.items()}
    return {"class": f"{type(stage).__module__}.{type(stage).__name__}", "uid": stage.uid, **described}


def _describe(value: Any, model: Any) -> Any:
    if isinstance(value, torch.nn.Module):
        return {"module": type(value).__name__, "sums": [float(t.sum()) for t in value.state_dict().values()]}
    if isinstance(value, torch.optim.Optimizer):
        (group,) = value.param_groups
        owned = [id(p) for p in model.parameters()] if model is not None else []
        return {
            "optimizer": type(value).__name__,
            "lr": group["lr"],
            "binds": [id(p) for p in group["params"]] == owned,
        }
    if hasattr(value, "get_weights"):  # a Keras model
        return {"keras": type(value).__name__, "sums": [float(np.sum(w)) for w in value.get_weights()]}
    if hasattr(value, "get_config") or (
        isinstance(value, dict) and "class_name" in value
    ):  # a Keras optimizer
        config = (
            value.get_config() if hasattr(value, "get_config") else value["config"]
        )  # or its saved config
        return {"keras_optimizer": config["name"], "lr": float(config["learning_rate"])}
    if callable(value):
        inner = getattr(value, "fn", value)  # sparkrunner's wrappers of a loss function hold it as `fn`
        return {"function": f"{type(value).__name__}:{getattr(inner, '__name__', type(inner).__name__)}"}
    return value
