"""Task side of the address exchange: every barrier task learns every other task's rank addresses, ports and GPUs, through the driver channel.

Spark's own `BarrierTaskContext.allGather` costs every caller at least one second: the executor checks for
the coordinator's answer once a second (`Thread.sleep(1000)` in `BarrierTaskContext.runBarrier`), so even
tasks that arrive together wait that long. The driver channel is already open and authenticated, so each
task sends its entries there (`Join`) and the driver answers every task at once (`Topology`)
as soon as the last one has joined: milliseconds instead of a second, on every launcher.
"""

from __future__ import annotations

from sparkrunner import channel
from sparkrunner.channel import messages as m
from sparkrunner.channel.messages import SparkTask, TaskEntries
from sparkrunner.errors import ChannelError


def exchange(
    driver: tuple[str, int], secret: bytes, task: int, tasks: int, spark: SparkTask, entries: TaskEntries
) -> m.Topology:
    """Task side: send this task's entries and Spark facts, and block until the driver answers with every
    task's, in order.

    Blocks as long as a peer task has not started (a barrier stage starts them together; a task that fails
    first fails the stage, and Spark then ends this one)."""
    conn = channel.connect(driver, secret)
    try:
        m.send(conn, m.Join(task, tasks, spark, entries))
        answer = m.receive(conn)
    finally:
        conn.close()
    match answer:
        case m.Topology():
            return answer
        case _:
            raise ChannelError(f"the driver answered the address exchange with {answer.kind!r}")
