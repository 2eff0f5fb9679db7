"""Which epoch a Keras fit returns under `checkpoint_callback` (Horovod's meaning: a save_best_only callback gives
the best epoch by its monitored metric, any other the last): the choice read from Keras' own ModelCheckpoint
(tf_keras and Keras 3) and from the `BestModelCheckpoint` stand-in, and the ranks' keeper of the best weights
driven through a monitored history on a real Keras model, no Spark. Oracle: numpy's argmin/argmax of the
history (the first of equal values, as Keras keeps). Modules: `sparkrunner.ml.best_model`,
`sparkrunner.ml.ranks.keras_training`, `sparkrunner.compat.horovod_keras_callbacks`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sparkrunner.compat.horovod_keras_callbacks import BestModelCheckpoint
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml.best_model import BestOf, best_of
from sparkrunner.ml.ranks.keras_training import _best_keeper

keras = pytest.importorskip("keras")
tf_keras = pytest.importorskip("tf_keras")


def test_the_choice_is_read_from_keras_and_horovods_checkpoint_callbacks() -> None:
    assert best_of(None) is None
    assert best_of(keras.callbacks.ModelCheckpoint("m.keras")) is None  # not save_best_only: the last epoch
    assert best_of(BestModelCheckpoint()) == BestOf("val_loss", "min")
    assert best_of(BestModelCheckpoint(monitor="val_accuracy")) == BestOf("val_accuracy", "max")
    assert best_of(BestModelCheckpoint(monitor="val_exp_rmspe", mode="max")) == BestOf("val_exp_rmspe", "max")
    three = keras.callbacks.ModelCheckpoint("m.keras", monitor="val_auc", save_best_only=True)
    assert best_of(three) == BestOf("val_auc", "max")
    legacy = tf_keras.callbacks.ModelCheckpoint("m", monitor="loss", mode="max", save_best_only=True)
    assert best_of(legacy) == BestOf("loss", "max")  # tf_keras keeps only its comparison (np.greater)
    with pytest.raises(InvalidArgumentError, match=r"save_freq=5: .* give save_freq='epoch'"):
        best_of(BestModelCheckpoint(save_freq=5))
    with pytest.raises(InvalidArgumentError, match=r"mode='lowest': give 'min', 'max' or 'auto'"):
        best_of(BestModelCheckpoint(mode="lowest"))


@pytest.mark.parametrize(
    ("mode", "values"),
    [("min", [0.9, 0.4, 0.7, 0.4, 0.5]), ("max", [0.2, 0.8, 0.8, 0.6, 0.1]), ("min", [0.3, 0.2, 0.1])],
)
def test_the_ranks_keep_the_weights_of_the_best_epoch(mode: str, values: list[float]) -> None:
    """Each epoch's weights are the epoch's number; the keeper ends holding the best epoch's."""
    model = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)])
    keeper: Any = _best_keeper(keras, BestOf("val_metric", mode))
    keeper.set_model(model)
    for epoch, value in enumerate(values):
        model.set_weights([np.full(w.shape, epoch, w.dtype) for w in model.get_weights()])
        keeper.on_epoch_end(epoch, {"loss": 1.0, "val_metric": value})
    best = int(np.argmin(values) if mode == "min" else np.argmax(values))
    assert [float(w.flat[0]) for w in keeper.weights] == [best, best]
    with pytest.raises(InvalidArgumentError, match=r"monitors 'val_metric', which .* report \['loss'\]"):
        keeper.on_epoch_end(len(values), {"loss": 1.0})
    assert _best_keeper(keras, None) is None


def test_a_packed_keras_3_model_carries_its_registered_layer_and_no_compile_settings() -> None:
    """A process without the registration (here: the registry entry removed before unpickling) rebuilds the
    model from what `packed` carries; the function metric it was compiled with is not needed (oracle: the
    model's own outputs before packing)."""
    import cloudpickle

    from sparkrunner.ml import keras_models

    @keras.saving.register_keras_serializable(package="kest_test")
    class Doubled(keras.layers.Layer):
        def call(self, x: Any) -> Any:
            return 2.0 * x

    def unregistered_metric(y_true: Any, y_pred: Any) -> Any:
        return keras.ops.mean(y_pred)

    model = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(3), Doubled()])
    model.compile(loss="mse", metrics=[unregistered_metric])
    x = np.arange(4, dtype="float32").reshape(2, 2)
    payload = keras_models.packed(model)
    del keras.saving.get_custom_objects()["kest_test>Doubled"]
    again = cloudpickle.loads(payload)
    np.testing.assert_allclose(keras_models.predict(again, x), keras_models.predict(model, x), rtol=1e-6)
