"""The `sparkrunner` command: ``run`` a training script on N ranks, ``check`` the environment.

    sparkrunner run --np 4 [--master URL | --remote sc://...] [--launcher direct] train.py --lr 0.1
    sparkrunner run --np -2 -m pkg.train --epochs 1      # two processes here, no Spark
    sparkrunner check --master local[2]
    spark-submit --master yarn "$(sparkrunner entry-point)" run --np 4 train.py   # inside spark-submit

Exits with the run's status: 0, the script's own exit code, 1 for any other failure, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from sparkrunner.errors import RankFailedError, SparkRunnerError
from sparkrunner.timeouts import START_TIMEOUT_S

_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.command(args))
    except KeyboardInterrupt:
        print("sparkrunner: interrupted; every rank was stopped", file=sys.stderr)
        return _INTERRUPTED
    except RankFailedError as exc:
        print(f"sparkrunner: {exc}", file=sys.stderr)
        return exc.exit_code or 1
    except SparkRunnerError as exc:
        print(f"sparkrunner: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkrunner", description="Distributed training in Spark barrier stages."
    )
    commands = parser.add_subparsers(required=True, metavar="{run,check,entry-point}")

    run = commands.add_parser("run", help="run a training script (or module) on every rank")
    run.add_argument("--np", type=int, required=True, help="ranks: > 0 Spark tasks, < 0 processes here")
    _add_session_options(run)
    run.add_argument("--launcher", default="auto", help="auto (default), direct or mpirun")
    run.add_argument(
        "--start-timeout", type=float, default=START_TIMEOUT_S, help="seconds for every rank to start"
    )
    run.add_argument("--timeout", type=float, default=None, help="seconds for the whole run")
    run.add_argument("--code-dir", default=None, help="a folder of helper modules shipped with the script")
    run.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="set on every rank")
    run.add_argument("-m", dest="module", action="store_true", help="TARGET is a module (python -m style)")
    run.add_argument("target", help="the training script (or, with -m, the module)")
    run.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    run.set_defaults(command=_run)

    check = commands.add_parser("check", help="print what this environment can run")
    _add_session_options(check)
    check.set_defaults(command=_check)

    entry = commands.add_parser("entry-point", help="print the file spark-submit runs (see the README)")
    entry.set_defaults(command=_entry_point)
    return parser


def _add_session_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[*])")
    where.add_argument("--remote", default=None, help="Spark Connect URL (sc://host:15002)")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark configuration"
    )


def _run(args: argparse.Namespace) -> int:
    from sparkrunner.runner import Runner

    with _session_for(args, args.np > 0) as spark:
        runner = Runner(
            args.np,
            spark=spark,
            launcher=args.launcher,
            start_timeout=args.start_timeout,
            timeout=args.timeout,
            env=_pairs("--env", args.env),
            progress=False,
        )
        if args.module:
            runner.run_module(args.target, *args.script_args, code_dir=args.code_dir)
        else:
            runner.run_script(args.target, *args.script_args, code_dir=args.code_dir)
    return 0


def _check(args: argparse.Namespace) -> int:
    from sparkrunner.check import report

    wants_spark = bool(args.master or args.remote or _inside_spark_submit())
    with _session_for(args, wants_spark) as spark:
        for line in report(spark):
            print(line, flush=True)
    return 0


def _entry_point(_: argparse.Namespace) -> int:
    print(os.path.join(os.path.dirname(os.path.abspath(__file__)), "__main__.py"))
    return 0


@contextlib.contextmanager
def _session_for(args: argparse.Namespace, wanted: bool) -> Iterator[Any]:
    """The SparkSession a command uses (None when not `wanted`); one this command started is stopped at the
    end, so a local cluster shuts down in order instead of under the JVM's exit hooks."""
    spark = _session(args) if wanted else None
    try:
        yield spark
    finally:
        if spark is not None and not _inside_spark_submit():
            spark.stop()


def _session(args: argparse.Namespace) -> Any:
    """Join the session spark-submit (or `--remote`) points at, or start one on `--master`."""
    from pyspark.sql import SparkSession

    builder: Any = SparkSession.builder.appName("sparkrunner")
    if args.remote:
        builder = builder.remote(args.remote)
    elif args.master or not _inside_spark_submit():
        master = args.master or "local[*]"
        builder = builder.master(master)
        if master.startswith(
            "local"
        ):  # executors on this machine run this command's interpreter, not python3
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in _pairs("--conf", args.conf).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _inside_spark_submit() -> bool:
    """spark-submit starts a Python application with its JVM's gateway port in the environment."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _pairs(option: str, items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SparkRunnerError(f"{option} takes NAME=VALUE, not {item!r}")
        pairs[key] = value
    return pairs
