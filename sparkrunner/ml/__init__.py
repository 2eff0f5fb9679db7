"""Spark ML stages that train on sparkrunner's ranks and score on the executors (docs/ml.md).

    from sparkrunner.ml import TorchEstimator
    model = TorchEstimator(model=net, loss="cross_entropy", feature_cols=["features"], label_cols=["label"],
                           np=2, epochs=5).fit(train_df)          # rows reach the ranks through Spark, not here
    scored = model.transform(test_df)                             # `prediction`, `probability` on the executors

Imported on first use: ranks import `sparkrunner.ml.ranks.training` and Spark's Python workers
`sparkrunner.ml.workers.scoring`, neither of which needs the driver's estimators.
"""

from typing import TYPE_CHECKING

from sparkrunner.common.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from sparkrunner.ml.driver.generic import FunctionEstimator, FunctionModel, ScoringModel
    from sparkrunner.ml.driver.keras_estimator import KerasEstimator, KerasModel
    from sparkrunner.ml.driver.lightning_estimator import LightningEstimator
    from sparkrunner.ml.driver.torch_estimator import TorchEstimator, TorchModel

_LAZY = {
    "TorchEstimator": "sparkrunner.ml.driver.torch_estimator",
    "TorchModel": "sparkrunner.ml.driver.torch_estimator",
    "KerasEstimator": "sparkrunner.ml.driver.keras_estimator",
    "KerasModel": "sparkrunner.ml.driver.keras_estimator",
    "LightningEstimator": "sparkrunner.ml.driver.lightning_estimator",
    "FunctionEstimator": "sparkrunner.ml.driver.generic",
    "FunctionModel": "sparkrunner.ml.driver.generic",
    "ScoringModel": "sparkrunner.ml.driver.generic",
}


__getattr__ = lazy_exports("sparkrunner.ml", _LAZY)


__all__ = [
    "FunctionEstimator",
    "FunctionModel",
    "KerasEstimator",
    "KerasModel",
    "LightningEstimator",
    "ScoringModel",
    "TorchEstimator",
    "TorchModel",
]
