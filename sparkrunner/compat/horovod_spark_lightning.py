"""Drop-in for ``horovod.spark.lightning.TorchEstimator`` / ``TorchModel``: Horovod's signature, sparkrunner's
`sparkrunner.ml.LightningEstimator` underneath (a Lightning Trainer per rank, DDP across sparkrunner's ranks).

    from sparkrunner.compat.horovod_spark_lightning import TorchEstimator   # was: from horovod.spark.lightning
    model = TorchEstimator(num_proc=2, store=store, model=lightning_module, feature_cols=["features"],
                           label_cols=["y"], batch_size=32, epochs=5).fit(df)
    model.transform(df)                                                      # appends "y__output"
"""

from __future__ import annotations

from typing import Any

from pyspark import keyword_only

from sparkrunner.compat.horovod_estimators import TorchModel, as_drop_in
from sparkrunner.compat.horovod_params import translated
from sparkrunner.ml.driver import lightning_estimator

MIN_PL_VERSION = "2.0.0"
"""The oldest ``pytorch_lightning`` the estimator runs with (Horovod's constant of the same name, for the same
check; Horovod's was 1.3.8, sparkrunner's Trainer arguments are Lightning 2's)."""

_ALSO = ("callbacks", "trainer_args", "input_shapes", "label_shapes", "inmemory_cache_all")
"""What sparkrunner's LightningEstimator honours besides Horovod's common names."""
_NOT_PASSED = ("optimizer", "loss", "loss_constructors", "metrics")
"""The LightningModule's own ``configure_optimizers``, ``training_step`` and ``self.log`` say these."""
_TRAINER_ARGS = {"logger": None, "log_every_n_steps": 50, "profiler": None}
"""Horovod's names for arguments of Lightning's Trainer (with Horovod's defaults): they go into `trainer_args`."""


class TorchEstimator(lightning_estimator.LightningEstimator):
    """``horovod.spark.lightning.TorchEstimator``'s arguments (see `sparkrunner.compat.horovod_params` for what is
    refused; `callbacks`, `trainer_args`, `input_shapes`, `label_shapes`, `inmemory_cache_all` are honoured, and
    `logger`, `log_every_n_steps`, `profiler` go into `trainer_args`), plus sparkrunner's own as keywords. `fit`
    returns a `TorchModel` whose output column is ``<label>__output``."""

    @keyword_only
    def __init__(
        self,
        num_proc: int | None = None,
        model: Any = None,
        backend: Any = None,
        store: Any = None,
        optimizer: Any = None,
        loss: Any = None,
        loss_constructors: Any = None,
        metrics: Any = None,
        loss_weights: Any = None,
        sample_weight_col: str | None = None,
        gradient_compression: Any = None,
        feature_cols: list[str] | None = None,
        input_shapes: Any = None,
        validation: float | str | None = None,
        label_cols: list[str] | None = None,
        callbacks: Any = None,
        batch_size: int | None = None,
        val_batch_size: Any = None,
        epochs: int | None = None,
        verbose: int = 1,
        random_seed: int | None = None,
        shuffle_buffer_size: Any = None,
        shuffle: bool = True,
        partitions_per_process: Any = None,
        run_id: str | None = None,
        train_minibatch_fn: Any = None,
        train_steps_per_epoch: Any = None,
        validation_steps_per_epoch: Any = None,
        transformation_fn: Any = None,
        transformation_edit_fields: Any = None,
        transformation_removed_fields: Any = None,
        train_reader_num_workers: Any = None,
        trainer_args: dict[str, Any] | None = None,
        val_reader_num_workers: Any = None,
        reader_pool_type: Any = None,
        label_shapes: Any = None,
        inmemory_cache_all: bool = False,
        num_gpus: Any = None,
        logger: Any = None,
        log_every_n_steps: int = 50,
        data_module: Any = None,
        loader_num_epochs: Any = None,
        terminate_on_nan: bool = False,
        profiler: Any = None,
        debug_data_loader: bool = False,
        train_async_data_loader_queue_size: Any = None,
        val_async_data_loader_queue_size: Any = None,
        use_gpu: bool = True,
        mp_start_method: Any = None,
        **sparkrunner_params: Any,
    ) -> None:
        super().__init__(**_lightning_params(self._input_kwargs))

    @keyword_only
    def setParams(self, **horovod_params: Any) -> TorchEstimator:
        return self._set(**_lightning_params(self._input_kwargs))

    def _fit(self, dataset: Any) -> TorchModel:
        return as_drop_in(TorchModel(), super()._fit(dataset))


def _lightning_params(given: dict[str, Any]) -> dict[str, Any]:
    """`translated` Params, with Horovod's Trainer arguments (`logger`, `log_every_n_steps`, `profiler`) moved
    into `trainer_args`, where the Trainer of every rank gets them."""
    moved = {k: given[k] for k, default in _TRAINER_ARGS.items() if k in given and given[k] != default}
    rest = {k: v for k, v in given.items() if k not in _TRAINER_ARGS}
    if moved:
        rest["trainer_args"] = {**moved, **(rest.get("trainer_args") or {})}
    return translated(rest, _ALSO, _NOT_PASSED)


__all__ = ["MIN_PL_VERSION", "TorchEstimator", "TorchModel"]
