"""A real Spark Connect server for the tests: a `local[2]` Spark driver in the calling process serving Connect
on a free port, and a Connect client session (`sc://localhost:PORT`) to it.

Used from separate driver processes only (tests.helpers.start_driver): a Connect server and the classic test
session must not share one pytest process.
"""

from __future__ import annotations

from typing import Any

from sparkrunner.launch.network import free_ports


def start_connect_session(master: str = "local[2]") -> tuple[Any, Any]:
    """(server's classic session, Connect client session); the client talks gRPC to the server."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    for tries_left in reversed(range(3)):
        port = free_ports(1)[0]  # free on every interface: the Connect service binds 0.0.0.0
        try:
            server = _server_session(master, port)
            break
        except Exception as exc:  # another process took the port between the probe and the bind
            if "BindException" not in str(exc) or not tries_left:
                raise
    server.sparkContext.setLogLevel("ERROR")
    return server, ConnectSession.builder.remote(f"sc://localhost:{port}").getOrCreate()


def _server_session(master: str, port: int) -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.connect.grpc.binding.port", str(port))
        .getOrCreate()
    )
