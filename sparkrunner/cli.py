"""The `sparkrunner` command: ``run`` a training script on N ranks, ``check`` the environment.

    sparkrunner run --np 4 [--master URL | --remote sc://...] [--launcher direct] train.py --lr 0.1
    sparkrunner run --np -2 -m pkg.train --epochs 1      # two processes here, no Spark
    sparkrunner run --np 2:4 --max-failures 3 --checkpoint-dir /shared/ckpt train.py   # elastic, retried
    sparkrunner check --master local[2]
    spark-submit --master yarn "$(sparkrunner entry-point)" run --np 4 train.py   # inside spark-submit

``run`` takes every `Runner` option a shell can give as a flag, made from its declaration in
`sparkrunner.options` (`shell_flags`), as docs/options.md is. Exits with the run's status: 0, the script's own
exit code, 1 for any other failure, 2 for a bad flag (before anything starts), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sparkrunner.errors import AttemptsFailedError, InvalidArgumentError, RankFailedError, SparkRunnerError
from sparkrunner.options import RunOptions, ShellFlag, pair_from_text, parse_np, shell_flags

INTERRUPTED = 130
"""The exit status on Ctrl-C (128 + SIGINT, as a shell reports it)."""


def main(argv: Sequence[str] | None = None) -> int:
    args = command_parser().parse_args(argv)
    return exit_status(lambda: int(args.command(args)))


def exit_status(command: Callable[[], int]) -> int:
    """Run `command` and map how it ended to the process's exit status: its own, the failed script's exit code
    (that of the last attempt's when every attempt failed), 1 for any other failure, `INTERRUPTED` on Ctrl-C."""
    try:
        return command()
    except KeyboardInterrupt:
        print("sparkrunner: interrupted; every rank was stopped", file=sys.stderr)
        return INTERRUPTED
    except SparkRunnerError as exc:
        print(f"sparkrunner: {exc}", file=sys.stderr)
        last = exc.errors[-1] if isinstance(exc, AttemptsFailedError) and exc.errors else exc
        return (last.exit_code if isinstance(last, RankFailedError) else None) or 1


def command_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkrunner", description="Distributed training in Spark barrier stages."
    )
    commands = parser.add_subparsers(required=True, metavar="{run,check,entry-point}")

    run = commands.add_parser(
        "run",
        help="run a training script (or module) on every rank",
        description="Run a training script (or module) on every rank. Each option of sparkrunner.Runner that a "
        "shell can give is a flag (docs/options.md).",
    )
    _add_session_options(run)
    for flag in shell_flags():
        _add_option_flag(run, flag)
    run.add_argument("--code-dir", default=None, help="a folder of helper modules shipped with the script")
    run.add_argument("-m", dest="module", action="store_true", help="TARGET is a module (python -m style)")
    run.add_argument("target", help="the training script (or, with -m, the module)")
    run.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    run.set_defaults(command=_run, usage=run)

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
        "--conf",
        action="append",
        default=[],
        type=_argument_type(pair_from_text),
        metavar="KEY=VALUE",
        help="Spark configuration",
    )


def _add_option_flag(parser: argparse.ArgumentParser, flag: ShellFlag) -> None:
    """One `Runner` option as a flag: ``--name VALUE`` (``--name A --name B`` for a repeated one), or the pair
    ``--name`` / ``--no-name`` for an on/off one."""
    help_text = flag.help.replace("%", "%%")
    if flag.parse is None:
        names = (flag.flag, "--no-" + flag.flag.removeprefix("--"))
        parser.add_argument(*names, dest=flag.option, action=_OnOff, default=flag.default, help=help_text)
        return
    parser.add_argument(
        flag.flag,
        dest=flag.option,
        action="append" if flag.repeated else "store",
        type=_argument_type(flag.parse),
        choices=flag.choices or None,
        default=[] if flag.repeated else flag.default,
        required=flag.required,
        metavar=flag.metavar,
        help=help_text,
    )


class _OnOff(argparse.Action):
    """``--name`` sets the option True, ``--no-name`` False; neither leaves its declared default."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, not (option_string or "").startswith("--no-"))


def _argument_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse` as argparse's `type`: its error becomes argparse's usage error for the flag."""

    def parse_argument(text: str) -> Any:
        try:
            return parse(text)
        except InvalidArgumentError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse_argument.__name__ = parse.__name__  # argparse names it in "invalid <name> value"
    return parse_argument


def runner_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `Runner` keyword arguments the flags give, checked as `Runner` checks them (`RunOptions`), before a
    Spark session or any rank starts."""
    options = {flag.option: getattr(args, flag.option) for flag in shell_flags()}
    options["env"] = dict(options["env"])
    np, np_range = parse_np(options["np"])
    RunOptions(**{**options, "np": np, "np_range": np_range})
    return options


def _run(args: argparse.Namespace) -> int:
    from sparkrunner.runner import Runner

    try:
        options = runner_options(args)
    except InvalidArgumentError as exc:
        args.usage.error(str(exc))  # exits 2, as for a malformed flag
    with _session_for(args, parse_np(options["np"])[0] > 0) as spark:
        runner = Runner(spark=spark, **options)
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
    for key, value in args.conf:
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _inside_spark_submit() -> bool:
    """spark-submit starts a Python application with its JVM's gateway port in the environment."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
