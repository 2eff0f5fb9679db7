"""Drop-in for spark-tensorflow-distributor's `MirroredStrategyRunner`, built on `sparkrunner.Runner`.

``MirroredStrategyRunner(num_slots).run(train_fn, **kwargs)`` runs `train_fn` on every worker inside a
``tf.distribute.MultiWorkerMirroredStrategy`` scope (unless ``use_custom_strategy``) and returns the chief's
(worker 0's) value. Each worker gets ``TF_CONFIG`` and, when tf_keras is installed and neither
``TF_USE_LEGACY_KERAS`` nor ``KERAS_BACKEND`` is set, ``TF_USE_LEGACY_KERAS=1`` (the Keras that trains under the
strategy with TensorFlow 2.21; see docs/tensorflow.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from sparkrunner.compat.runners import barrier_runner, local_runner
from sparkrunner.compat.spark_facts import (
    driver_gpus,
    optional_session,
    task_gpu_amount,
)
from sparkrunner.errors import DriverGpuError, InvalidArgumentError
from sparkrunner.placement.spark_sessions import is_connect_session
from sparkrunner.system.gpus import CUDA_VISIBLE

TF_SSL_CONF = "tensorflow.spark.distributor.ignoreSsl"


def in_strategy_scope(
    train_fn: Callable[..., Any],
    use_custom_strategy: bool,
    kwargs: dict[str, Any],
    gpu_slots: tuple[int, int] | None = None,
) -> Any:
    """On the rank: ``train_fn(**kwargs)``, inside a MultiWorkerMirroredStrategy scope unless the function
    builds its own strategy. `gpu_slots` ``(num_slots, workers)``: keep this worker's share of its task's GPUs."""
    if gpu_slots is not None:
        keep_gpu_share(*gpu_slots)
    if use_custom_strategy:
        return train_fn(**kwargs)
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        return train_fn(**kwargs)


def keep_gpu_share(num_slots: int, workers: int) -> None:
    """Before TensorFlow starts: worker i uses ``num_slots // workers`` GPUs (one more for the first
    ``num_slots % workers`` workers), the first ones of its task's GPUs, so exactly `num_slots` GPUs train."""
    worker = int(os.environ["RANK"])
    share = num_slots // workers + (worker < num_slots % workers)
    visible = [d for d in os.environ.get(CUDA_VISIBLE, "").split(",") if d]
    os.environ[CUDA_VISIBLE] = ",".join(visible[:share])


class MirroredStrategyRunner:
    """``MirroredStrategyRunner(num_slots, local_mode, use_gpu, gpu_resource_name, use_custom_strategy)``.

    Args:
        num_slots: GPUs (``use_gpu``) or CPU-only Spark tasks that train together.
        local_mode: True: one worker on the driver, with `num_slots` of its GPUs (CPU: ``num_slots=1``).
        use_gpu: train on the GPUs Spark assigns (the ``gpu`` resource); False: CPU only.
        gpu_resource_name: Spark's name of the GPU resource; sparkrunner reads ``gpu``.
        use_custom_strategy: True: `train_fn` builds and enters its own strategy.

    Attributes:
        sc: the session's SparkContext, as the original's (None without a classic SparkSession: none at all, or
            Spark Connect's, which has no SparkContext).
    """

    def __init__(
        self,
        num_slots: int,
        local_mode: bool = False,
        use_gpu: bool = True,
        gpu_resource_name: str = "gpu",
        use_custom_strategy: bool = False,
    ) -> None:
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots <= 0:
            raise InvalidArgumentError(f"num_slots must be a positive integer, not {num_slots!r}")
        if use_gpu and gpu_resource_name != "gpu":
            raise InvalidArgumentError(
                f"gpu_resource_name={gpu_resource_name!r}: sparkrunner assigns Spark's 'gpu' resource to the "
                f"workers; name the GPU resource 'gpu' in the Spark configuration"
            )
        self.num_slots = num_slots
        self.local_mode = bool(local_mode)
        self.use_gpu = bool(use_gpu)
        self.gpu_resource_name = gpu_resource_name
        self.use_custom_strategy = bool(use_custom_strategy)
        self.spark = optional_session()
        self.sc = None if self.spark is None or is_connect_session(self.spark) else self.spark.sparkContext
        self.num_tasks = None if self.local_mode else self.get_num_tasks()

    def get_num_tasks(self) -> int:
        """Spark tasks (TensorFlow workers) of a distributed run: one per `num_slots` GPUs' worth of tasks."""
        if not self.use_gpu:
            return self.num_slots
        if self.spark is None:
            raise DriverGpuError(
                "local_mode=False runs in a Spark barrier stage, but there is no SparkSession"
            )
        return math.ceil(self.num_slots / task_gpu_amount(self.spark, self.gpu_resource_name))

    def run(self, train_fn: Callable[..., Any], **kwargs: Any) -> Any:
        """Run ``train_fn(**kwargs)`` on every worker; return the chief's (worker 0's) value."""
        share = None if self.local_mode or not self.use_gpu else (self.num_slots, self.num_tasks)
        return self._runner().run(in_strategy_scope, train_fn, self.use_custom_strategy, kwargs, share)

    def _runner(self) -> Any:
        if self.local_mode:
            return local_runner(1, **self._local_gpu_options())
        assert self.num_tasks is not None
        return barrier_runner(self.spark, self.num_tasks, self.use_gpu, 1, TF_SSL_CONF, type(self).__name__)

    def _local_gpu_options(self) -> dict[str, Any]:
        """One worker on the driver: `num_slots` of its GPUs, or none (CPU training takes one slot)."""
        if not self.use_gpu:
            if self.num_slots > 1:
                raise InvalidArgumentError(
                    "local_mode=True with use_gpu=False trains one CPU worker: set num_slots=1"
                )
            return {"use_gpu": False}
        owned = driver_gpus(self.spark, os.environ.get(CUDA_VISIBLE))
        if self.num_slots > len(owned):
            raise InvalidArgumentError(
                f"{self.num_slots} slots were requested for local GPU training, but only {len(owned)} GPU(s) "
                f"are available on the driver"
            )
        return {"env": {CUDA_VISIBLE: ",".join(owned[: self.num_slots])}}
