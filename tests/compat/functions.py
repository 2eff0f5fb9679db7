"""Functions and scripts the drop-in tests run on the ranks (pickled by value: executors cannot import tests)."""

from __future__ import annotations

from typing import Any

ALLREDUCE_SCRIPT = """
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.txt"), "w") as out:
    out.write(f"{dist.get_world_size()} {total.item()} {' '.join(sys.argv[2:])}")
dist.destroy_process_group()
"""


def torch_allreduce(scale: float, offset: float = 0.0) -> dict[str, Any]:
    """Each rank contributes scale * (rank + 1) + offset to a gloo all_reduce (sum)."""
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([scale * (dist.get_rank() + 1) + offset])
    dist.all_reduce(value)
    places: list[Any] = [None] * dist.get_world_size()  # every rank's torchrun variables
    names = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK")
    dist.all_gather_object(places, tuple(int(os.environ[name]) for name in names))
    result = {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "sum": value.item(),
        "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "places": places,
    }
    dist.destroy_process_group()
    return result


def keras_regression(weights_dir: str, epochs: int = 3) -> dict[str, Any]:
    """Single-machine Keras code (no strategy of its own): a tiny regression on rank-dependent data."""
    import json
    import os

    import numpy as np
    import tensorflow as tf

    worker = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    rng = np.random.default_rng(worker)  # each worker its own data: only the all-reduce keeps them equal
    x = rng.normal(size=(128, 4)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32"))[:, None]
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options)
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    history = model.fit(data, epochs=epochs, verbose=0)
    np.savez(os.path.join(weights_dir, f"worker{worker}.npz"), *model.get_weights())
    return {
        "loss": [float(v) for v in history.history["loss"]],
        "replicas": int(tf.distribute.get_strategy().num_replicas_in_sync),
        "strategy": strategy_kind(),
    }


def strategy_kind() -> str:
    """The strategy in scope where the function runs: "multi-worker" (MultiWorkerMirroredStrategy), else its
    class name."""
    import tensorflow as tf

    strategy = tf.distribute.get_strategy()
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "multi-worker"
    return type(strategy).__name__


def horovod_rank_value(base: int, factor: int = 1) -> dict[str, Any]:
    """Each rank's own value plus a Horovod allreduce of every rank's (rank + 1) (the oracle is n(n+1)/2)."""
    import horovod.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    print(f"horovod rank {hvd.rank()} of {hvd.size()}", flush=True)
    return {
        "rank": hvd.rank(),
        "value": base + factor * hvd.rank(),
        "sum": total.item(),
        "controller": "mpi" if hvd.mpi_enabled() else "gloo",
    }


ELASTIC_EPOCHS, KILL_AFTER_EPOCH, HOLD_AT_EPOCH = 6, 2, 4
"""Horovod Elastic's run on two executors: attempt 0 (2 ranks) loses an executor right after the commit of epoch
2; the smaller attempt (1 rank) waits at epoch 4 for the slots to come back and the rescale; the last attempt
(2 ranks) trains epochs 4 and 5."""


def elastic_batch(epoch: int) -> tuple[Any, Any]:
    """Epoch `epoch`'s batch, the same on every rank (so the averaged gradient is the same at any size)."""
    import torch

    x = torch.rand(32, 3, generator=torch.Generator().manual_seed(epoch))
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3


def elastic_model_and_optimizer() -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)


def horovod_elastic_training(marker_dir: str) -> dict[str, Any]:
    """Horovod Elastic code as its users write it (`hvd.elastic.TorchState` with a model, an optimizer with
    momentum and an epoch counter, a reset callback, ``@hvd.elastic.run``, a commit per epoch), plus the test's
    marks in `marker_dir`: ``epochs`` (attempt, epoch, size, when: each epoch rank 0 trained), ``resets`` (attempt,
    size: each reset callback's call), and ``kill``/``small`` for `tests.recovery.elastic_scenario.ExecutorHolder`."""
    import time
    from pathlib import Path

    import horovod.torch as hvd
    import torch

    import sparkrunner

    hvd.init()
    attempt = sparkrunner.rank_context().attempt
    marks = Path(marker_dir)

    def mark(name: str, line: str) -> None:
        if hvd.rank() == 0:
            with (marks / name).open("a") as f:
                f.write(line + "\n")

    def wait_for_the_stop() -> None:
        while not sparkrunner.stopping():
            time.sleep(0.02)

    model, optimizer = elastic_model_and_optimizer()
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0)
    state.register_reset_callbacks([lambda: mark("resets", f"{attempt} {hvd.size()}")])

    @hvd.elastic.run
    def train(state: Any) -> None:
        while state.epoch < ELASTIC_EPOCHS:
            if hvd.size() < 2 and state.epoch == HOLD_AT_EPOCH:
                mark("small", "")  # the held executor is let go; the driver asks for a rescale
                wait_for_the_stop()
                state.commit()  # ends the function on every rank: the run grows back from here
            x, y = elastic_batch(state.epoch)
            state.optimizer.zero_grad()
            torch.nn.functional.mse_loss(state.model(x), y).backward()
            for p in state.model.parameters():
                p.grad = hvd.allreduce(p.grad, op=hvd.Average)
            state.optimizer.step()
            mark("epochs", f"{attempt} {state.epoch} {hvd.size()} {time.time()!r}")
            state.epoch += 1
            state.commit()
            if attempt == 0 and state.epoch == KILL_AFTER_EPOCH:
                mark("kill", "")  # rank 1's executor is killed: the attempt ends
                wait_for_the_stop()
                raise RuntimeError("stopped after losing an executor")

    train(state)
    return {"weight": model.weight.detach().flatten().tolist(), "bias": model.bias.item(), "size": hvd.size()}


def touch_file(path: str) -> None:
    """Leaves `path` behind: a rank ran."""
    from pathlib import Path

    Path(path).touch()
