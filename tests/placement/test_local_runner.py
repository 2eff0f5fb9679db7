"""np < 0: ranks as processes on the driver, no Spark. Results, environment, streaming, errors, training."""

from __future__ import annotations

import contextlib
import io
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import HorovodRunner, Runner, log_to_driver
from sparkrunner.errors import LauncherUnavailableError, RankFailedError
from sparkrunner.frameworks import horovod_env
from tests.matrix import LAUNCHERS
from tests.runner.training import assert_trained_in_lockstep, ddp_train
from tests.waiting import poll_until, wait_until


def rank_env() -> dict[str, str]:
    keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
    print("env", " ".join(f"{k}={os.environ[k]}" for k in keys))
    return {k: os.environ[k] for k in keys}


@pytest.mark.slow
def test_returns_rank_zeros_value() -> None:
    assert Runner(np=-3).run(lambda a, b=0: int(os.environ["RANK"]) * 100 + a + b, 5, b=2) == 7


@pytest.mark.slow
def test_every_rank_gets_its_place(capsys: pytest.CaptureFixture[str]) -> None:
    env = Runner(np=-3).run(rank_env)
    assert env["RANK"] == "0" and env["WORLD_SIZE"] == "3"
    out = capsys.readouterr().out
    for r in range(3):
        assert f"[rank {r}] env RANK={r} WORLD_SIZE=3 LOCAL_RANK={r} LOCAL_WORLD_SIZE=3" in out


def test_output_streams_while_the_rank_runs(tmp_path: Path) -> None:
    """The rank waits for a file that the test writes only after seeing the rank's line on the driver."""
    go = tmp_path / "go"

    def waits_for_go(path: str) -> str:
        print("ready", flush=True)
        wait_until(
            lambda: os.path.exists(path), 60, "the driver never saw 'ready' while this rank was running"
        )
        return "went"

    buffer = io.StringIO()
    outcome: dict[str, Any] = {}

    def drive() -> None:
        try:
            outcome["value"] = Runner(np=-1).run(waits_for_go, str(go))
        except Exception as exc:
            outcome["error"] = exc

    with contextlib.redirect_stdout(buffer):
        thread = threading.Thread(target=drive)
        thread.start()
        poll_until(lambda: "[rank 0] ready" in buffer.getvalue(), 60)
        go.touch()
        thread.join(90)
    assert outcome == {"value": "went"}


def chatty() -> None:
    print("plain stdout line")
    log_to_driver(f"callback from {os.environ['RANK']}")


@pytest.mark.slow
def test_log_callback_only_hides_plain_output(capsys: pytest.CaptureFixture[str]) -> None:
    HorovodRunner(np=-2).run(chatty)
    out = capsys.readouterr().out
    assert "[rank 0] callback from 0" in out and "[rank 1] callback from 1" in out
    assert "plain stdout line" not in out


def test_verbosity_all_shows_stdout_and_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    def both() -> None:
        import sys

        print("to stdout")
        print("to stderr", file=sys.stderr)
        os.system("echo from a child process")

    Runner(np=-1, driver_log_verbosity="all").run(both)
    captured = capsys.readouterr()
    assert "[rank 0] to stdout" in captured.out
    assert "[rank 0] from a child process" in captured.out
    assert "[rank 0] to stderr" in captured.err


def fails_on_rank_one(message: str) -> None:
    if os.environ["RANK"] == "1":
        raise ValueError(message)
    time.sleep(600)  # rank 0 would wait forever; the failure must stop it


@pytest.mark.slow
def test_rank_exception_comes_home_with_type_message_and_traceback() -> None:
    with pytest.raises(RankFailedError) as info:
        Runner(np=-2).run(fails_on_rank_one, "bad learning rate")
    err = info.value
    assert err.rank == 1
    assert err.exc_type == "ValueError"
    assert err.exc_message == "bad learning rate"
    assert isinstance(err.original, ValueError)
    assert "in fails_on_rank_one" in err.remote_traceback
    assert "raise ValueError(message)" in err.remote_traceback
    assert "sparkrunner/ranks/bootstrap.py" not in err.remote_traceback
    assert "rank 1 failed with ValueError: bad learning rate" in str(err)


NOTEBOOK_CELL = """\
def train(rate):
    def step():
        raise ValueError(f"rate {rate} diverged")
    return step()
"""


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_function_sent_by_value_keeps_its_file_and_lines_in_the_remote_traceback(
    launcher: str, tmp_path: Path
) -> None:
    """np<0: a function defined in `__main__` (a notebook cell, a script) travels by value; its traceback still
    names its file and shows its source lines, read by the rank from that file."""
    cell = tmp_path / "cell_7.py"
    cell.write_text(NOTEBOOK_CELL)
    scope: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(NOTEBOOK_CELL, str(cell), "exec"), scope)
    with pytest.raises(RankFailedError) as info:
        Runner(np=-1, launcher=launcher, tracking=False).run(scope["train"], 0.5)
    trace = info.value.remote_traceback
    assert f'File "{cell}", line 4, in train' in trace
    assert f'File "{cell}", line 3, in step' in trace
    assert 'raise ValueError(f"rate {rate} diverged")' in trace


@pytest.mark.slow
def test_ddp_gloo_training_agrees_on_weights_and_loss_falls() -> None:
    assert_trained_in_lockstep(Runner(np=-2).run(ddp_train), world=2)


def test_result_that_cannot_be_pickled_is_an_error() -> None:
    with pytest.raises(RankFailedError, match=r"return value .*cannot be pickled"):
        Runner(np=-1).run(lambda: threading.Lock())


def test_function_that_cannot_be_loaded_on_the_rank_is_explained(tmp_path: Path) -> None:
    """A function from a module the ranks cannot import fails with advice, not a bare ModuleNotFoundError."""
    module = tmp_path / "only_on_driver.py"
    module.write_text("def train():\n    return 1\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        import only_on_driver  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))  # the ranks inherit the driver's sys.path: take the module away
    with pytest.raises(RankFailedError, match=r"could not be loaded on this rank.*importable"):
        Runner(np=-1).run(only_on_driver.train)


def test_a_driver_whose_sparkrunner_differs_from_the_ranks_is_named_np_below_zero_direct() -> None:
    """The driver's sparkrunner holds a function the ranks' does not (another version): the error says to
    install the same sparkrunner everywhere, not to make the user's module importable."""
    import sparkrunner.data as driver_side

    def train() -> int:
        return 1

    train.__module__, train.__qualname__ = driver_side.__name__, "only_in_the_drivers_version"
    driver_side.only_in_the_drivers_version = train  # type: ignore[attr-defined]
    try:
        with pytest.raises(RankFailedError) as info:
            Runner(np=-1, launcher="direct", tracking=False).run(train)
    finally:
        del driver_side.only_in_the_drivers_version  # type: ignore[attr-defined]
    message = str(info.value)
    assert "only_in_the_drivers_version" in message
    assert "install the same sparkrunner on the driver and on every executor" in message
    assert "importable" not in message


@pytest.mark.skipif(
    horovod_env.horovod_installed(), reason="where Horovod is missing (the Spark 3.5 environment runs it)"
)
def test_horovod_true_without_horovod_names_what_is_missing() -> None:
    """Placement np<0, launcher direct: the rendezvous cannot be hosted; the error says so, not an ImportError."""
    with pytest.raises(LauncherUnavailableError, match="Horovod is not installed where rank 0 starts"):
        Runner(np=-2, launcher="direct", horovod=True, tracking=False, progress=False).run(chatty)
