"""Ranks that share a host get one OpenMP/torch thread each unless told otherwise, as under torchrun: two ranks
that each start as many threads as the machine has cores fight for them (bench/frameworks.py: 0.18x torchrun's
steps/s before). Placement np<0 (every rank on the driver's host), each launcher."""

from __future__ import annotations

import os
from typing import Any

import pytest

from sparkrunner import Runner
from tests.matrix import LAUNCHERS


def torch_threads() -> tuple[str | None, int]:
    import torch

    return os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()


@pytest.fixture(autouse=True)
def no_inherited_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def run_all(launcher: str, **options: Any) -> list[tuple[str | None, int]]:
    runner = Runner(np=-2, launcher=launcher, tracking=False, progress=False, **options)
    return list(runner.run_all(torch_threads))


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_ranks_sharing_a_host_run_one_thread_each(launcher: str) -> None:
    assert run_all(launcher) == [("1", 1), ("1", 1)]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_the_users_own_setting_wins(launcher: str) -> None:
    assert run_all(launcher, env={"OMP_NUM_THREADS": "2"}) == [("2", 2), ("2", 2)]
