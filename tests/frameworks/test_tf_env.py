"""Which Keras the ranks get (`sparkrunner.frameworks.tf_env`): tf_keras by default, Keras 3 where the code or the
user chose (`KERAS_BACKEND`, `TF_USE_LEGACY_KERAS`, inherited or in `env=`); and Keras 3's failure under a strategy
turned into a short typed error; the import hook that says so waits past a probe. Oracle: the rank environment `rank_process_environment` builds, and Python's
own traceback of an error raised in a Keras 3 source file (a stand-in for the two-worker failure, which needs
two TensorFlow workers: tests/compat/test_upstream_examples.py runs the real one, opt-in)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path

import pytest

from sparkrunner.common.environment import Env
from sparkrunner.common.rank_job import RankJob
from sparkrunner.errors import KerasStrategyError
from sparkrunner.frameworks import tf_env
from sparkrunner.frameworks.after_import import after_import
from sparkrunner.system.rank_environment import rank_process_environment
from sparkrunner.topology import PORTS_PER_RANK, Peer, Topology

HAS_TF_KERAS = importlib.util.find_spec("tf_keras") is not None


def rank_env(
    user_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, inherited: dict[str, str]
) -> dict[str, str]:
    for name in ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND", Env.LEGACY_KERAS):
        monkeypatch.delenv(name, raising=False)
    for name, value in inherited.items():
        monkeypatch.setenv(name, value)
    job = RankJob("run-1", ("127.0.0.1", 1), b"s", user_env)
    topology = Topology((Peer("127.0.0.1", tuple(range(10001, 10001 + PORTS_PER_RANK))),))
    return rank_process_environment(job, topology, 0, echo_output=False, in_spark_task=False)


@pytest.mark.skipif(not HAS_TF_KERAS, reason="tf_keras is not installed")
def test_tf_keras_is_the_default_and_marked_as_sparkrunners_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    env = rank_env({}, monkeypatch, {})
    assert env["TF_USE_LEGACY_KERAS"] == "1" and env[Env.LEGACY_KERAS] == "1"


@pytest.mark.parametrize("where", ["env=", "inherited"])
@pytest.mark.parametrize("chosen", [{"KERAS_BACKEND": "torch"}, {"TF_USE_LEGACY_KERAS": "0"}])
def test_a_keras_the_user_chose_wins(
    where: str, chosen: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = rank_env(chosen if where == "env=" else {}, monkeypatch, chosen if where == "inherited" else {})
    assert env.get("TF_USE_LEGACY_KERAS") == chosen.get("TF_USE_LEGACY_KERAS")  # Keras 3 as tf.keras
    assert Env.LEGACY_KERAS not in env


def _raise_in(filename: str, message: str) -> BaseException:
    code = compile(f"raise ValueError({message!r})", filename, "exec")
    try:
        exec(code)
    except ValueError as exc:
        return exc
    raise AssertionError("nothing raised")


PER_REPLICA = (
    "Attempt to convert a value (PerReplica:{\n  0: <tf.Tensor ...>\n}) with an unsupported type to a Tensor."
)


def test_keras3_under_a_strategy_ends_with_a_short_typed_error_naming_the_ways_out() -> None:
    error = tf_env.explained(_raise_in("/site-packages/keras/src/trainers/data_adapters/x.py", PER_REPLICA))
    assert isinstance(error, KerasStrategyError)
    last = traceback.format_exception(error)[-1]
    assert last.startswith("sparkrunner.errors.KerasStrategyError: Keras 3's fit cannot run under ")
    for named in ("keras-team/keras#20585", "TF_USE_LEGACY_KERAS=1", "KERAS_BACKEND", "keras_data_parallel"):
        assert named in last
    assert "PerReplica" in "".join(traceback.format_exception(error)), (
        "TensorFlow's error stays, as the cause"
    )


@pytest.mark.parametrize(
    ("filename", "message"),
    [
        ("/site-packages/tf_keras/src/engine/training.py", PER_REPLICA),
        ("/x/keras/src/ops.py", "shapes differ"),
    ],
)
def test_other_errors_pass_unchanged(filename: str, message: str) -> None:
    exc = _raise_in(filename, message)
    assert tf_env.explained(exc) is exc


def test_a_hook_waits_past_a_probe_for_the_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`after_import` fires when the module is imported, once, not when it is only looked for (TensorFlow
    probes for tf_keras with `importlib.util.find_spec` before importing it)."""
    (tmp_path / "probed_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[str] = []
    after_import("probed_module", lambda module: seen.append(module.__name__))
    assert importlib.util.find_spec("probed_module") is not None and seen == []
    importlib.import_module("probed_module")
    importlib.reload(sys.modules["probed_module"])
    assert seen == ["probed_module"]
    monkeypatch.delitem(sys.modules, "probed_module")
