"""Execute a notebook top to bottom in a kernel that runs this interpreter (the repo's .venv).

``python -m tests.scenarios.notebooks.execute notebooks/*.ipynb`` refreshes the committed copies' outputs.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNEL = "sparkrunner-venv"
CELL_TIMEOUT_S = 600
CHECKOUT = Path(__file__).resolve().parents[3]


def _write_kernelspec(root: str) -> None:
    """A kernelspec for this interpreter, so the notebooks run here whatever kernels the machine has; its
    kernel imports this checkout's sparkrunner first (the interpreter's editable install may be another's)."""
    spec = Path(root, "kernels", KERNEL)
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    path = os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))
    spec.joinpath("kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": KERNEL, "language": "python", "env": {"PYTHONPATH": path}})
    )


def execute(path: Path, workdir: Path) -> nbformat.NotebookNode:
    """Run every cell of the notebook at `path` with `workdir` as the working directory; raise on any error."""
    notebook = nbformat.read(path, as_version=4)
    saved = os.environ.get("JUPYTER_PATH")
    with tempfile.TemporaryDirectory(prefix="sparkrunner-kernels-") as kernels:
        _write_kernelspec(kernels)
        os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [kernels, saved]))
        try:
            NotebookClient(
                notebook,
                timeout=CELL_TIMEOUT_S,
                kernel_name=KERNEL,
                resources={"metadata": {"path": str(workdir)}},
            ).execute()
        finally:
            if saved is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = saved
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    return notebook


if __name__ == "__main__":
    for name in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as work:
            nbformat.write(execute(Path(name), Path(work)), name)
            print("executed", name)
