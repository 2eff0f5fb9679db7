"""mpirun's remote-start agent (`plm_rsh_agent`): `python -m sparkrunner.tasks.rsh_agent HOST COMMAND...`.

Called by mpirun the way it would call ssh. Instead of logging in, it asks the task agent of the barrier task
on HOST (see `task_agent.py`) to run COMMAND, waits for it, and exits with its exit code.
"""

from __future__ import annotations

import json
import os
import sys

from sparkrunner import channel
from sparkrunner.channel import messages as m
from sparkrunner.common.environment import Env
from sparkrunner.system import processes, secret_files
from sparkrunner.timeouts import AGENT_START_WAIT_S

_CONNECTION_LOST = 255  # what ssh returns when the connection breaks


def main(argv: list[str]) -> int:
    agents: dict[str, int] = json.loads(os.environ[Env.TASK_AGENTS])
    # mpirun passes "HOST COMMAND..." (options, if any, come before the host)
    position = next((i for i, arg in enumerate(argv) if arg in agents), None)
    if position is None:
        print(f"sparkrunner rsh_agent: no barrier task serves any host in {argv[:3]}", file=sys.stderr)
        return _CONNECTION_LOST
    host, command = argv[position], argv[position + 1 :]
    try:
        key = secret_files.take_agent_key(host)
        # tasks start their agents while mpirun starts: wait for the agent to listen
        conn = channel.connect_when_listening((host, agents[host]), key, AGENT_START_WAIT_S)
        m.send(conn, m.Exec(command))
        answer = m.receive(conn)
    except channel.ChannelError as exc:
        print(f"sparkrunner rsh_agent: the task agent on {host} failed: {exc}", file=sys.stderr)
        return _CONNECTION_LOST
    match answer:
        case m.Exit(code=code, tail=tail):
            if code != 0 and tail:
                print(tail, file=sys.stderr)
            return code
        case _:
            return _CONNECTION_LOST


if __name__ == "__main__":
    processes.die_with_parent()
    sys.exit(main(sys.argv[1:]))
