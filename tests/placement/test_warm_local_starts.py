"""np < 0 direct runs fork their ranks from an import zygote the driver process keeps (`sparkrunner.driver.zygotes`,
docs/elastic.md "Local runs start warm"): a later run's ranks are children of the same zygote and find torch imported,
and torch._dynamo, which the idle zygote imported, with no thread besides its own at the fork; a changed variable read at import (in ``env=`` or set in the driver later)
gets a new zygote started with it, and no more than `KEPT` stay, while any other per-run ``env=`` value or later
driver variable reaches the ranks of the same zygote; ``cold_start=True`` starts each rank as a child of the driver;
the zygote ends with its driver process. Oracles: each rank's own report of its parent pid, of its environment, of
its parent's environment (/proc/<ppid>/environ: what the zygote imported under) and of what was in sys.modules
before the function imported anything, against the process table read here (tests.helpers.driver_zygotes, /proc);
an idle zygote is no leftover rank, a rank it forked is one.

Every test names launcher="direct" and np < 0: the only cells with a driver zygote (mpirun's ranks are mpirun's
children; Spark runs fork from executors' zygotes, tests/recovery/test_elastic_warm_ranks.py)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.driver.zygotes import KEPT
from sparkrunner.timeouts import ZYGOTE_WARM_AFTER_S
from tests.helpers import driver_zygotes, fd_targets, parent_of, rank_processes, start_driver, wait_for_line
from tests.waiting import poll_until, wait_until


def _runner(**options: Any) -> Runner:
    return Runner(np=-2, launcher="direct", tracking=False, progress=False, **options)


def torch_report() -> tuple[int, bool, bool]:
    """In a rank: its parent, and whether torch and torch._dynamo were imported before this function's import."""
    had_torch, had_dynamo = "torch" in sys.modules, "torch._dynamo" in sys.modules
    import torch

    torch.ones(1)
    return os.getppid(), had_torch, had_dynamo


def zygote_threads() -> tuple[int, int, bool]:
    """In a rank: its parent (the zygote), the zygote's threads now (/proc, native ones included: it forks from
    this state), and whether CUDA was initialised in what the rank inherited."""
    import torch

    return os.getppid(), len(os.listdir(f"/proc/{os.getppid()}/task")), torch.cuda.is_initialized()


def parent() -> int:
    return os.getppid()


def _pipes() -> int:
    """This process's open pipe descriptors (/proc/self/fd)."""
    return sum(target.startswith("pipe:") for target in fd_targets(os.getpid()))


def test_a_later_run_forks_from_the_same_zygote_and_does_not_import_torch_again() -> None:
    """Also: the later runs' forked ranks leave no output pipe open in the driver (one a rank, once)."""
    first = _runner().run_all(torch_report)
    pipes = _pipes()
    zygotes = driver_zygotes(os.getpid())
    assert not rank_processes(), "an idle zygote between runs is no leftover rank"
    (zygote,) = {ppid for ppid, _, _ in first}
    assert zygote in zygotes and parent_of(zygote) == os.getpid(), (first, zygotes)
    # idle past ZYGOTE_WARM_AFTER_S (a user's next cell), the zygote imports torch._dynamo
    threading.Event().wait(ZYGOTE_WARM_AFTER_S + 0.5)
    later = _runner().run_all(torch_report)
    assert later == [(zygote, True, True)] * 2, later
    assert _runner().run_all(zygote_threads) == [(zygote, 1, False)] * 2, "one thread at the fork, no CUDA"
    retried = _runner(max_failures=1).run_all(torch_report)
    assert {ppid for ppid, _, _ in retried} == {zygote}, "a run that may retry forks from the zygote too"
    assert poll_until(lambda: _pipes() <= pipes, 5), f"{_pipes()} pipes open, {pipes} after the first run"


def test_cold_start_starts_every_rank_as_a_new_interpreter() -> None:
    reports = _runner(cold_start=True).run_all(torch_report)
    assert reports == [(os.getpid(), False, False)] * 2, reports


def zygote_variable(name: str) -> tuple[int, str | None]:
    """In a rank: its parent (the zygote) and the value of `name` the zygote itself was started with (its own
    /proc environ, which its imports read)."""
    with open(f"/proc/{os.getppid()}/environ", "rb") as f:
        entries = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
    value = entries.get(name.encode())
    return os.getppid(), None if value is None else value.decode()


def test_a_changed_variable_read_at_import_gets_a_new_zygote_and_at_most_kept_stay() -> None:
    threads = [str(case + 1) for case in range(KEPT + 1)]
    runs = [_runner(env={"OMP_NUM_THREADS": n}).run_all(zygote_variable, "OMP_NUM_THREADS") for n in threads]
    assert [set(run) for run in runs] == [{(run[0][0], n)} for run, n in zip(runs, threads, strict=True)], (
        runs
    )
    zygotes = [run[0][0] for run in runs]
    assert len(set(zygotes)) == KEPT + 1, "each thread count its own zygote, started with it"
    poll_until(lambda: zygotes[0] not in driver_zygotes(os.getpid()), 10)
    kept = driver_zygotes(os.getpid())
    assert zygotes[0] not in kept and set(zygotes[1:]) <= set(kept) and len(kept) <= KEPT, (zygotes, kept)
    again = _runner(env={"OMP_NUM_THREADS": threads[-1]}).run_all(parent)
    assert set(again) == {zygotes[-1]}, "the same thread count forks from its zygote again"


def test_a_variable_read_at_import_set_in_the_driver_later_gets_a_new_zygote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = "TORCH_SHOW_CPP_STACKTRACES"
    monkeypatch.delenv(name, raising=False)
    (before,) = set(_runner().run_all(zygote_variable, name))
    monkeypatch.setenv(name, "1")
    (after,) = set(_runner().run_all(zygote_variable, name))
    assert before[1] is None and after == (after[0], "1") and after[0] != before[0], (before, after)


def env_report(*names: str) -> tuple[int, list[str | None]]:
    """In a rank: its parent and the values of `names` in its environment."""
    return os.getppid(), [os.environ.get(name) for name in names]


def test_per_run_env_values_and_later_driver_variables_reach_ranks_of_one_zygote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sweep: each run passes its own ``env=`` value, and the driver sets a variable of its own between runs;
    none of them is read at import, so every run forks from one zygote and each rank sees its own run's values."""
    runs = []
    for trial in range(3):
        monkeypatch.setenv("ZYGOTE_TEST_LATER", f"later-{trial}")
        runner = _runner(env={"ZYGOTE_TEST_TAG": f"trial-{trial}"})
        runs.append(runner.run_all(env_report, "ZYGOTE_TEST_TAG", "ZYGOTE_TEST_LATER"))
    zygotes = {ppid for run in runs for ppid, _ in run}
    assert len(zygotes) == 1 and zygotes <= set(driver_zygotes(os.getpid())), (
        runs,
        driver_zygotes(os.getpid()),
    )
    seen = [[values for _, values in run] for run in runs]
    assert seen == [[[f"trial-{t}", f"later-{t}"]] * 2 for t in range(3)], seen


def waits_for(flag: str) -> int:
    import time

    while not Path(flag).exists():
        time.sleep(0.05)
    return os.getppid()


def test_a_running_forked_rank_counts_as_a_rank_of_its_run(tmp_path: Path) -> None:
    """What no_rank_left_behind would see were a forked rank left: its run's id in its /proc environ."""
    flag = tmp_path / "go"
    runner = _runner()
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(runner.run_all(waits_for, str(flag))))
    thread.start()
    try:
        wait_until(lambda: len(rank_processes()) >= 2, 120, "both ranks running")
        processes = rank_processes()
        # the ranks: the run's processes whose parent is not one of them (a rank's own children carry its run id)
        ranks = {pid: cmd for pid, cmd in processes.items() if parent_of(pid) not in processes}
        zygotes = driver_zygotes(os.getpid())
        assert len(ranks) == 2 and {parent_of(pid) for pid in ranks} <= set(zygotes), (processes, zygotes)
        assert all("sparkrunner.ranks.bootstrap" in cmd for cmd in ranks.values()), ranks
    finally:
        flag.touch()
        thread.join(120)
    assert done and len(set(done[0])) == 1 and done[0][0] in zygotes, done


def test_the_zygote_ends_with_its_driver_process() -> None:
    driver = start_driver("warm_driver")
    try:
        wait_for_line(driver, "ran")
        zygotes = driver_zygotes(driver.pid)
        assert len(zygotes) == 1, zygotes
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
        poll_until(lambda: not driver_zygotes(driver.pid), 30)
        assert driver_zygotes(driver.pid) == {}, "the zygote outlived its driver"
    finally:
        driver.kill()
        driver.wait()


def lightning_and_trainer_report(
    deepspeed: bool,
) -> tuple[int, int, list[bool], tuple[str, int, bool] | None]:
    """In a rank: its parent, the parent's threads, whether Lightning, transformers, the Hugging Face Trainer's
    module, MLflow and DeepSpeed were imported before this function imports them, and when `deepspeed`, what
    DeepSpeed's accelerator says in this rank (its kind and device count) and whether CUDA was initialised."""
    names = ("pytorch_lightning", "transformers", "transformers.trainer", "mlflow", "deepspeed")
    had = [name in sys.modules for name in names]
    import pytorch_lightning
    import transformers

    assert pytorch_lightning.Trainer and transformers.Trainer
    accelerator = None
    if deepspeed:
        import torch
        from deepspeed.accelerator import get_accelerator

        found = get_accelerator()
        accelerator = (found.device_name(), found.device_count(), torch.cuda.is_initialized())
    return os.getppid(), len(os.listdir(f"/proc/{os.getppid()}/task")), had, accelerator


def test_lightning_and_transformers_are_preloaded_and_the_trainer_and_deepspeed_warmed_once_idle() -> None:
    """What no torch-only test checks: the framework modules a Lightning or Hugging Face function imports are in the
    zygote before its first fork, and once idle the Trainer's module and what the Trainer imports on first use where
    DeepSpeed is installed (as here): MLflow, and DeepSpeed itself on this CPU-only torch, where its import can only
    pick the CPU; with one thread at the fork and CUDA not initialised. DeepSpeed's accelerator, picked in the
    zygote, counts devices in the rank: ``LOCAL_SIZE`` from the later run's own ``env=`` (no part of the key)."""
    first = _runner(env={"LOCAL_SIZE": "5"}).run_all(lightning_and_trainer_report, False)
    (zygote,) = {ppid for ppid, _, _, _ in first}
    assert [had for _, _, had, _ in first] == [[True, True, False, False, False]] * 2, first
    threading.Event().wait(ZYGOTE_WARM_AFTER_S + 0.5)
    later = _runner(env={"LOCAL_SIZE": "3"}).run_all(lightning_and_trainer_report, True)
    assert later == [(zygote, 1, [True] * 5, ("cpu", 3, False))] * 2, later
