"""Rank output that cannot hurt the driver: progress updates, over-long lines, bounded error tails."""

from __future__ import annotations

import pytest

from sparkrunner import Runner
from sparkrunner.channel.lines import MAX_LINE_CHARS, LineSplitter
from sparkrunner.driver.attempt.output import TAIL_LINES
from sparkrunner.errors import RankFailedError
from sparkrunner.stack_report import ERROR_TAIL_LINES
from tests.driver.functions import prints_a_huge_line_and_dies, prints_a_storm, prints_then_raises
from tests.matrix import LAUNCHERS


def feed_all(splitter: LineSplitter, data: bytes, chunk: int) -> tuple[list[str], list[str]]:
    lines, updates = [], []
    for i in range(0, len(data), chunk):
        done, update = splitter.feed(data[i : i + chunk])
        lines += done
        updates += [update] if update is not None else []
    last = splitter.flush()
    return lines + ([last] if last is not None else []), updates


def test_carriage_return_updates_are_updates_and_the_final_state_is_a_line() -> None:
    data = b"start\n" + b"".join(b"\rstep %d" % i for i in range(1000)) + b"\rdone 1000/1000\nafter\n"
    lines, updates = feed_all(LineSplitter(), data, chunk=7)
    assert lines == ["start", "done 1000/1000", "after"]
    assert updates and all(u.startswith("step ") for u in updates)


def test_crlf_split_across_reads_and_utf8_split_across_reads() -> None:
    lines, updates = feed_all(LineSplitter(), "a\r\nb €uro\r\n".encode(), chunk=1)
    assert lines == ["a", "b €uro"] and updates == []


def test_a_line_longer_than_the_bound_is_cut_with_a_marker() -> None:
    length = 5 * MAX_LINE_CHARS + 123
    lines, _ = feed_all(LineSplitter(), b"x" * length + b"\nnext\n", chunk=65536)
    assert (
        lines[0]
        == "x" * MAX_LINE_CHARS
        + f" [... {length - MAX_LINE_CHARS} more characters of this line cut by sparkrunner]"
    )
    assert lines[1] == "next"


def test_an_unterminated_stream_of_updates_keeps_no_more_than_one_line() -> None:
    splitter = LineSplitter(max_line=100)
    for _ in range(10_000):
        splitter.feed(b"y" * 1000)
    last = splitter.flush()
    assert last is not None and last.startswith("y" * 100) and "9999900 more characters" in last


@pytest.mark.slow
def test_an_output_storm_reaches_the_driver_rate_limited_and_cut(
    np2: int, capfd: pytest.CaptureFixture[str]
) -> None:
    runner = Runner(np=np2, launcher="direct", tracking=False)
    assert runner.run(prints_a_storm, lines=20_000, updates=20_000, long_line=100_000) == "ok"
    out = capfd.readouterr().out
    for rank in (0, 1):
        assert out.count(f"[rank {rank}] line ") == 20_000
        assert f"[rank {rank}] line 19999\n" in out
        assert f"[rank {rank}] step 19999/20000\n" in out  # the final state of the bar is a line
        assert out.count(f"[rank {rank}] step ") <= 5  # not 20,000 updates: a log shows one now and then
        assert f"{100_000 - MAX_LINE_CHARS} more characters of this line cut by sparkrunner" in out


def test_an_error_message_holds_a_bounded_tail_and_the_rest_is_an_artifact() -> None:
    with pytest.raises(RankFailedError) as info:
        Runner(np=-2, launcher="direct", tracking=False).run(prints_then_raises, 5000)
    text = str(info.value)
    assert "line 4999" in text and f"line {4999 - ERROR_TAIL_LINES}\n" not in text
    assert len(info.value.output_tail) == ERROR_TAIL_LINES
    rank = info.value.rank
    kept = info.value.artifacts[f"output_rank{rank}.txt"].splitlines()
    assert len(kept) == TAIL_LINES and kept[-1] == "line 4999"


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_that_printed_a_huge_line_and_died_gives_a_short_message(np2: int, launcher: str) -> None:
    with pytest.raises(RankFailedError) as info:
        Runner(np=np2, launcher=launcher, tracking=False).run(prints_a_huge_line_and_dies)
    assert info.value.rank == 1
    assert "more characters of this line cut by sparkrunner" in str(info.value)
    assert len(str(info.value)) < 200_000  # the probe saw 5.2 million characters under mpirun
