"""`LightningEstimator`: a PyTorch Lightning `LightningModule` trained by a Lightning `Trainer` in each of
sparkrunner's ranks (DDP across them) as a Spark ML stage; `fit` returns a `TorchModel`, which scores it."""

from __future__ import annotations

from typing import Any

from pyspark import keyword_only
from pyspark.ml import Estimator

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml.driver import checks, fit_stage
from sparkrunner.ml.driver.persistence import SavedParams
from sparkrunner.ml.driver.torch_estimator import TorchModel, fitted_torch_model, input_contract
from sparkrunner.ml.entry import RankEntry
from sparkrunner.ml.outputs import PROBABILITY_KINDS
from sparkrunner.ml.params import LightningParams
from sparkrunner.ml.spec import TrainSpec
from sparkrunner.options import check_choice

_TRAIN = RankEntry("sparkrunner.ml.ranks.lightning_training", "train")
_RESERVED = ("strategy", "max_epochs", "callbacks", "default_root_dir", "use_distributed_sampler")


class LightningEstimator(Estimator, LightningParams, SavedParams):
    """Trains a ``pytorch_lightning.LightningModule`` on `np` ranks; `fit(df)` returns a `TorchModel`.

    ``training_step``/``validation_step`` receive each batch as ``{column: tensor}`` (as Horovod's Lightning
    estimator gives them): a scalar column ``(rows,)``, an array or vector column ``(rows, n)``, integer labels as
    int64 and every other column as float32; with `input_shapes` (`label_shapes`), each feature (label) column in
    its shape ``(rows, *shape)``. ``forward`` receives
    the `feature_cols` side by side as one float32 matrix (what `transform` scores), or with `input_shapes` one
    tensor per feature column in its shape, as Horovod passes them. What the module logs per epoch (``self.log``) becomes the model's `history`. See docs/ml.md.
    """

    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(
        self,
        *,
        model: Any = None,
        callbacks: list[Any] | None = None,
        trainer_args: dict[str, Any] | None = None,
        feature_cols: list[str] | None = None,
        label_cols: list[str] | None = None,
        batch_size: int = 32,
        epochs: int = 1,
        validation: float | str | None = None,
        sample_weight_col: str | None = None,
        num_proc: int | None = None,
        np: int | None = None,
        launcher: str = "direct",
        data: str = "materialize",
        store: str | None = None,
        checkpoint_dir: str | None = None,
        max_failures: int = 0,
        timeout: float | None = None,
        tracking: Any = None,
        run_id: str | None = None,
        verbose: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        log_model: bool = True,
        probability: str | None = None,
        input_shapes: list[list[int]] | None = None,
        label_shapes: list[list[int]] | None = None,
        inmemory_cache_all: bool = False,
        val_batch_size: int | None = None,
        train_steps_per_epoch: int | None = None,
        validation_steps_per_epoch: int | None = None,
        prediction_col: str = "prediction",
        probability_col: str = "probability",
    ) -> None:
        super().__init__()
        self._set(**self._input_kwargs)

    @keyword_only
    def setParams(self, **params: Any) -> LightningEstimator:
        return self._set(**self._input_kwargs)

    def _fit(self, dataset: Any) -> TorchModel:
        fit_stage.check_input(self, dataset)
        spec = self._spec(dataset)
        fitted = fit_stage.fit_on_ranks(self, dataset, spec, _TRAIN, spec)
        return fitted_torch_model(self, dataset, fitted, spec)

    def _spec(self, dataset: Any) -> TrainSpec:
        get = self.getOrDefault
        module, callbacks, trainer_args = get("model"), get("callbacks"), get("trainer_args")
        if not _is_lightning_module(module):
            raise InvalidArgumentError(
                f"model must be a pytorch_lightning.LightningModule, not {type(module).__name__}"
            )
        reserved = sorted(set(trainer_args or {}) & set(_RESERVED))
        if reserved:
            raise InvalidArgumentError(
                f"trainer_args cannot set {', '.join(reserved)}: the estimator sets them (epochs= for "
                "max_epochs, callbacks= for callbacks, checkpoint_dir= for checkpoints)"
            )
        probability = check_choice("probability", get("probability"), PROBABILITY_KINDS)
        payload = checks.pickled("model, callbacks or trainer_args", (module, callbacks, trainer_args))
        return fit_stage.spec(
            self, TrainSpec, payload=payload, probability=probability, **input_contract(self, dataset)
        )


def _is_lightning_module(value: Any) -> bool:
    try:
        import pytorch_lightning as pl
    except ImportError as exc:
        raise InvalidArgumentError("LightningEstimator needs pytorch-lightning installed") from exc
    return isinstance(value, pl.LightningModule)
