"""The real `sparkrunner` command in a subprocess: `run` (np < 0, Spark, inside spark-submit), exit codes,
`check`. Launchers and placements are named in each command line. Its flags, read in this process: each
`Runner` option a shell can give, parsed into `Runner`'s keyword arguments, and bad values refused before
anything starts."""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
import tomllib

from sparkrunner import Runner
from sparkrunner.cli import INTERRUPTED, command_parser, exit_status, main, runner_options
from sparkrunner.errors import AttemptsFailedError, RankFailedError, ScriptExitError, SparkRunnerError
from tests.helpers import ROOT, driver, leftover_rank_processes, line_of, wait_for_line


def cli(
    *args: str,
    cwd: Path,
    prefix: tuple[str, ...] = (sys.executable, "-m", "sparkrunner"),
    spark_python: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the command as a user's shell would: no PYSPARK_PYTHON (the suite sets one for itself) unless
    `spark_python` (spark-submit needs to be told which interpreter runs the driver)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PYTHONPATH"] = str(ROOT)
    if spark_python:
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return subprocess.run([*prefix, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=540)


def script(tmp_path: Path) -> str:
    """`tests/programs/cli_train.py`, copied as train.py into the test's folder (the command's working dir)."""
    path = tmp_path / "train.py"
    shutil.copy(driver("cli_train"), path)
    return str(path)


@pytest.mark.slow
def test_run_on_the_driver_through_the_console_script_streams_output_and_succeeds(tmp_path: Path) -> None:
    """Run what pyproject's [project.scripts] names, the way pip's console-script wrapper calls it (the other
    tests run `python -m sparkrunner`: both call the same `main`)."""
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["sparkrunner"]
    module, function = target.split(":")
    wrapper = f"import sys; from {module} import {function}; sys.exit({function}())"
    done = cli(
        *("run", "--np", "-2", "--launcher", "direct", script(tmp_path), "--lr", "0.1"),
        cwd=tmp_path,
        prefix=(sys.executable, "-c", wrapper),
    )
    assert done.returncode == 0, done.stderr
    for rank in range(2):
        assert f"[rank {rank}] rank {rank} of 2 argv=['--lr', '0.1']" in done.stdout


@pytest.mark.slow  # mpirun
def test_exit_status_is_the_scripts(tmp_path: Path) -> None:
    done = cli("run", "--np", "-2", "--launcher", "mpirun", script(tmp_path), "--fail", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "rank 1 failed with sparkrunner.errors.ScriptExitError: train.py exited with code 3" in done.stderr
    exit_line = line_of(driver("cli_train"), "sys.exit(3)")
    assert f'File "{tmp_path / "train.py"}", line {exit_line}, in <module>' in done.stderr


@pytest.mark.slow
def test_bad_arguments_fail_with_a_message_and_help_lists_the_flags(tmp_path: Path) -> None:
    done = cli("run", "--np", "0", script(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "sparkrunner run: error: np=0 starts no rank" in done.stderr, done.stderr
    shown = cli("run", "--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    for flag in (
        "--max-failures N",
        "--checkpoint-dir PATH",
        "--np N|MIN:MAX",
        "--no-progress",
        "--ranks-per-task",
    ):
        assert flag in shown.stdout, shown.stdout


@pytest.mark.slow
def test_ctrl_c_in_the_second_attempt_of_a_retried_run_exits_130(tmp_path: Path) -> None:
    """Placement np<0, launcher direct: `--max-failures 2`, the first attempt's ranks exit 3, Ctrl-C while the
    second attempt's ranks sleep: the command exits 130 (not the first attempt's 3), nothing left (/proc)."""
    train = tmp_path / "train.py"
    shutil.copy(driver("cli_retried_sleeper"), train)
    flags = (
        "--np",
        "-2",
        "--launcher",
        "direct",
        "--max-failures",
        "2",
        "--checkpoint-dir",
        str(tmp_path / "ck"),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")} | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sparkrunner",
            "run",
            *flags,
            "--no-progress",
            "--tracking",
            "false",
            str(train),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for_line(proc, "rank started")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == INTERRUPTED, out
    assert leftover_rank_processes(grace_s=10) == {}


def parsed(*argv: str) -> dict[str, object]:
    """The `Runner` keyword arguments `sparkrunner run ARGV train.py` passes."""
    return runner_options(command_parser().parse_args(["run", *argv, "train.py"]))


def test_every_runner_option_a_shell_can_spell_is_a_flag() -> None:
    """Every keyword of `Runner` but the Python objects (a session, observers, a function) has a flag."""
    objects = {"spark", "observers", "retry_if"}
    expected = [name for name in inspect.signature(Runner).parameters if name not in objects]
    assert list(parsed("--np", "-1")) == expected


def test_the_flags_give_runner_their_values() -> None:
    given = parsed(
        *("--np", "2:4", "--max-failures", "3", "--checkpoint-dir", "/shared/ckpt", "--tracking", "false"),
        *(
            "--no-progress",
            "--ranks-per-task",
            "2",
            "--timeout",
            "5.5",
            "--stop-grace-s",
            "1",
            "--env",
            "A=1",
        ),
        *(
            "--env",
            "B=x=y",
            "--use-gpu",
            "--port-range",
            "40000-40199",
            "--launcher",
            "mpirun",
            "--cold-start",
        ),
        *("--start-timeout", "30", "--stall-timeout", "60", "--on-stall", "fail", "--no-horovod"),
        *("--driver-log-verbosity", "log_callback_only"),
    )
    assert given == {
        "np": (2, 4), "launcher": "mpirun", "driver_log_verbosity": "log_callback_only", "start_timeout": 30.0,
        "timeout": 5.5, "env": {"A": "1", "B": "x=y"}, "tracking": False, "progress": False, "max_failures": 3,
        "checkpoint_dir": "/shared/ckpt", "stop_grace_s": 1.0, "stall_timeout": 60.0, "on_stall": "fail",
        "horovod": False, "use_gpu": True, "ranks_per_task": 2, "port_range": "40000-40199", "cold_start": True,
    }  # fmt: skip
    defaults = parsed("--np", "-2")
    signature = inspect.signature(Runner).parameters
    for name in ("launcher", "timeout", "tracking", "progress", "max_failures", "checkpoint_dir", "use_gpu"):
        assert defaults[name] == signature[name].default, name
    assert (
        defaults["np"],
        defaults["env"],
        parsed("--np", "-1", "--tracking", "sqlite:///m.db")["tracking"],
    ) == (
        -2,
        {},
        "sqlite:///m.db",
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--np", "two"], "argument --np: np takes N or MIN:MAX"),
        (["--np", "2:x"], "argument --np: np takes N or MIN:MAX"),
        (["--np", "-1", "--max-failures", "x"], "argument --max-failures: invalid int value: 'x'"),
        (["--np", "-1", "--timeout", "soon"], "argument --timeout: invalid float value: 'soon'"),
        (["--np", "-1", "--launcher", "ssh"], "argument --launcher: invalid choice: 'ssh'"),
        (["--np", "-1", "--env", "NOVALUE"], "argument --env: takes NAME=VALUE, not 'NOVALUE'"),
        (["--np", "4:2"], "np=(4, 2): min (4) is larger than max (2)"),
        (["--np", "2", "--max-failures", "2"], "max_failures=2 resumes failed attempts from checkpoints"),
        (["--np", "-1", "--timeout", "0"], "timeout must be a number of seconds > 0, not 0.0"),
        (["--np", "-1", "--port-range", "5-6"], "port_range='5-6' must satisfy 1024 <= low"),
    ],
)
def test_a_bad_flag_value_exits_2_naming_it_before_anything_starts(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Parsed in this process: the error comes before a Spark session is made (np > 0 cases included)."""
    with pytest.raises(SystemExit) as ended:
        main(["run", *argv, "train.py"])
    assert ended.value.code == 2
    assert says in capsys.readouterr().err


def _raise(error: BaseException) -> int:
    raise error


def test_the_exit_status_says_how_the_command_ended(capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C is 128 + SIGINT, as a shell reports it; a script's exit code is the command's, also when every
    attempt of a retried run failed (the last attempt's)."""
    script_failed = RankFailedError(1, "ScriptExitError", "exited", original=ScriptExitError("t.py", 3))
    assert exit_status(lambda: 0) == 0
    assert exit_status(lambda: _raise(KeyboardInterrupt())) == INTERRUPTED == 128 + signal.SIGINT
    assert exit_status(lambda: _raise(script_failed)) == 3
    assert (
        exit_status(
            lambda: _raise(AttemptsFailedError("every attempt failed", [ValueError(), script_failed]))
        )
        == 3
    )
    assert exit_status(lambda: _raise(SparkRunnerError("no"))) == 1
    assert "sparkrunner: interrupted" in capsys.readouterr().err


@pytest.mark.spark  # a Spark driver in the subprocess
def test_run_in_a_spark_barrier_stage_from_the_command_line(tmp_path: Path) -> None:
    done = cli(
        "run",
        "--np",
        "2",
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--launcher",
        "direct",
        script(tmp_path),
        "--epochs",
        "1",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in range(2):
        assert f"[rank {rank}] rank {rank} of 2 argv=['--epochs', '1']" in done.stdout
    # the executors' console is this driver's (a local master): each line shows once, relayed, not also raw
    console = done.stdout + done.stderr
    assert console.count("of 2 argv=['--epochs', '1']") == 2, console[-3000:]


@pytest.mark.spark  # a Spark driver in the subprocess
def test_the_documented_spark_submit_one_liner(tmp_path: Path) -> None:
    """A spark-submit job whose driver is sparkrunner's entry point: its Runner runs the ranks in a barrier stage
    of the session spark-submit started (np=2, launcher mpirun, on `local[2]`), and rank 1's exit code is the
    job's."""
    entry = cli("entry-point", cwd=tmp_path).stdout.strip()
    assert entry.endswith("sparkrunner/__main__.py") and os.path.isfile(entry)
    submit = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")
    done = cli(
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        entry,
        "run",
        "--np",
        "2",
        "--launcher",
        "mpirun",
        script(tmp_path),
        "--fail",
        cwd=tmp_path,
        prefix=(submit,),
        spark_python=True,
    )
    assert done.returncode == 3, done.stderr[-3000:]
    assert "[rank 0] rank 0 of 2 argv=['--fail']" in done.stdout
    assert (done.stdout + done.stderr).count("rank 0 of 2 argv=['--fail']") == 1, (
        "each line once (mpirun too)"
    )
    assert "train.py exited with code 3" in done.stdout, "spark-submit sends its Python's stderr to stdout"


@pytest.mark.spark  # a Spark driver in the subprocess
def test_check_reports_the_stack(tmp_path: Path) -> None:
    done = cli("check", "--master", "local[2]", "--conf", "spark.ui.enabled=false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "Spark: 4.3.0, master local[2]" in out or f"Spark: {pyspark.__version__}, master local[2]" in out
    assert "  task slots: 2\n" in out
    assert "  direct: available" in out
    assert "  mpirun: available (mpirun (Open MPI)" in out
    assert f"Horovod {importlib.metadata.version('horovod')}: MPI yes, Gloo yes, NCCL no" in out
    assert f"torch: {importlib.metadata.version('torch')}" in out
    assert "GPUs on this machine: 0" in out, "this CI machine has no GPU"
