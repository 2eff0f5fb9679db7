"""The inference bench's load count, which its "loads equal to the Python workers" figure rests on: every process
that builds or unpickles a bench model adds one line with its pid, and the bench counts lines and pids."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from bench.inference import CNN, LOADS, MLP, WIDTH, loads


@pytest.mark.parametrize("cls", [MLP, CNN])
def test_building_and_unpickling_a_model_each_count_one_load_of_this_process(
    cls: type[torch.nn.Module], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    count_file = tmp_path / "loads"
    monkeypatch.setenv(LOADS, str(count_file))
    model = cls()
    copy = pickle.loads(pickle.dumps(model))
    assert count_file.read_text().split() == [str(os.getpid())] * 2  # the file itself, read independently
    assert loads(count_file) == (2, 1)
    x = torch.rand(5, WIDTH)
    torch.testing.assert_close(copy(x), model(x))  # the copy is the same network, not a fresh one
