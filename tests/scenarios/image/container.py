"""A working container of the built sparkrunner image, run with buildah (chroot isolation, the host's network
and process table), through docker/buildah.sh so that the tests see the storage `make image` built into."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BUILDAH = ["bash", str(ROOT / "docker" / "buildah.sh")]
CHECKS_DIR = "/checks"  # tests/scenarios/image mounted read-only: in_image.py runs from there
RESULT_PREFIX = "RESULT "


def why_no_image() -> str | None:
    """None when the image can be tested; a reason to skip when buildah is missing (then no image can exist)."""
    if shutil.which("buildah") is None:
        return "buildah is not installed (scripts/setup.sh installs it; then `make image`)"
    return None


def tree_image() -> str:
    """The name of the image built from this checkout's current inputs (docker/build_image.sh hashes them)."""
    done = subprocess.run(
        ["bash", str(ROOT / "docker" / "build_image.sh"), "--print-image"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def buildah(*args: str, timeout: float = 600) -> str:
    done = subprocess.run([*BUILDAH, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


class ImageContainer:
    """One working container of this checkout's image; `run_command` builds the command line that runs inside it."""

    def __init__(self) -> None:
        image = tree_image()
        if subprocess.run([*BUILDAH, "inspect", "--type", "image", image], capture_output=True).returncode:
            raise RuntimeError(
                f"no image is built from this checkout's current code ({image}): run `make image`"
            )
        self.name = f"sparkrunner-test-{os.getpid()}"
        if self._exists():  # left by a killed earlier run with this pid
            buildah("rm", self.name, timeout=300)
        buildah("from", "--name", self.name, image)

    def _exists(self) -> bool:
        return subprocess.run([*BUILDAH, "inspect", self.name], capture_output=True).returncode == 0

    def run_command(self, *command: str, env: dict[str, str] | None = None, hostname: str = "") -> list[str]:
        """The host command line that runs `command` in the container (tests/scenarios/image mounted at /checks).

        buildah's chroot isolation gives each run a UTS namespace named after the container: `hostname` sets
        another name, as every host of a cluster needs (MPI tells nodes apart by name)."""
        options = [f"--env={name}={value}" for name, value in (env or {}).items()]
        options.append(f"--volume={ROOT / 'tests' / 'scenarios' / 'image'}:{CHECKS_DIR}:ro")
        options.append("--volume=/etc/hosts:/etc/hosts:ro")  # the names multi-host fixtures give their hosts
        if hostname:
            options.append(f"--hostname={hostname}")
        return [*BUILDAH, "run", "--isolation", "chroot", *options, self.name, "--", *command]

    def check(self, name: str, *args: str, env: dict[str, str] | None = None, timeout: float = 500) -> dict:
        """Runs in_image.py's check `name` in the container and returns its result (fails with its output)."""
        command = self.run_command("python", f"{CHECKS_DIR}/in_image.py", name, *args, env=env)
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        results = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
        assert done.returncode == 0 and results, (
            f"{name} failed in the image (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        return json.loads(results[-1][len(RESULT_PREFIX) :])

    def remove(self) -> None:
        subprocess.run([*BUILDAH, "rm", self.name], capture_output=True, timeout=300)
