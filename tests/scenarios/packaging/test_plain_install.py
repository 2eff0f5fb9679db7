"""The README's install line works as written: the wheel with no extras, in an empty virtual environment.

`pip install sparkrunner` brings pyspark, cloudpickle, cryptography and psutil, nothing else; `Runner(np=-2)` and
`Runner(np=2)` on local Spark run there, and a feature whose extra is missing names the extra to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from email.parser import Parser
from pathlib import Path
from zipfile import ZipFile

import pytest

ROOT = Path(__file__).resolve().parents[3]
OPTIONAL = ("numpy", "pyarrow", "pandas", "torch", "tensorflow", "mlflow", "tqdm", "horovod")

pytestmark = pytest.mark.slow
# the empty venv sees nothing of this checkout: with it on PYTHONPATH (run_tests.sh puts it there), pip would take
# the checkout's egg-info for an installed sparkrunner and skip the wheel
ISOLATED = {**os.environ, "PYTHONPATH": ""}

PLAIN_RUN = """
import os, sys
from sparkrunner import Runner
from sparkrunner.errors import MissingExtraError
print("local", Runner(np=-2, launcher="direct").run_all(lambda: int(os.environ["RANK"])))
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
print("spark", Runner(np=2, launcher="direct").run_all(lambda: int(os.environ["RANK"])))
spark.stop()
for attempt in ("from sparkrunner.data import materialize", "Runner(np=-2, tracking=True)"):
    try:
        exec(attempt)
    except MissingExtraError as exc:
        print("missing:", exc)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built from a copy of what it packages: setuptools keeps a build/ folder in the
    source tree, whose files of modules since deleted would otherwise end up in the wheel."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "sparkrunner", source / "sparkrunner", ignore=shutil.ignore_patterns("__pycache__")
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)], check=True
    )
    return next(out.glob("sparkrunner-*.whl"))


@pytest.fixture(scope="module")
def plain_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty venv (no system site-packages) with the wheel and its required dependencies only."""
    home = tmp_path_factory.mktemp("plain-venv")
    venv.create(home, with_pip=True)
    python = home / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=900, env=ISOLATED
    )
    return python


def test_a_plain_install_brings_no_optional_dependency(plain_python: Path) -> None:
    listed = subprocess.run(
        [str(plain_python), "-m", "pip", "list", "--format=freeze"],
        env=ISOLATED,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    names = {line.split("==")[0].replace("_", "-") for line in listed.split()}
    assert {"sparkrunner", "pyspark", "cloudpickle", "cryptography", "psutil"} <= names, names
    assert not names & set(OPTIONAL), f"a plain install pulled optional packages: {names & set(OPTIONAL)}"


def test_a_plain_install_runs_locally_and_on_spark_and_names_missing_extras(plain_python: Path) -> None:
    env = {**ISOLATED, "PYSPARK_PYTHON": str(plain_python)}
    done = subprocess.run(
        [str(plain_python), "-c", PLAIN_RUN], capture_output=True, text=True, env=env, timeout=300, cwd="/"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "local [0, 1]" in lines and "spark [0, 1]" in lines, done.stdout
    missing = [line for line in lines if line.startswith("missing:")]
    assert len(missing) == 2, done.stdout
    assert "sparkrunner[data]" in missing[0] and "numpy" in missing[0], missing
    assert "sparkrunner[mlflow]" in missing[1], missing


def test_each_extra_names_only_its_own_packages(wheel: Path) -> None:
    """The wheel's metadata, as pip reads it: `data` brings pyarrow, numpy and pandas, and no extra brings torch
    unless it is named for it (`torch`, or `all`)."""
    with ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith("METADATA"))
        message = Parser().parsestr(archive.read(meta).decode())
    by_extra: dict[str, set[str]] = {}
    for requirement in message.get_all("Requires-Dist") or []:
        if "extra ==" in requirement:
            extra = requirement.split("extra ==")[1].strip().strip("\"'")
            name = requirement.split(";")[0].strip().split("[")[0]
            for sep in "<>=!~ ":
                name = name.split(sep)[0]
            by_extra.setdefault(extra, set()).add(name.lower())
    assert by_extra["data"] == {"pyarrow", "numpy", "pandas"}, by_extra["data"]
    assert by_extra["mlflow"] == {"mlflow"} and by_extra["progress"] == {"tqdm"}, by_extra
    assert [extra for extra, names in by_extra.items() if "torch" in names] == ["torch"], by_extra
