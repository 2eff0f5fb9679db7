"""The models a long-lived process keeps loaded for scoring: a bounded, least-recently-used set.

Spark reuses its Python workers (``spark.python.worker.reuse``, the default), so a worker that scores model after
model (a notebook's ``transform`` calls, a ``CrossValidator``'s folds) would keep every one of them for the life
of the executor. This cache keeps at most `Limits.models` models and, together, at most `Limits.share` of the
worker's memory (host) and of each GPU's memory (device); the least recently used ones leave first. A model that
leaves gives its memory back: Python's collector frees it (cycles included), glibc returns freed heap to the
system (``malloc_trim``) and torch's CUDA allocator its cached blocks (``torch.cuda.empty_cache``).

It imports nothing of sparkrunner: a logged model's pyfunc (`sparkrunner_pyfunc`) carries a copy of it
(``sparkrunner_model_cache.py`` in the model's ``code/`` folder) for processes without sparkrunner.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import resource
import sys
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

MODELS_CONF = "spark.sparkrunner.scoring.cachedModels"
SHARE_CONF = "spark.sparkrunner.scoring.cacheMemoryShare"
"""The Spark settings (read on the driver at ``transform``) of `Limits.models` and `Limits.share`."""

MODELS_ENV = "SPARKRUNNER_SCORING_CACHED_MODELS"
SHARE_ENV = "SPARKRUNNER_SCORING_CACHE_MEMORY_SHARE"
"""The same, read from the worker's environment (``spark.executorEnv.*``) where no driver of sparkrunner set them
(``mlflow.pyfunc.spark_udf``, ``mlflow models serve``)."""

DEFAULT_MODELS = 3
DEFAULT_SHARE = 0.5


@dataclass(frozen=True)
class Limits:
    """At most `models` models, and at most `share` (0 < share <= 1) of the worker's memory and of each GPU's."""

    models: int = DEFAULT_MODELS
    share: float = DEFAULT_SHARE

    @classmethod
    def parse(cls, models: str | None, share: str | None, where: str = "") -> Limits:
        """Limits from settings' text (None: the default); a ValueError naming the setting when one is wrong."""
        names = (MODELS_CONF, SHARE_CONF) if where == "conf" else (MODELS_ENV, SHARE_ENV)
        try:
            count = DEFAULT_MODELS if models in (None, "") else int(str(models))
        except ValueError:
            count = 0
        if count < 1:
            raise ValueError(
                f"{names[0]}={models!r}: give the number of models a worker keeps, >= 1 (e.g. 3)"
            )
        try:
            fraction = DEFAULT_SHARE if share in (None, "") else float(str(share))
        except ValueError:
            fraction = 0.0
        if not 0 < fraction <= 1:
            raise ValueError(
                f"{names[1]}={share!r}: give a share of the worker's memory, 0 < share <= 1 (e.g. 0.5)"
            )
        return cls(count, fraction)

    @classmethod
    def from_environment(cls) -> Limits:
        return cls.parse(os.environ.get(MODELS_ENV), os.environ.get(SHARE_ENV))


@dataclass
class _Entry:
    model: Any
    host_bytes: int
    device_bytes: dict[str, int]


class ModelCache:
    """Loaded models by key, least recently used first out. `freeze`: after each load, move what the process
    holds out of the cyclic collector's reach (see `_refreeze`)."""

    def __init__(self, freeze: bool = False) -> None:
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._freeze = freeze

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[Hashable]:
        """The keys, least recently used first."""
        return list(self._entries)

    def get(self, key: Hashable, load: Callable[[], Any], limits: Limits) -> Any:
        """The model under `key`, loaded by `load()` when this process does not hold it; the least recently used
        others leave first to make room (before the load by count, after it by bytes)."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry.model
        evicted = self._evict(limits.models - 1, None, limits)
        before = resident_bytes()
        model = load()
        host, device = model_bytes(model)
        entry = _Entry(model, host if host is not None else max(resident_bytes() - before, 0), device)
        self._entries[key] = entry
        evicted += self._evict(limits.models, key, limits)
        log.info("loaded model %s (%d MB host, %d MB device); keeping %d", key, entry.host_bytes >> 20,
                 sum(device.values()) >> 20, len(self._entries))  # fmt: skip
        if evicted or self._freeze:
            self._refreeze(bool(evicted))
        return model

    def clear(self) -> None:
        """Let every model go (and their memory)."""
        if self._entries:
            self._entries.clear()
            self._refreeze(True)

    def _evict(self, most: int, keep: Hashable | None, limits: Limits) -> int:
        """Drop least recently used entries (never `keep`) until at most `most` remain and the rest fit the
        byte budgets; how many left."""
        host_budget = limits.share * worker_memory()
        gone = 0
        for key in [k for k in self._entries if k != keep]:
            if len(self._entries) <= most and not self._over(host_budget, limits.share):
                break
            del self._entries[key]
            log.info("let model %s go: a worker keeps %d models, %.0f%% of its memory", key, limits.models,
                     100 * limits.share)  # fmt: skip
            gone += 1
        return gone

    def _over(self, host_budget: float, share: float) -> bool:
        if sum(e.host_bytes for e in self._entries.values()) > host_budget:
            return True
        used: dict[str, int] = {}
        for entry in self._entries.values():
            for device, size in entry.device_bytes.items():
                used[device] = used.get(device, 0) + size
        return any(size > share * device_memory(device) for device, size in used.items())

    def _refreeze(self, released: bool) -> None:
        """Why freeze at all: pyspark's worker runs a full collection after every task, which otherwise walks
        torch's and MLflow's objects each time (300k objects, 0.1-0.26 s a task on bench/inference.py's worker);
        ``gc.freeze`` exempts everything alive now. Why unfreeze first: a frozen object is out of the collector's
        reach for good, so an evicted model's reference cycles (and what they hold) would stay pinned. Each
        freeze is therefore of what is alive right after a full collection of everything, frozen or not: the
        imports and the models kept now, never a model that left. The cost, a full collection, is paid on a load
        or an eviction only."""
        if self._freeze:  # a process that froze nothing of ours keeps its own frozen objects frozen
            gc.unfreeze()
        gc.collect()
        if released:
            _give_back_memory()
        if self._freeze:
            gc.freeze()


def _give_back_memory() -> None:
    """Freed host heap back to the system (glibc keeps it otherwise), and torch's cached CUDA blocks."""
    if sys.platform.startswith("linux"):
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc's (musl has none)
        if trim is not None:
            trim(0)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def model_bytes(model: Any) -> tuple[int | None, dict[str, int]]:
    """The bytes `model`'s tensors take on the host (None when it has none we can count: then the memory its
    load added is counted) and on each device: a torch module's parameters and buffers, a Keras model's weights;
    a pyfunc wrapper's raw model."""
    raw = _raw(model)
    if any(c.__module__.startswith("torch.nn") and c.__name__ == "Module" for c in type(raw).__mro__):
        return _torch_bytes(raw)
    weights = getattr(raw, "weights", None)
    if isinstance(weights, list) and weights:
        return sum(int(getattr(w, "nbytes", 0) or _numpy_bytes(w)) for w in weights), {}
    return None, {}


def _raw(model: Any) -> Any:
    getter = getattr(model, "get_raw_model", None)
    if getter is None:
        return model
    try:
        return getter()
    except Exception:  # a pyfunc without a raw model raises
        return model


def _torch_bytes(module: Any) -> tuple[int, dict[str, int]]:
    host = 0
    device: dict[str, int] = {}
    for tensor in _tensors(module):
        size = tensor.numel() * tensor.element_size()
        if tensor.device.type == "cpu":
            host += size
        else:
            device[str(tensor.device)] = device.get(str(tensor.device), 0) + size
    return host, device


def _tensors(module: Any) -> Iterator[Any]:
    seen: set[int] = set()
    for tensor in (*module.parameters(), *module.buffers()):
        if id(tensor) not in seen:
            seen.add(id(tensor))
            yield tensor


def _numpy_bytes(weight: Any) -> int:
    import numpy as np

    return int(np.asarray(weight).nbytes)


def resident_bytes(pid: int | str = "self") -> int:
    """A process's resident set size (``/proc/PID/statm``), 0 where there is no /proc."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def worker_memory() -> int:
    """The memory one Python worker may use: its address-space limit where Spark set one
    (``spark.executor.pyspark.memory``), else the machine's memory shared by its cores (one worker a core)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        return int(soft)
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (os.cpu_count() or 1)


def device_memory(device: str) -> int:
    """A CUDA device's total memory (`device` as torch names it, ``cuda:0``)."""
    import torch

    return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
