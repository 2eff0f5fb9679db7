"""Horovod's estimator arguments (`sparkrunner.compat.horovod_params`) through the drop-in
`sparkrunner.compat.horovod_spark.TorchEstimator`: each passes on under its sparkrunner name, a Horovod Store
becomes its prefix path, and each one sparkrunner cannot honour is refused by name. The oracles: Horovod's own
source (its signature, its Store classes) and the values a Horovod user writes. No Spark, no ranks."""

from __future__ import annotations

import ast
import importlib.util
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from sparkrunner.compat.horovod_keras_callbacks import BestModelCheckpoint
from sparkrunner.compat.horovod_spark import KerasEstimator, TorchEstimator
from sparkrunner.compat.horovod_spark_lightning import TorchEstimator as LightningTorchEstimator
from sparkrunner.errors import InvalidArgumentError, SparkRunnerWarning
from sparkrunner.ml.losses import BatchMeanLoss, probability_kind


def params(stage: Any) -> dict[str, Any]:
    return {p.name: v for p, v in stage.extractParamMap().items()}


def horovod_init_args(module: str, cls: str) -> list[str]:
    """The keyword arguments of Horovod's own `cls.__init__`, read from its installed source (importing it needs
    Petastorm and TensorBoard, which this environment does not have)."""
    spec = importlib.util.find_spec("horovod")  # not `module`'s own spec: finding it imports its package
    if spec is None or spec.origin is None:
        pytest.skip("horovod is not installed")
    source = Path(spec.origin).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(source.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return [a.arg for a in init.args.args[1:]]


@pytest.mark.parametrize(
    ("ours", "module"),
    [
        (TorchEstimator, "horovod.spark.torch.estimator"),
        (KerasEstimator, "horovod.spark.keras.estimator"),
        (LightningTorchEstimator, "horovod.spark.lightning.estimator"),
    ],
    ids=["torch", "keras", "lightning"],
)
def test_the_drop_in_takes_every_argument_horovods_estimator_takes_in_its_order(
    ours: Any, module: str
) -> None:
    import inspect

    names = list(inspect.signature(ours.__init__).parameters)
    theirs = horovod_init_args(module, ours.__name__)
    assert names[1 : len(theirs) + 1] == theirs


def test_the_keras_drop_in_passes_metrics_custom_objects_and_checkpoint_callback_on() -> None:
    """Metrics are Keras' own (compiled in every rank); custom_objects and checkpoint_callback are honoured."""
    got = params(KerasEstimator(metrics=["mae"], label_cols=["y"], random_seed=2, optimizer=None))
    assert (got["metrics"], got["prediction_col"], got["seed"], got["optimizer"]) == (
        ["mae"],
        "y__output",
        2,
        "adam",
    )
    best = BestModelCheckpoint(monitor="val_mae", mode="min")
    got = params(KerasEstimator(custom_objects={"Swish": object}, checkpoint_callback=best))
    assert (got["custom_objects"], got["checkpoint_callback"]) == ({"Swish": object}, best)
    with pytest.raises(InvalidArgumentError, match=r"^loss_weights: "):
        KerasEstimator(checkpoint_callback=best, loss_weights=[1.0])


@pytest.mark.parametrize(
    ("horovod", "sparkrunner"),
    [
        ({"num_proc": 3}, {"num_proc": 3}),
        ({"feature_cols": ["a", "b"]}, {"feature_cols": ["a", "b"]}),
        ({"label_cols": ["y"]}, {"label_cols": ["y"], "prediction_col": "y__output"}),
        ({"batch_size": 64}, {"batch_size": 64}),
        ({"batch_size": None}, {"batch_size": 32}),
        ({"epochs": 7}, {"epochs": 7}),
        ({"validation": 0.2}, {"validation": 0.2}),
        ({"validation": "is_val"}, {"validation": "is_val"}),
        ({"sample_weight_col": "w"}, {"sample_weight_col": "w"}),
        ({"run_id": "run-7"}, {"run_id": "run-7"}),
        ({"verbose": 0}, {"verbose": 0}),
        ({"shuffle": False}, {"shuffle": False}),
        ({"random_seed": 5}, {"seed": 5}),
        ({"store": "/data/store"}, {"store": "/data/store"}),
        ({"store": Path("/data/store")}, {"store": "/data/store"}),
        ({"input_shapes": [[-1, 1, 28, 28]], "feature_cols": ["x"]}, {"input_shapes": [[-1, 1, 28, 28]]}),
        ({"input_shapes": [[-1, 2], [-1, 1]]}, {"input_shapes": [[-1, 2], [-1, 1]]}),
        ({"label_shapes": [[-1, 1]]}, {"label_shapes": [[-1, 1]]}),
        ({"inmemory_cache_all": True}, {"inmemory_cache_all": True}),
        ({"callbacks": [], "metrics": [], "use_gpu": True, "reader_pool_type": "thread"}, {}),
        ({"np": -2, "launcher": "mpirun", "data": "stream", "max_failures": 1}, {"np": -2, "data": "stream"}),
        ({"backward_passes_per_step": 3}, {"backward_passes_per_step": 3}),
        ({"val_batch_size": 128}, {"val_batch_size": 128}),
        ({"use_gpu": False}, {"use_gpu": False}),
        (
            {"train_steps_per_epoch": 10, "validation_steps_per_epoch": 5},
            {"train_steps_per_epoch": 10, "validation_steps_per_epoch": 5},
        ),
        ({"gradient_compression": "fp16"}, {"gradient_compression": "fp16"}),
        ({"val_batch_size": None}, {"val_batch_size": None}),
        ({"metrics": [torch.nn.functional.l1_loss]}, {"metrics": [torch.nn.functional.l1_loss]}),
    ],
)
def test_each_horovod_argument_reaches_its_sparkrunner_param(
    horovod: dict[str, Any], sparkrunner: dict[str, Any]
) -> None:
    got = params(TorchEstimator(model=torch.nn.Linear(3, 1), **horovod))
    assert {k: got[k] for k in sparkrunner} == sparkrunner


def test_a_horovod_store_object_gives_its_prefix_path(tmp_path: Path) -> None:
    store_module = pytest.importorskip("horovod.spark.common.store")
    local = store_module.LocalStore(str(tmp_path / "local"))
    created = store_module.Store.create(f"file://{tmp_path}/created")
    assert params(TorchEstimator(store=local))["store"] == local.prefix_path
    assert params(TorchEstimator(store=created))["store"] == f"file://{tmp_path}/created"


def test_anything_shaped_like_a_horovod_store_gives_its_prefix_path() -> None:
    class HdfsLike:
        prefix_path = "hdfs://namenode:8020/user/me/store"

        def get_checkpoints(self, run_id: str) -> list[str]:
            return []

    assert params(TorchEstimator(store=HdfsLike()))["store"] == "hdfs://namenode:8020/user/me/store"


def test_a_loss_function_that_reduces_the_batch_is_spread_over_its_rows() -> None:
    """Horovod's losses return the batch mean; each row gets it, so the mean over rows is the same number. With
    sample weights Horovod calls them with reduction="none"."""
    loss = params(TorchEstimator(loss=torch.nn.functional.mse_loss))["loss"]
    out, y = torch.tensor([[1.0], [2.0], [4.0]]), torch.tensor([[0.0], [0.0], [0.0]])
    assert isinstance(loss, BatchMeanLoss)
    assert loss(out, y).tolist() == [7.0, 7.0, 7.0]  # (1 + 4 + 16) / 3
    module = torch.nn.CrossEntropyLoss()
    assert params(TorchEstimator(loss=[module]))["loss"] is module
    weighted = params(TorchEstimator(loss=torch.nn.functional.l1_loss, sample_weight_col="w"))["loss"]
    assert weighted(out, y).tolist() == [[1.0], [2.0], [4.0]]  # one per row: Horovod's reduction="none"


REFUSED = {
    "data_module": object(),
    "loss_weights": [0.5, 0.5],
    "continuous_cols": ["a"],
    "categorical_cols": ["b"],
    "callbacks": [object()],
    "shuffle_buffer_size": 1000,
    "partitions_per_process": 4,
    "train_minibatch_fn": lambda: None,
    "transformation_fn": lambda row: row,
    "train_reader_num_workers": 8,
    "val_reader_num_workers": 8,
    "reader_pool_type": "process",
    "mp_start_method": "spawn",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_argument_sparkrunner_cannot_honour_is_refused_by_name(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"^{name}: Horovod's estimator argument"):
        TorchEstimator(model=torch.nn.Linear(3, 1), **{name: REFUSED[name]})


class Sized:
    """Shaped like Horovod's backends (SparkBackend, the tests' CallbackBackend): it says how many ranks."""

    def __init__(self, processes: int) -> None:
        self.processes = processes

    def num_processes(self) -> int:
        return self.processes


@pytest.mark.parametrize(
    ("given", "num_proc", "says"),
    [
        ({"backend": Sized(3)}, 3, "its num_processes\\(\\) gives num_proc=3"),
        ({"backend": Sized(3), "num_proc": 2}, 2, "so the backend starts nothing$"),
        ({"backend": object()}, None, "so the backend starts nothing$"),
    ],
    ids=["sized", "num_proc-given", "unsized"],
)
def test_a_horovod_backend_is_accepted_with_a_warning_and_sizes_num_proc_when_not_given(
    given: dict[str, Any], num_proc: int | None, says: str
) -> None:
    for estimator in (TorchEstimator, KerasEstimator):
        with pytest.warns(
            SparkRunnerWarning, match=rf"^backend=.*sparkrunner places the ranks itself.*{says}"
        ):
            got = params(estimator(**given))
        assert got["num_proc"] == num_proc and "backend" not in got


def test_a_backend_that_counts_no_ranks_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"backend.num_processes\(\) has to be a positive integer"):
        TorchEstimator(backend=Sized(0))


def test_several_refused_arguments_are_named_together() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^data_module, train_minibatch_fn: "):
        TorchEstimator(train_minibatch_fn=lambda: None, data_module=object())


def test_each_refusal_says_why_the_argument_cannot_carry_over() -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"data_module: sparkrunner's rows reach the ranks through"
    ):
        TorchEstimator(data_module=object())
    with pytest.raises(InvalidArgumentError, match=r"transformation_fn: .* apply it in Spark before fit"):
        TorchEstimator(transformation_fn=lambda frame: frame)


def test_every_refusal_is_reachable_from_some_drop_in() -> None:
    """Each argument of the table is in a drop-in's signature and not honoured by every drop-in that takes it
    (an argument all of them honour is no refusal)."""
    import inspect

    from sparkrunner.compat.horovod_params import NOT_HONOURED

    drop_ins = (TorchEstimator, KerasEstimator, LightningTorchEstimator)
    for name in NOT_HONOURED:
        refusing = []
        for drop_in in drop_ins:
            if name in inspect.signature(drop_in.__init__).parameters:
                try:
                    drop_in(**{name: [object()]})
                except (InvalidArgumentError, TypeError) as error:  # a Param's own type check: honoured
                    refusing.append(str(error).startswith(f"{name}: Horovod's"))
        assert any(refusing), name


@pytest.mark.parametrize(
    ("store", "match"), [(3, "store=3: give a path or URI"), (object(), "store=<object .*Horovod Store")]
)
def test_a_store_that_is_no_path_and_no_store_is_refused(store: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        TorchEstimator(store=store)


def test_one_loss_per_label_column_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="one loss per label column is not supported"):
        TorchEstimator(loss=[torch.nn.MSELoss(), torch.nn.L1Loss()], label_cols=["a", "b"])


def test_one_loss_constructor_builds_the_loss_where_it_is_first_used() -> None:
    """Horovod's `loss_constructors`: called without arguments where the loss is used (each rank), so the loss
    travels as its constructor; a module built is used per row, a function built as Horovod's loss functions."""
    built = params(TorchEstimator(loss_constructors=[torch.nn.L1Loss], label_cols=["y"]))["loss"]
    out, y = torch.tensor([[1.0], [-2.0]]), torch.tensor([[0.0], [0.0]])
    travelled = pickle.loads(pickle.dumps(built))
    assert travelled(out, y).tolist() == [[1.0], [2.0]]  # per row: the module's reduction set to "none"
    function = params(TorchEstimator(loss_constructors=[lambda: torch.nn.functional.l1_loss]))["loss"]
    assert function(out, y).tolist() == [1.5, 1.5]  # the batch's mean, given to each row
    assert probability_kind(
        params(TorchEstimator(loss_constructors=[torch.nn.CrossEntropyLoss]))["loss"]
    ) == ("softmax")


@pytest.mark.parametrize(
    ("given", "match"),
    [
        (
            {"loss": "mse", "loss_constructors": [torch.nn.MSELoss]},
            "loss and loss_constructors are both given",
        ),
        ({"loss_constructors": [torch.nn.MSELoss, torch.nn.L1Loss]}, "one loss constructor per label column"),
        ({"loss_constructors": [torch.nn.MSELoss()(torch.ones(1), torch.ones(1))]}, "function that builds"),
        ({"loss_weights": [0.5, 0.5]}, "one output tensor and one loss gets every label column"),
    ],
    ids=["both", "two", "not-callable", "loss_weights"],
)
def test_loss_constructors_given_wrongly_and_loss_weights_are_refused(
    given: dict[str, Any], match: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        TorchEstimator(label_cols=["a", "b"], **given)


def test_horovods_compressors_are_told_apart_by_name() -> None:
    """``hvd.Compression.fp16`` becomes DDP's fp16 hook, ``.none`` nothing; anything else is refused."""
    compression = pytest.importorskip("horovod.torch.compression").Compression
    assert params(TorchEstimator(gradient_compression=compression.fp16))["gradient_compression"] == "fp16"
    assert params(TorchEstimator(gradient_compression=compression.none))["gradient_compression"] is None
    with pytest.raises(InvalidArgumentError, match=r"gradient_compression=.*give hvd\.Compression\.fp16"):
        TorchEstimator(gradient_compression="int8")


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("gradient_compression", "fp16", "averaged in full precision here"),
        ("use_gpu", False, "Keras' ranks train on the GPU Spark assigns them"),
    ],
)
def test_what_only_the_torch_drop_in_honours_is_refused_by_the_keras_one(
    name: str, value: Any, why: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"^{name}: Horovod's estimator argument.*{why}"):
        KerasEstimator(**{name: value})


def test_positional_arguments_are_refused_as_horovods_are() -> None:
    with pytest.raises(TypeError, match="keyword arguments"):
        TorchEstimator(2)  # type: ignore[misc]


def test_the_keras_drop_in_passes_callbacks_label_shapes_and_inmemory_cache_all_on() -> None:
    """Horovod's Keras example passes `callbacks` and `inmemory_cache_all` (KerasEstimator honours them, with
    `label_shapes`: tests/ml/test_keras_estimator.py); the torch drop-in refuses them (above)."""
    callbacks = [object()]
    got = params(KerasEstimator(callbacks=callbacks, label_shapes=[[10]], inmemory_cache_all=True))
    assert (
        got["callbacks"] is callbacks and got["label_shapes"] == [[10]] and got["inmemory_cache_all"] is True
    )
