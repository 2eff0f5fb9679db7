"""The sparkrunner image (`make image`), tested inside itself with buildah: every framework imports, Horovod over
mpirun on the driver (np<0), the direct launcher on local-cluster (np>0), and a Spark standalone cluster whose
master, two workers (each in a network namespace of its own: two hosts) and driver all run from the image."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import TEST_SESSION_ENV, rank_processes
from tests.scenarios.cluster.netns_cluster import NetnsCluster, SparkClassCommand, can_create_namespaces
from tests.scenarios.image.container import ROOT, ImageContainer, why_no_image

pytestmark = [pytest.mark.spark, pytest.mark.slow]

_why_not = why_no_image()
if _why_not is not None:
    pytest.skip(f"image tests skipped: {_why_not}", allow_module_level=True)

IMAGE_PYTHON = "/opt/sparkrunner/venv/bin/python"


@pytest.fixture(scope="module")
def container() -> Iterator[ImageContainer]:
    made = ImageContainer()
    try:
        yield made
    finally:
        made.remove()


def _session_env(spark_local_ip: str = "") -> dict[str, str]:
    """Tags every process started in the image, so the host's /proc scan (rank_processes) sees its ranks.

    `spark_local_ip`: the address a Spark driver binds to. Needed under buildah run, whose containers carry
    a hostname (the container id) that no /etc/hosts entry resolves, so Spark cannot find it by name."""
    env = {TEST_SESSION_ENV: os.environ[TEST_SESSION_ENV]}
    return {**env, "SPARK_LOCAL_IP": spark_local_ip} if spark_local_ip else env


def _repo_code_digest() -> str:
    package = ROOT / "sparkrunner"
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _assert_trained_together(result: dict, size: int) -> None:
    assert result["size"] == size
    assert result["sum_of_ranks"] == sum(range(1, size + 1))
    first = result["weights"][0]
    assert all(w == pytest.approx(first, abs=1e-6) for w in result["weights"]), "ranks' weights differ"


def test_every_framework_imports_and_the_code_is_this_checkout(container: ImageContainer) -> None:
    found = container.check("versions")
    print("image versions:", found)
    assert found["python"].startswith("3.11.")
    assert found["torch"].split("+")[0] == "2.13.0"
    assert found["pyspark"] == "4.3.0"
    assert found["horovod"] == "0.28.1" and found["horovod_mpi"] and found["horovod_gloo"]
    assert found["tensorflow"].startswith("2.21.")
    assert '"17.' in found["java"], found["java"]
    assert "Open MPI" in found["mpirun"] and "4.1." in found["mpirun"], found["mpirun"]
    assert found["spark_home"].endswith("/site-packages/pyspark")
    assert found["sparkrunner_sha256"] == _repo_code_digest(), (
        "the image is older than this code: `make image`"
    )


def test_horovod_over_mpirun_on_the_driver(container: ImageContainer) -> None:
    """Runner(np=-2, launcher="mpirun"): two ranks in the image, Horovod's MPI controller."""
    result = container.check("horovod-local", env=_session_env())
    _assert_trained_together(result, size=2)
    assert result["controller"] == "mpi"
    assert result["losses"][-1] < result["losses"][0]


def test_direct_launcher_on_local_cluster(container: ImageContainer) -> None:
    """Runner(np=2, launcher="direct") on local-cluster[2,1,1024]: a Spark barrier stage, torch DDP over Gloo."""
    result = container.check("direct-local-cluster", env=_session_env(spark_local_ip="127.0.0.1"))
    _assert_trained_together(result, size=2)


def _image_spark_class(container: ImageContainer) -> SparkClassCommand:
    """spark-class from the image, with the host's name and the host's /etc/hosts (where the fixture names
    every host); work dirs stay inside the container."""

    def command(spark_env: dict[str, str], hostname: str | None) -> list[str]:
        names = ("SPARK_NO_DAEMONIZE", "SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")
        env = {name: spark_env[name] for name in names if name in spark_env}
        return container.run_command(
            "/opt/spark/bin/spark-class", env={**env, **_session_env()}, hostname=hostname or ""
        )

    return command


@pytest.fixture(scope="module")
def image_cluster(container: ImageContainer) -> Iterator[NetnsCluster]:
    why_not = can_create_namespaces()
    if why_not is not None:
        pytest.skip(f"multi-host image test skipped: {why_not}")
    cluster = NetnsCluster(hosts=2, slots_per_host=1, variant=7, spark_class=_image_spark_class(container))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def test_driver_trains_across_two_hosts_of_image_workers(
    container: ImageContainer, image_cluster: NetnsCluster
) -> None:
    """Master, two workers (two network namespaces = two hosts) and driver all from the image;
    Runner(np=2, launcher="mpirun") puts one Horovod rank on each host."""
    driver_env = _session_env(spark_local_ip=image_cluster.master_host)
    result = container.check("across-hosts", image_cluster.url, image_cluster.master_host, env=driver_env)
    _assert_trained_together(result, size=2)
    assert result["controller"] == "mpi"
    hosts = [set(rank["ips"]) & set(image_cluster.worker_addresses) for rank in result["ranks"]]
    assert sorted(h.pop() for h in hosts) == sorted(image_cluster.worker_addresses), result["ranks"]
    assert rank_processes() == {}
    for ns in image_cluster.namespaces:
        leftovers = [pid for pid in image_cluster.pids_in(ns) if _is_rank_process(pid)]
        assert leftovers == [], f"rank processes left in {ns}"


def _is_rank_process(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return any(
        word in cmdline for word in (b"orted", b"mpirun", b"sparkrunner.ranks.bootstrap", b"rsh_agent")
    )
