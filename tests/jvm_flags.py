"""The flags every JVM the tests start runs with (tests/conftest.py sets them as JDK_JAVA_OPTIONS): Spark's JVMs in
the tests live seconds to minutes, where C2 compilation and G1's threads are most of their CPU time
(bench/jvm_flags.py measures it)."""

TEST_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
