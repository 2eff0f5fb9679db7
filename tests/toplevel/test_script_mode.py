"""Script mode: `run("train.py", *argv)` and `run_module("pkg.train", *argv)` run as __main__ on every rank.

Launchers `direct` and `mpirun` on the driver (np < 0), and `direct` in a real `local[2]` barrier stage.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import InvalidArgumentError, RankFailedError
from sparkrunner.script import script_call
from tests.helpers import ROOT, driver, line_of
from tests.matrix import LAUNCHERS


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def project(tmp_path: Path) -> dict[str, Path]:
    """A script in one folder and its helper module in another (shipped with code_dir)."""
    code = tmp_path / "code"
    write(code, "helpers.py", "def double(x):\n    return 2 * x\n")
    return {"script": driver("script_train"), "code": code}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_script_runs_as_main_with_argv_and_shipped_helpers(
    launcher: str, project: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    runner = Runner(np=-2, launcher=launcher)
    assert runner.run(str(project["script"]), "--lr", 0.1, code_dir=project["code"]) is None
    out = capsys.readouterr().out
    for rank in range(2):
        assert f"[rank {rank}] script name=__main__ rank={rank} world=2 argv=['--lr', '0.1']" in out
        assert f"[rank {rank}] helper {2 * rank} from " in out
    shipped = {line.rsplit(" from ", 1)[1] for line in out.splitlines() if " helper " in line}
    assert len(shipped) == 2, "every rank unpacks its own copy"
    for path in shipped:
        assert not path.startswith(str(project["code"])), "helpers must come from the shipped copy"
        assert not os.path.exists(path), "the unpacked copy is removed when the script ends"
    assert runner.last_run is not None and runner.last_run.function == "script_train.py"


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_script_error_carries_the_scripts_traceback(launcher: str, tmp_path: Path) -> None:
    script = driver("script_fails")
    with pytest.raises(RankFailedError) as info:
        Runner(np=-2, launcher=launcher).run(script)
    error = info.value
    assert (error.rank, error.exc_type, error.exit_code) == (1, "KeyError", None)
    trace = error.remote_traceback
    call_line, raise_line = line_of(script, 'load("label")'), line_of(script, "raise KeyError")
    assert f'File "{script}", line {call_line}, in <module>' in trace
    assert f'File "{script}", line {raise_line}, in load' in trace
    assert 'raise KeyError(f"missing column {column!r}")' in trace, "the script's own lines are shown"
    assert "sparkrunner" not in trace and "runpy" not in trace, trace


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_non_zero_exit_fails_the_run_with_its_code(launcher: str, tmp_path: Path) -> None:
    script = driver("script_exits")
    with pytest.raises(RankFailedError) as info:
        Runner(np=-2, launcher=launcher).run_script(script)
    assert info.value.rank == 1 and info.value.exit_code == 3
    assert "script_exits.py exited with code 3" in str(info.value)
    assert 'sys.exit(3 if os.environ["RANK"] == "1" else 0)' in info.value.remote_traceback


@pytest.mark.slow
def test_exit_zero_and_exit_none_succeed(tmp_path: Path) -> None:
    script = write(tmp_path, "ok.py", "import sys\nsys.exit(0 if sys.argv[1] == 'zero' else None)\n")
    runner = Runner(np=-2, launcher="direct")
    assert runner.run(script, "zero") is None
    assert runner.run(script, "none") is None


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_run_module_like_python_dash_m(
    launcher: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = tmp_path / "src"
    write(code, "pkg/__init__.py", "")
    write(code, "pkg/config.py", "EPOCHS = 7\n")
    write(
        code,
        "pkg/train.py",
        """
        import os, sys
        from pkg.config import EPOCHS
        if __name__ == "__main__":
            print(f"module rank={os.environ['RANK']} epochs={EPOCHS} argv={sys.argv[1:]}")
        """,
    )
    assert Runner(np=-2, launcher=launcher).run_module("pkg.train", "--fast", code_dir=code) is None
    out = capsys.readouterr().out
    for rank in range(2):
        assert f"[rank {rank}] module rank={rank} epochs=7 argv=['--fast']" in out


def test_the_script_travels_in_the_payload(tmp_path: Path) -> None:
    """The ranks never read the script's file: a fresh interpreter runs the call after the file is gone."""
    script = write(tmp_path, "gone.py", "import sys\nprint('ran', __name__, sys.argv[1:])\n")
    call = pickle.dumps(script_call(script, ("x",), None))
    script.unlink()
    done = subprocess.run(
        [sys.executable, "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read())()"],
        input=call,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == "ran __main__ ['x']"


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("missing.py",), {}, "does not exist"),
        (("broken.py",), {}, r"broken.py cannot run: .*line 1"),
        (("ok.py",), {"lr": 0.1}, "not keyword arguments \\(lr\\)"),
        (("ok.py", ["a"]), {}, "command-line strings"),
        (("ok.py",), {"code_dir": "nowhere"}, "is not a directory"),
    ],
)
def test_bad_script_input_is_refused_before_anything_starts(
    tmp_path: Path, args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    write(tmp_path, "broken.py", "def (:\n")
    write(tmp_path, "ok.py", "pass\n")
    os.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match=message):
        Runner(np=-2, launcher="direct").run(*args, **kwargs)


def test_run_module_refuses_a_path() -> None:
    with pytest.raises(InvalidArgumentError, match="dotted module name"):
        Runner(np=-2, launcher="direct").run_module("pkg/train.py")


@pytest.mark.spark
def test_script_in_a_spark_barrier_stage(
    spark_local: Any, project: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Runner(np=2, launcher="direct").run(project["script"], "--epochs", "2", code_dir=project["code"])
    out = capsys.readouterr().out
    for rank in range(2):
        assert f"[rank {rank}] script name=__main__ rank={rank} world=2 argv=['--epochs', '2']" in out
    with pytest.raises(RankFailedError) as info:
        Runner(np=2, launcher="direct").run(driver("script_exits"))
    assert info.value.exit_code == 3
