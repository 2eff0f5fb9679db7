"""PyTorch Lightning on sparkrunner's ranks: `Trainer(strategy=sparkrunner.lightning.ddp())` (its public name,
the facade `sparkrunner.lightning`).

Lightning sizes a DDP job as `num_nodes x devices` from the Trainer's arguments and indexes its device list by
LOCAL_RANK. Under sparkrunner neither is known before the run (Spark places the ranks), hosts may hold uneven
numbers of ranks (2 + 1), and a cluster environment (all that Lightning detects from variables) cannot change
`num_nodes x devices`. So this strategy takes the run's shape from the rank's environment instead: the sampler splits the data over WORLD_SIZE ranks, the rank trains on its own GPU
(`cuda:LOCAL_RANK`, sparkrunner's GPU model) or on the CPU, and the Trainer's `devices`/`num_nodes` are not
needed. Works with both import names, `lightning.pytorch` and `pytorch_lightning` (docs/frameworks.md).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import os
import sys
from typing import Any

from sparkrunner.common.environment import Env
from sparkrunner.errors import InvalidArgumentError

_PACKAGES = {"lightning.pytorch": "lightning.fabric", "pytorch_lightning": "lightning_fabric"}


def ddp(package: str | None = None, **ddp_kwargs: Any) -> Any:
    """A Lightning `DDPStrategy` for this run's ranks; `ddp_kwargs` go to `DDPStrategy` (e.g.
    `find_unused_parameters=True`). `package` picks `"lightning.pytorch"` or `"pytorch_lightning"` when both
    are imported; by default, the one the calling code imported."""
    strategy_class, environment_class = _classes(_package(package))
    return strategy_class(cluster_environment=environment_class(), **ddp_kwargs)


def environment(package: str | None = None) -> Any:
    """The Lightning `ClusterEnvironment` of this run's ranks (for a strategy of your own, e.g. FSDP's)."""
    return _classes(_package(package))[1]()


def _package(requested: str | None) -> str:
    """The Lightning package the user's code works with."""
    if requested is not None:
        if requested not in _PACKAGES:
            raise InvalidArgumentError(f"package must be one of {sorted(_PACKAGES)}, not {requested!r}")
        return requested
    imported = [name for name in _PACKAGES if name in sys.modules]
    if len(imported) > 1:
        raise InvalidArgumentError(
            "both lightning.pytorch and pytorch_lightning are imported: pass "
            "package='lightning.pytorch' or package='pytorch_lightning' (the one your Trainer comes from)"
        )
    installed = imported or [name for name in _PACKAGES if _installed(name)]
    if not installed:
        raise InvalidArgumentError("sparkrunner.lightning needs lightning or pytorch-lightning installed")
    return installed[0]


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # "lightning.pytorch" when "lightning" itself is missing
        return False


@functools.cache
def _classes(package: str) -> tuple[type, type]:
    """The strategy and environment classes, built on `package`'s own base classes (Lightning's type checks
    tell `lightning.pytorch` from `pytorch_lightning` apart)."""
    import torch

    base_strategy = importlib.import_module(f"{package}.strategies").DDPStrategy
    fabric = importlib.import_module(f"{_PACKAGES[package]}.plugins.environments")

    class SparkRunnerEnvironment(fabric.TorchElasticEnvironment):  # type: ignore[name-defined]
        """The torch variables sparkrunner sets (RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK, MASTER_*)."""

        @staticmethod
        def detect() -> bool:
            return Env.RUN_ID in os.environ

        def validate_settings(self, num_devices: int, num_nodes: int) -> None:
            """Nothing to check: the run's shape comes from sparkrunner, not `devices` x `num_nodes`."""

    callback_base = importlib.import_module(f"{package}.callbacks").Callback

    class SparkRunnerProgress(callback_base):  # type: ignore[misc,valid-type]
        """Reports every training batch to sparkrunner, so that the bar, the per-rank timings and the step
        anatomy count Lightning's steps with no call in the user's module."""

        total: int | None = None

        def on_train_start(self, trainer: Any, *_: Any) -> None:
            steps = trainer.estimated_stepping_batches  # optimizer steps: batches / accumulate_grad_batches
            self.total = int(steps) * trainer.accumulate_grad_batches if math.isfinite(steps) else None

        def on_train_batch_end(self, trainer: Any, *_: Any) -> None:
            from sparkrunner.ranks.progress import report_progress

            report_progress(epoch=trainer.current_epoch, total=self.total)

    class SparkRunnerDDPStrategy(base_strategy):  # type: ignore[misc,valid-type]
        """DDP over the run's ranks, whatever their hosts: one process per rank, one device each. It adds
        `SparkRunnerProgress` to the Trainer's callbacks."""

        def setup(self, trainer: Any) -> None:
            super().setup(trainer)
            if not any(isinstance(callback, SparkRunnerProgress) for callback in trainer.callbacks):
                trainer.callbacks.append(SparkRunnerProgress())

        @property
        def root_device(self) -> torch.device:
            device = self.parallel_devices[0] if self.parallel_devices else torch.device("cpu")
            return torch.device("cuda", self.local_rank) if device.type == "cuda" else device

        @property
        def distributed_sampler_kwargs(self) -> dict[str, Any]:
            return {"num_replicas": self.world_size, "rank": self.global_rank}

    return SparkRunnerDDPStrategy, SparkRunnerEnvironment
