"""The flags every JVM the tests start runs with (tests/conftest.py sets them as JDK_JAVA_OPTIONS): Spark's JVMs in
the tests live seconds to minutes, where C2 compilation and G1's threads are most of their CPU time, and where
loading Spark's classes from its jars is much of the rest (bench/jvm_flags.py measures both).

The classes come from a class-data-sharing archive of this Java and this pyspark's jars, when one was built:
`python -m tests.jvm_flags` builds it (scripts/run_tests.sh does, for each environment it tests) by running a
small session with `-XX:ArchiveClassesAtExit`, and does nothing when it exists. It lives in
$SPARKRUNNER_CACHE/jvm (default ~/.cache/sparkrunner), named by what it depends on.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

TEST_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

_DUMP_SESSION = """
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
for _ in range(2):
    spark.range(1000).repartition(2).selectExpr("sum(id)").collect()
    spark.sparkContext.parallelize(range(4), 2).map(lambda x: x * 2).collect()
spark.stop()
"""
"""What the archive holds the classes of: a session's start, a few jobs of both APIs, its stop."""


def class_data_archive() -> Path | None:
    """Where the archive of this interpreter's pyspark and this `java` lives (it may not exist): named by the
    jars, the Java runtime and the flags, since the JVM refuses an archive made with others. None without
    pyspark (the Petastorm environment)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    jars = Path(spec.origin).parent / "jars"
    home = os.environ.get("JAVA_HOME")
    java = os.path.realpath(os.path.join(home, "bin", "java") if home else shutil.which("java") or "java")
    java += f" {os.stat(java).st_mtime_ns}" if os.path.exists(java) else ""
    listing = "\n".join(sorted(f"{p.name} {p.stat().st_size}" for p in jars.glob("*.jar")))
    key = hashlib.sha256(f"{jars}\n{listing}\n{java}\n{TEST_JVM_FLAGS}".encode()).hexdigest()[:16]
    cache = Path(os.environ.get("SPARKRUNNER_CACHE") or Path.home() / ".cache" / "sparkrunner")
    return cache / "jvm" / f"spark-{key}.jsa"


def jvm_options() -> str:
    """JDK_JAVA_OPTIONS for the tests' JVMs: the flags, and the class-data archive where it was built."""
    archive = class_data_archive()
    if archive is None or not archive.is_file():
        return TEST_JVM_FLAGS
    # (a JVM whose class path differs from the archive's starts without it: no warning in its output)
    return f"{TEST_JVM_FLAGS} -XX:SharedArchiveFile={archive} -Xlog:cds*=off"


def build_archive() -> Path:
    """Build the archive unless it exists (one builder at a time; a half-written one is never used)."""
    archive = class_data_archive()
    if archive is None:
        raise SystemExit("jvm_flags: no pyspark in this environment")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.is_file():
            return archive
        partial = archive.with_suffix(".partial")
        env = {**os.environ, "JDK_JAVA_OPTIONS": f"{TEST_JVM_FLAGS} -XX:ArchiveClassesAtExit={partial}"}
        subprocess.run([sys.executable, "-c", _DUMP_SESSION], env=env, check=True, capture_output=True)
        partial.rename(archive)
    return archive


if __name__ == "__main__":
    print(f"jvm_flags: class-data archive {build_archive()}")
