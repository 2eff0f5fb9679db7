"""A logged model's pip requirements against MLflow's own inference (`mlflow.models.infer_pip_requirements`, which
loads the model again in a subprocess and records what it imports; run on the same model saved in MLflow's own
flavor, as its inference cannot import a pyfunc loader from the model's code folder): for a torch module holding a fitted
scikit-learn scaler, one whose code imports scikit-learn, a Lightning module and a Keras 3 model, ours name every
distribution MLflow's name (MLflow itself aside), at the same versions. Keras 3 models load on the backend they
were saved on. Real MLflow sqlite stores, real subprocesses; no Spark, no ranks (the models are logged as a fit
logs them, with this process's versions standing in for rank 0's)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import cloudpickle
import mlflow
import numpy as np
import pytest
import torch
from packaging.version import Version

from sparkrunner.ml import requirements
from sparkrunner.ml.driver import mlflow_logging
from sparkrunner.ml.tracking_uri import tracking_uri_for_call
from tests.helpers import ROOT

pytestmark = pytest.mark.slow

EXAMPLE = np.random.default_rng(0).random((2, 3)).astype(np.float32)


OPTIONAL = {"psutil"}
"""What MLflow's inference finds because a dependency of a dependency imports it when present (joblib's loky
imports psutil where installed): no distribution the model loads with requires it, so ours need not name it."""


def pinned(lines: list[str]) -> dict[str, str]:
    """``name==version`` lines by normalized name and public version (ours drop local labels such as ``+cpu``,
    which PyPI does not serve; MLflow's keep them), MLflow's own requirement and `OPTIONAL` left out."""
    found = {}
    for line in lines:
        name, _, version = line.partition("==")
        found[re.sub(r"[-_.]+", "-", name).lower()] = Version(version).public
    return {name: version for name, version in found.items() if name not in {"mlflow", *OPTIONAL}}


def new_run(tracking_uri: str, artifacts: Path) -> str:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment(uuid.uuid4().hex, artifact_location=artifacts.as_uri())
    return str(client.create_run(experiment).info.run_id)


def logged_and_inferred(
    tracking_uri: str, model: torch.nn.Module, tmp_path: Path
) -> tuple[dict[str, str], dict[str, str]]:
    """Our requirements of `model` logged as a fit logs it, and MLflow's inference on the same model."""
    from mlflow.types.schema import AnyType, ColSpec, Schema

    _, modules = requirements.loaded_with_modules(cloudpickle.dumps(model))
    uri = mlflow_logging.log_torch_model(
        tracking_uri, new_run(tracking_uri, tmp_path / "artifacts"), model, Schema([ColSpec(AnyType(), "x")]),
        EXAMPLE, modules, requirements.installed_versions(),
    )  # fmt: skip
    with tracking_uri_for_call(tracking_uri):
        ours = Path(mlflow.pyfunc.get_model_dependencies(uri)).read_text().split()
    saved = tmp_path / "mlflow-pytorch"
    mlflow.pytorch.save_model(model, saved, serialization_format="pickle", pip_requirements=[])
    return pinned(ours), pinned(mlflow.models.infer_pip_requirements(str(saved), "pytorch"))


def fitted_scaler_holder() -> torch.nn.Module:
    from sklearn.preprocessing import StandardScaler

    model = torch.nn.Linear(3, 1)
    model.scaler = StandardScaler().fit(EXAMPLE)  # a plain attribute: pickled with the module
    return model


def code_importing_sklearn() -> torch.nn.Module:
    from tests.ml.sklearn_nets import SoftmaxHead

    return SoftmaxHead(3, 2)


def lightning_module() -> torch.nn.Module:
    from tests.ml.lightning_nets import LinearRegression

    return LinearRegression()


@pytest.mark.parametrize("build", [fitted_scaler_holder, code_importing_sklearn, lightning_module])
def test_a_torch_models_requirements_cover_mlflows_inference(
    build: Any, tracking_uri: str, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    ours, theirs = logged_and_inferred(tracking_uri, build(), tmp_path)
    assert theirs and {name: ours.get(name) for name in theirs} == theirs, (ours, theirs)
    if build is not lightning_module:
        assert "scikit-learn" in ours


_OWN_MODULE = """
import torch
from sklearn.utils.extmath import softmax


class SoftmaxHead(torch.nn.Linear):
    def forward(self, x):
        return torch.from_numpy(softmax(super().forward(x).detach().numpy()))
"""


def test_a_module_no_distribution_provides_is_left_out_and_the_log_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A model whose class lives in a module on ``sys.path`` only (pickled by reference): that module is no
    requirement and the log names it; what its code imports (scikit-learn) is one."""
    (tmp_path / "own_layers.py").write_text(_OWN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    from own_layers import SoftmaxHead  # type: ignore[import-not-found]

    with caplog.at_level(logging.WARNING, logger="sparkrunner.ml.requirements"):
        _, modules = requirements.loaded_with_modules(cloudpickle.dumps(SoftmaxHead(3, 2)))
        found = pinned(requirements.pip_requirements(modules, {}))
    assert "scikit-learn" in found and "own-layers" not in found, found
    assert any("leave out own_layers" in r.getMessage() for r in caplog.records), caplog.text
    monkeypatch.delitem(sys.modules, "own_layers")


_KERAS_PROGRAM = """
import json, sys
import keras, mlflow, numpy as np
from mlflow.types.schema import AnyType, ColSpec, Schema
from sparkrunner.ml import requirements
from sparkrunner.ml.driver import mlflow_logging
from sparkrunner.ml.tracking_uri import tracking_uri_for_call

tracking_uri, run_id, saved = sys.argv[1:]
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
example = np.zeros((2, 3), np.float32)
uri = mlflow_logging.log_keras_model(
    tracking_uri, run_id, model, Schema([ColSpec(AnyType(), "x")]), example, requirements.installed_versions()
)
with tracking_uri_for_call(tracking_uri):
    ours = open(mlflow.pyfunc.get_model_dependencies(uri)).read().split()
mlflow.keras.save_model(model, saved, pip_requirements=[])
theirs = mlflow.models.infer_pip_requirements(saved, "keras")
print("RESULT", json.dumps({"uri": uri, "ours": ours, "theirs": theirs}))
"""

_LOAD_PROGRAM = """
import sys
import mlflow, numpy as np, pandas as pd
from sparkrunner.ml.tracking_uri import tracking_uri_for_call

with tracking_uri_for_call(sys.argv[1]):
    model = mlflow.pyfunc.load_model(sys.argv[2])
import keras
print("RESULT", keras.backend.backend(), model.predict(pd.DataFrame({"x": list(np.zeros((2, 3), np.float32))})).shape)
"""


def _python(program: str, *args: str, **env: str | None) -> str:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("TF_USE_LEGACY_KERAS", None)
    for name, value in env.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    done = subprocess.run(
        [sys.executable, "-c", program, *args], env=environment, capture_output=True, text=True, timeout=300,
        cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0 and "RESULT " in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout.split("RESULT ", 1)[1].strip()


def test_a_keras_3_model_requires_its_backend_and_loads_on_it_wherever_it_goes(
    tracking_uri: str, tmp_path: Path
) -> None:
    """Saved on the torch backend: ours cover MLflow's inference (run with that backend), and a process with no
    KERAS_BACKEND set (Keras' default: tensorflow) loads it on torch and predicts."""
    run = new_run(tracking_uri, tmp_path / "artifacts")
    found = json.loads(
        _python(_KERAS_PROGRAM, tracking_uri, run, str(tmp_path / "saved"), KERAS_BACKEND="torch")
    )
    ours, theirs = pinned(found["ours"]), pinned(found["theirs"])
    assert theirs and {name: ours.get(name) for name in theirs} == theirs, (ours, theirs)
    assert "torch" in ours and "keras" in ours
    assert _python(_LOAD_PROGRAM, tracking_uri, found["uri"], KERAS_BACKEND=None) == "torch (2, 2)"
