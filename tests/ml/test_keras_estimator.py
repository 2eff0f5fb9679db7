"""`KerasEstimator.fit` on real ranks under TensorFlow's MultiWorkerMirroredStrategy (np < 0 with the rows
streamed, and a `local[2]` barrier stage with the rows materialized; launcher "direct", tf_keras) and
`KerasModel.transform` on real executors, as a Pipeline's last stage and through a save/load round trip.
Oracles: the function that generated the labels, the fitted model's own forward pass on the driver, MLflow's
store (the logged model loaded back through pyfunc), and the passes over the streamed rows each rank opened, as
the driver's stream brokers received them. Modules: `sparkrunner.ml.driver.keras_estimator`,
`sparkrunner.ml.ranks.keras_training`, `sparkrunner.ml.ranks.keras3_data` (Keras 3), `sparkrunner.ml.keras_models`."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import pytest
from pyspark.ml import Pipeline, PipelineModel

from sparkrunner.compat.horovod_keras_callbacks import BestModelCheckpoint
from sparkrunner.data.driver import stream_broker
from sparkrunner.ml import KerasEstimator, KerasModel
from tests.ml.keras_nets import linear_model, mean_abs_error, scaled_tanh, tf_scaled_tanh
from tests.ml.nets import BIAS, WEIGHTS, class_rows, linear_rows
from tests.recovery.processes import rank_pid

pytestmark = [pytest.mark.spark, pytest.mark.slow]
keras = pytest.importorskip("tf_keras")


def test_a_pipeline_ending_in_keras_learns_logs_saves_and_loads(
    spark_ml: Any, store: Path, tracking_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    estimator = KerasEstimator(
        model=linear_model(), optimizer=keras.optimizers.Adam(0.05), loss="mse", feature_cols=["x"],
        label_cols=["y"], batch_size=32, epochs=10, validation=0.25, np=-2, launcher="direct",
        data="stream", store=str(store), tracking=tracking_uri, verbose=0,
    )  # fmt: skip
    opened = _record_stream_opens(monkeypatch)
    fitted = Pipeline(stages=[estimator]).fit(linear_rows(spark_ml, 1200))  # streamed: no copy of the rows
    model = fitted.stages[-1]
    # every rank opened the same passes, and no more than the fit reads: one per training epoch, one of the
    # validation rows (tf.data's read-ahead once opened passes on some ranks only, and the run hung)
    passes = {stream: [sorted(by_pass[i]) for i in sorted(by_pass)] for stream, by_pass in opened.items()}
    assert passes == {"training": [[0, 1]] * 10, "validation": [[0, 1]]}

    assert isinstance(model, KerasModel)
    kernel, bias = model.getModel().get_weights()
    np.testing.assert_allclose(kernel[:, 0], WEIGHTS, atol=0.1)
    np.testing.assert_allclose(bias[0], BIAS, atol=0.1)
    assert len(model.history["loss"]) == len(model.history["val_loss"]) == 10
    assert model.history["val_loss"][-1] < 0.01 < model.history["val_loss"][0]
    history = mlflow.MlflowClient(tracking_uri).get_metric_history(model.mlflow_run_id, "val_loss")
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(
        model.history["val_loss"]
    )

    test = linear_rows(spark_ml, 200, partitions=2, seed=100)
    rows = fitted.transform(test).collect()
    x, predictions = np.array([r["x"] for r in rows], np.float32), np.array([r["prediction"] for r in rows])
    np.testing.assert_allclose(
        predictions, model.getModel().predict(x, verbose=0)[:, 0], rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(predictions, x @ WEIGHTS + BIAS, atol=0.1)

    # the fit's store, as a user names it (MLflow's _use_tracking_uri would unset the session's variable)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)
    logged = mlflow.pyfunc.load_model(model.mlflow_model_uri)
    assert [(c.name, str(c.type)) for c in logged.metadata.signature.inputs.inputs] == [("x", "Any")]
    by_column = np.asarray(logged.predict(pd.DataFrame({"x": list(x.astype(np.float64))})))
    np.testing.assert_allclose(by_column[:, 0], predictions, rtol=1e-5, atol=1e-5)

    fitted.write().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(loaded.stages[-1], KerasModel) and loaded.stages[-1].history == model.history
    again = np.array([r["prediction"] for r in loaded.transform(test).collect()])
    np.testing.assert_allclose(again, predictions, rtol=1e-6)


def _record_stream_opens(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[int, list[int]]]:
    """Filled as the driver's stream brokers receive them (np < 0: the brokers run in this process): the ranks
    that opened each pass (by the loader's iteration) of the training stream (shuffled) and of the validation
    stream."""
    opened: dict[str, dict[int, list[int]]] = {"training": {}, "validation": {}}
    original = stream_broker.StreamBroker._open

    def recording(broker: Any, conn: Any, message: Any) -> None:
        passes = opened["training" if broker.data.shuffle else "validation"]
        passes.setdefault(message.iteration, []).append(message.rank)
        original(broker, conn, message)

    monkeypatch.setattr(stream_broker.StreamBroker, "_open", recording)
    return opened


def test_a_classifier_trained_in_a_barrier_stage_gives_classes_and_probabilities(
    spark_ml: Any, store: Path
) -> None:
    """np=2 on Spark, tf_keras, with BatchNormalization (its moving statistics are read across the workers, a
    collective every rank must join at the end), a custom activation given through custom_objects (the ranks,
    the driver and the scoring workers rebuild the model with it) and Horovod's BestModelCheckpoint. The label
    is a double column, as Horovod's examples read it from libsvm, into Keras' sparse loss (Horovod's contract:
    a scalar column of any numeric type is one value a row)."""
    from pyspark.sql import functions as F

    keras.utils.set_random_seed(0)
    net = keras.Sequential(
        [
            keras.Input(shape=(2,)),
            keras.layers.BatchNormalization(momentum=0.5),  # its moving statistics settle in a few steps
            keras.layers.Dense(16, activation=tf_scaled_tanh),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model = KerasEstimator(
        model=net, optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy",
        metrics=["accuracy"], feature_cols=["a", "b"], label_cols=["label"], batch_size=40, epochs=8,
        validation=0.2, np=2, launcher="direct", store=str(store), tracking=False, verbose=0,
        custom_objects={"tf_scaled_tanh": tf_scaled_tanh},
        checkpoint_callback=BestModelCheckpoint(monitor="val_accuracy"),
    ).fit(class_rows(spark_ml, 1600).withColumn("label", F.col("label").cast("double")))  # fmt: skip

    assert set(model.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert max(model.history["val_accuracy"]) > 0.9
    rows = model.transform(class_rows(spark_ml, 200, partitions=2)).collect()
    probability = np.array([r["probability"] for r in rows])
    local = model.getModel().predict(np.array([[r["a"], r["b"]] for r in rows], np.float32), verbose=0)
    np.testing.assert_allclose(probability, local, rtol=1e-5, atol=1e-6)
    assert [r["prediction"] for r in rows] == list(probability.argmax(axis=1).astype(float))
    assert np.mean([r["prediction"] == r["label"] for r in rows]) > 0.9


def _keras3_linear(optimizer: str = "sgd") -> Any:
    import keras as keras3

    keras3.utils.set_random_seed(0)
    return keras3.Sequential([keras3.Input(shape=(3,)), keras3.layers.Dense(1)])


def test_keras_3_learns_on_two_ranks_what_it_learns_on_one(spark_ml: Any, store: Path) -> None:
    """np < 0, launcher "direct", Keras 3 (its torch backend in the ranks, gradients averaged over gloo). Full
    batches (one per rank), so each step's averaged gradient is the one-rank step's: the weights of np=-2 and
    np=-1 agree to float rounding, and the loss falls."""
    import keras as keras3

    frame = linear_rows(spark_ml, 600)
    fits = {
        np_: KerasEstimator(
            model=_keras3_linear(), optimizer=keras3.optimizers.SGD(0.5), loss="mse", feature_cols=["x"],
            label_cols=["y"], batch_size=600 // abs(np_), epochs=40, np=np_, launcher="direct",
            store=str(store), tracking=False, verbose=0,
        ).fit(frame)
        for np_ in (-1, -2)
    }  # fmt: skip
    one, two = (fits[n].getModel().get_weights() for n in (-1, -2))
    assert type(fits[-2].getModel()).__module__.startswith("keras.")
    for a, b in zip(one, two, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fits[-2].history["loss"], fits[-1].history["loss"], rtol=1e-4)
    assert fits[-2].history["loss"][-1] < 0.2 * fits[-2].history["loss"][0]


class RankEpochs:
    """A callback that leaves a file per (rank, epoch): which ranks ran it."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __getattr__(self, name: str) -> Any:  # Keras' other hooks: nothing to do
        if name.startswith("on_") or name in ("set_model", "set_params"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        from sparkrunner import rank_context

        Path(self.folder, f"rank{rank_context().rank}-epoch{epoch}").write_text(
            os.environ.get("TF_USE_LEGACY_KERAS", "unset")
        )


def test_keras_3_with_horovods_input_contract_callbacks_and_memory_cache(
    spark_ml: Any, store: Path, tmp_path: Path, tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """np=-2, launcher "direct", Keras 3: two feature columns fed in the model's input shape (2, 1),
    labels in label_shapes [[1]], a callback of the user's on both ranks and a CSVLogger (a writer, appending)
    on rank 0 only, inmemory_cache_all; the classes learnt (oracle: the rule that made the labels). Two ranks on
    the driver: KerasEstimator's barrier stage is the tf_keras classifier's above, the same driver code for
    either Keras. With BatchNormalization, a custom activation through custom_objects and a plain-function
    metric (the compiled model's config names it): logged to MLflow, whose pyfunc and `transform` give the
    driver's model's outputs; the ranks' `tf.keras` is Keras 3 (TF_USE_LEGACY_KERAS=0)."""
    import keras as keras3

    keras3.utils.set_random_seed(0)
    net = keras3.Sequential(
        [
            keras3.Input(shape=(2, 1)),
            keras3.layers.Flatten(),
            keras3.layers.BatchNormalization(momentum=0.5),
            keras3.layers.Dense(16, activation=scaled_tanh),
            keras3.layers.Dense(2, activation="softmax"),
        ]
    )
    log = tmp_path / "log.csv"
    model = KerasEstimator(
        model=net, optimizer=keras3.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy",
        metrics=["accuracy", mean_abs_error], feature_cols=["a", "b"], label_cols=["label"], label_shapes=[[1]],
        batch_size=40, epochs=6, np=-2, launcher="direct", store=str(store), tracking=tracking_uri, verbose=0,
        inmemory_cache_all=True, custom_objects={"scaled_tanh": scaled_tanh},
        callbacks=[RankEpochs(str(tmp_path)), keras3.callbacks.CSVLogger(str(log), append=True)],
    ).fit(class_rows(spark_ml, 1600))  # fmt: skip

    written = {p.name: p.read_text() for p in tmp_path.glob("rank*")}
    assert written == {f"rank{r}-epoch{e}": "0" for r in (0, 1) for e in range(6)}
    assert len(log.read_text().splitlines()) == 1 + 6  # one header, one line per epoch: rank 0 alone wrote
    assert model.history["accuracy"][-1] > 0.9 and len(model.history["mean_abs_error"]) == 6
    test = class_rows(spark_ml, 200, partitions=2)
    rows = model.transform(test).collect()
    assert np.mean([r["prediction"] == r["label"] for r in rows]) > 0.9
    x = np.array([[r["a"], r["b"]] for r in rows], np.float32)
    local = keras3.ops.convert_to_numpy(model.getModel()(x.reshape(-1, 2, 1), training=False))
    np.testing.assert_allclose([r["probability"] for r in rows], local, rtol=1e-5, atol=1e-6)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)
    logged = mlflow.pyfunc.load_model(model.mlflow_model_uri)
    served = np.asarray(logged.predict(pd.DataFrame({"a": x[:, 0], "b": x[:, 1]})))
    np.testing.assert_allclose(served, local, rtol=1e-5, atol=1e-6)


def test_keras_input_that_cannot_train_is_refused_before_any_rank_starts(spark_ml: Any) -> None:
    """No rank starts (np=-2, launcher "direct"): each error names what is wrong."""
    import threading

    import jax.numpy as jnp
    import keras as keras3
    import torch

    from sparkrunner.errors import InvalidArgumentError, NotPicklableError

    frame = linear_rows(spark_ml, 200)
    base = dict(feature_cols=["x"], label_cols=["y"], np=-2, launcher="direct", tracking=False, verbose=0)
    with pytest.raises(InvalidArgumentError, match="model must be a Keras model, not Linear"):
        KerasEstimator(model=torch.nn.Linear(3, 1), **base).fit(frame)

    class Locked(keras3.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.lock = threading.Lock()

    with pytest.raises(NotPicklableError, match=r"callback Locked \(callbacks\[1\]\)"):
        KerasEstimator(model=_keras3_linear(), callbacks=[keras3.callbacks.History(), Locked()], **base).fit(
            frame
        )

    jax_layer = keras3.layers.JaxLayer(lambda inputs: jnp.tanh(inputs), name="jaxtanh")
    foreign = keras3.Sequential([keras3.Input(shape=(3,)), jax_layer, keras3.layers.Dense(1)])
    with pytest.raises(
        InvalidArgumentError, match="layer 'jaxtanh' \\(JaxLayer\\) runs on the jax backend only"
    ):
        KerasEstimator(model=foreign, **base).fit(frame)

    square = keras3.Sequential([keras3.Input(shape=(2, 2)), keras3.layers.Flatten(), keras3.layers.Dense(1)])
    with pytest.raises(
        InvalidArgumentError,
        match=r"input shape\(s\): the column 'x' holds 3 values a row, but its shape \[-1, 2, 2\] holds 4",
    ):
        KerasEstimator(model=square, **base).fit(frame)
    with pytest.raises(
        InvalidArgumentError,
        match=r"label_shapes: the column 'y' holds 1 values a row, but its shape \[-1, 2\] holds 2",
    ):
        KerasEstimator(model=_keras3_linear(), label_shapes=[[2]], **base).fit(frame)
    with pytest.raises(
        InvalidArgumentError, match=r"monitors 'val_loss', a validation metric, but validation"
    ):
        KerasEstimator(model=_keras3_linear(), checkpoint_callback=BestModelCheckpoint(), **base).fit(frame)
    with pytest.raises(InvalidArgumentError, match=r"custom_objects=\[.*give a dict of the names"):
        KerasEstimator(model=_keras3_linear(), custom_objects=[scaled_tanh], **base).fit(frame)


class CheckpointWatch:
    """In the background: note each epoch's checkpoint file as it appears under `folder` (any depth), and SIGKILL
    rank 1's process (found in the process table) once the checkpoint of epoch `kill_after` is there."""

    def __init__(self, folder: Path, kill_after: int, seconds: float = 240) -> None:
        self.appeared: list[int] = []
        self.killed: int | None = None
        self._folder, self._kill_after, self._seconds = folder, kill_after, seconds
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _epochs(self) -> set[int]:
        return {int(p.name.split("-")[1].split(".")[0]) for p in self._folder.rglob("checkpoint-*.*")}

    def _watch(self) -> None:
        seen: set[int] = set()
        deadline = time.monotonic() + self._seconds
        while not self._done.is_set() and time.monotonic() < deadline:
            now = self._epochs()
            self.appeared += sorted(now - seen)
            seen = now
            if self.killed is None and self._kill_after in now:
                self.killed = rank_pid(1)
                os.kill(self.killed, signal.SIGKILL)
            time.sleep(0.01)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)


def test_a_fit_whose_rank_is_killed_resumes_from_the_latest_epoch(
    spark_ml: Any, store: Path, tmp_path: Path
) -> None:
    """np < 0, launcher direct, max_failures=1. The test SIGKILLs rank 1 once epoch 2's checkpoint exists: the
    retry restores the weights and the optimizer and trains epochs 3 to 7 only, so every epoch's checkpoint
    appears once (a restart from scratch would write epoch 0's again), and the fit still learns the function."""
    watch = CheckpointWatch(tmp_path / "checkpoints", kill_after=2)
    try:
        model = KerasEstimator(
            model=linear_model(), optimizer=keras.optimizers.Adam(0.05), loss="mse", feature_cols=["x"],
            label_cols=["y"], batch_size=16, epochs=8, np=-2, launcher="direct", max_failures=1,
            checkpoint_dir=str(tmp_path / "checkpoints"), store=str(store), tracking=False, verbose=0,
        ).fit(linear_rows(spark_ml, 800))  # fmt: skip
    finally:
        watch.stop()
    assert watch.killed is not None, "rank 1 was never killed"
    assert watch.appeared == list(range(8))
    assert len(model.history["loss"]) == 8
    kernel, bias = model.getModel().get_weights()
    np.testing.assert_allclose([*kernel[:, 0], bias[0]], [*WEIGHTS, BIAS], atol=0.15)
