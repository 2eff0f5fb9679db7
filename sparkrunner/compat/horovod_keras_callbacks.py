"""Stand-ins for what Horovod's Spark Keras examples import from ``horovod.tensorflow.keras.callbacks``, whose
TensorFlow extension does not build on TensorFlow >= 2.20:

    from sparkrunner.compat.horovod_keras_callbacks import BestModelCheckpoint
    # was: from horovod.tensorflow.keras.callbacks import BestModelCheckpoint
"""

from __future__ import annotations


class BestModelCheckpoint:
    """Horovod's ``BestModelCheckpoint`` for the Keras estimators' `checkpoint_callback`: the fitted model is the
    epoch's best by `monitor` (`mode` "min", "max", or "auto": an accuracy is maximised, anything else
    minimised). Like Horovod's, it takes no file path; the estimator keeps the best weights itself."""

    save_best_only = True
    save_weights_only = False

    def __init__(
        self, monitor: str = "val_loss", verbose: int = 0, mode: str = "auto", save_freq: str | int = "epoch"
    ) -> None:
        self.monitor = monitor
        self.verbose = verbose
        self.mode = mode
        self.save_freq = save_freq

    def __repr__(self) -> str:
        return (
            f"BestModelCheckpoint(monitor={self.monitor!r}, mode={self.mode!r}, save_freq={self.save_freq!r})"
        )
