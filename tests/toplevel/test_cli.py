"""The real `sparkrunner` command in a subprocess: `run` (np < 0, Spark, inside spark-submit), exit codes,
`check`. Launchers and placements are named in each command line."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
import tomllib

from tests.helpers import ROOT, driver, line_of


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
def test_bad_arguments_fail_with_a_message(tmp_path: Path) -> None:
    done = cli("run", "--np", "0", script(tmp_path), cwd=tmp_path)
    assert done.returncode == 1 and "np=0 starts no rank" in done.stderr
    done = cli("run", "--np", "-1", "--env", "NOVALUE", script(tmp_path), cwd=tmp_path)
    assert done.returncode == 1 and "--env takes NAME=VALUE, not 'NOVALUE'" in done.stderr


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
    assert (done.stdout + done.stderr).count("rank 0 of 2 argv=['--fail']") == 1, "each line once (mpirun too)"
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
