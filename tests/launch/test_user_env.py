"""Explicit settings win: a variable the user set in `Runner(env=...)` or the driver's environment
reaches every rank as set (PYTHONPATH: the user's entries first), and env= naming a variable that sparkrunner
must choose is refused before anything starts. The oracle is the rank's own `os.environ`, and an import of a
module that only the user's PYTHONPATH holds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import InvalidArgumentError
from tests.matrix import LAUNCHERS, Placement

KEPT = {
    "OMP_NUM_THREADS": "3",
    "GLOO_SOCKET_IFNAME": "eth0",
    "NCCL_SOCKET_IFNAME": "^docker",
    "PYTHONUNBUFFERED": "yes",
    "TF_USE_LEGACY_KERAS": "0",
    "HOROVOD_CONTROLLER": "mpi",
    "HOROVOD_CPU_OPERATIONS": "mpi",
}
"""A value for each variable sparkrunner would otherwise choose, unlike what it chooses."""

REFUSED = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG"]
REFUSED += ["JAX_COORDINATOR_ADDRESS", "HOROVOD_RANK", "HOROVOD_GLOO_RENDEZVOUS_PORT", "SPARKRUNNER_RUN_ID"]
REFUSED += ["SPARKRUNNER_STOP_GRACE_S", "SPARKRUNNER_PORT_RANGE", "SPARKRUNNER_USE_GPU"]


def environment_and_import(names: list[str]) -> dict[str, Any]:
    """Each rank: the named variables as it sees them, and whether the user's module imports."""
    import mylib  # only on the user's PYTHONPATH

    seen = {name: os.environ.get(name) for name in names}
    return {"env": seen, "mylib": mylib.VALUE, "rank": int(os.environ["RANK"])}


@pytest.fixture(scope="module")
def user_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mylibs")
    (folder / "mylib.py").write_text("VALUE = 'from the user PYTHONPATH'\n")
    return folder


_seen: dict[tuple[str, str], list[dict[str, Any]]] = {}


def ranks_saw(launcher: str, placement: Placement, user_lib: Path) -> list[dict[str, Any]]:
    """Every rank's view of `KEPT` and PYTHONPATH, from one run per launcher and placement."""
    key = (launcher, placement.name)
    if key not in _seen:
        env = {**KEPT, "PYTHONPATH": str(user_lib)}
        runner = Runner(np=placement.np(2), launcher=launcher, spark=placement.spark, env=env, tracking=False)
        _seen[key] = runner.run_all(environment_and_import, [*KEPT, "PYTHONPATH"])
    return _seen[key]


@pytest.mark.parametrize("name", sorted(KEPT))
def test_an_explicit_value_reaches_every_rank(
    name: str, launcher: str, placement: Placement, user_lib: Path
) -> None:
    for rank in ranks_saw(launcher, placement, user_lib):
        assert rank["env"][name] == KEPT[name], rank


def test_the_user_pythonpath_comes_first_and_sparkrunner_still_imports(
    launcher: str, placement: Placement, user_lib: Path
) -> None:
    for rank in ranks_saw(launcher, placement, user_lib):
        entries = rank["env"]["PYTHONPATH"].split(os.pathsep)
        assert entries[0] == str(user_lib), entries
        assert rank["mylib"] == "from the user PYTHONPATH"


def driver_environment(names: list[str]) -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in names}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_the_driver_environment_wins_over_sparkrunner_defaults(
    launcher: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in KEPT.items():
        monkeypatch.setenv(name, value)
    seen = Runner(np=-2, launcher=launcher, tracking=False).run_all(driver_environment, list(KEPT))
    assert seen == [KEPT, KEPT]


@pytest.mark.parametrize("np", [-2, 2], ids=["np<0", "spark"])
@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("name", REFUSED)
def test_env_naming_a_run_variable_is_refused_before_anything_starts(
    name: str, launcher: str, np: int
) -> None:
    with pytest.raises(InvalidArgumentError, match=f"{name} \\("):
        Runner(np=np, launcher=launcher, env={"PATH": os.environ["PATH"], name: "1"})


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_gpus_chosen_in_env_are_refused_where_sparkrunner_chooses_them(launcher: str) -> None:
    gpus = {"CUDA_VISIBLE_DEVICES": "0"}
    with pytest.raises(
        InvalidArgumentError, match=r"CUDA_VISIBLE_DEVICES .*spark\.task\.resource\.gpu\.amount"
    ):
        Runner(np=2, launcher=launcher, env=gpus)
    with pytest.raises(InvalidArgumentError, match=r"CUDA_VISIBLE_DEVICES .*use_gpu=False"):
        Runner(np=-2, launcher=launcher, env=gpus, use_gpu=False)
    Runner(np=-2, launcher=launcher, env=gpus)  # the driver's machine: the user's choice


def test_a_jar_without_python_code_is_left_off_the_rank_pythonpath(tmp_path: Path) -> None:
    """Spark's Python workers carry spark-core's jar on PYTHONPATH: a jar holding no Python file is dropped (it
    could supply no module), one that ships a Python package stays, and so does every other entry. The oracle
    is Python's own zipimport: what each entry can import."""
    import zipfile
    import zipimport

    from sparkrunner.common import user_env

    classes, with_python, folder = tmp_path / "core.jar", tmp_path / "package.jar", tmp_path / "src"
    with zipfile.ZipFile(classes, "w") as jar:
        jar.writestr("org/apache/spark/SparkContext.class", b"\xca\xfe\xba\xbe")
    with zipfile.ZipFile(with_python, "w") as jar:
        jar.writestr("graphlib_x/__init__.py", "VALUE = 1\n")
    assert zipimport.zipimporter(str(with_python)).find_spec("graphlib_x") is not None
    assert zipimport.zipimporter(str(classes)).find_spec("SparkContext") is None
    entries = user_env.python_path([os.pathsep.join(map(str, [classes, with_python, folder]))]).split(
        os.pathsep
    )
    assert entries[:2] == [str(with_python), str(folder)] and str(classes) not in entries
