"""The models a scoring worker keeps (`model_cache.ModelCache`): least recently used out beyond the count and the
memory share, what left collected even when the cache froze it, bad settings refused with the setting's name.
In-process, real torch modules: no Spark (the Spark run with reused workers is in test_generic_and_mlflow.py)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch

from sparkrunner.ml.model_cache import MODELS_CONF, SHARE_ENV, Limits, ModelCache, model_bytes, worker_memory


def linear(inputs: int, outputs: int) -> torch.nn.Module:
    return torch.nn.Linear(inputs, outputs)


class Loads:
    """A loader that counts its calls per key (the oracle for "loaded again" vs "kept")."""

    def __init__(self, build: Any = lambda: linear(4, 2)) -> None:
        self.calls: list[str] = []
        self.build = build

    def __call__(self, cache: ModelCache, key: str, limits: Limits) -> Any:
        def load() -> Any:
            self.calls.append(key)
            return self.build()

        return cache.get(key, load, limits)


def test_beyond_the_count_the_least_recently_used_model_leaves() -> None:
    cache, loads, limits = ModelCache(), Loads(), Limits(models=3)
    for key in ("a", "b", "c", "a", "d"):  # "a" used again before "d": "b" is the least recently used
        loads(cache, key, limits)
    assert cache.keys() == ["c", "a", "d"]
    loads(cache, "a", limits)
    loads(cache, "b", limits)
    assert loads.calls == ["a", "b", "c", "d", "b"]
    assert cache.keys() == ["d", "a", "b"]


def test_beyond_the_memory_share_the_least_recently_used_model_leaves() -> None:
    """Three 4 MB modules under a share of the worker's memory that holds two and a half: the first leaves. The
    bytes are counted independently (rows x columns x 4) and a model too big for the share alone is still kept."""
    size = (1024 * 1024 + 1024) * 4  # Linear(1024, 1024): weight and bias, float32
    assert model_bytes(linear(1024, 1024)) == (size, {})
    cache, loads = ModelCache(), Loads(lambda: linear(1024, 1024))
    limits = Limits(models=10, share=2.5 * size / worker_memory())
    for key in ("a", "b", "c"):
        loads(cache, key, limits)
    assert cache.keys() == ["b", "c"]
    tiny = Limits(models=10, share=0.5 * size / worker_memory())
    loads(cache, "d", tiny)
    assert cache.keys() == ["d"]


class CyclicNet(torch.nn.Module):
    """A module that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.me = [self]


def test_a_model_that_left_is_collected_though_the_cache_froze_it() -> None:
    """A freezing cache (a scoring worker's) exempts what it keeps from collections; a model that leaves is
    unfrozen and collected, reference cycle and all (a weak reference and Python's freeze count are the
    oracles)."""
    cache, loads, limits = ModelCache(freeze=True), Loads(CyclicNet), Limits(models=1)
    try:
        first = weakref.ref(loads(cache, "first", limits))
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert first() is not None
        loads(cache, "second", limits)
        assert first() is None
        assert cache.keys() == ["second"] and gc.get_freeze_count() > 0
    finally:
        cache.clear()
        gc.unfreeze()


@pytest.mark.parametrize(
    "models, share, where, problem",
    [("0", None, "conf", MODELS_CONF), ("three", None, "conf", MODELS_CONF), (None, "1.5", "env", SHARE_ENV)],
)
def test_a_wrong_setting_is_refused_naming_it(models: Any, share: Any, where: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Limits.parse(models, share, where)
    assert Limits.parse(None, "", where) == Limits()
