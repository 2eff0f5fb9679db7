"""What travels between sparkrunner's processes: encrypted connections (`transport`), the message kinds
(`messages`) and the pickled payload. The environment variables' names live in `sparkrunner.common.environment`,
the secret files on disk in `sparkrunner.system.secret_files`.

The transport's public names are re-exported here: ``from sparkrunner import channel; channel.connect(...)``.
"""

from sparkrunner.channel.transport import (
    RECORD_BYTES,
    ChannelError,
    ChannelServer,
    Connection,
    connect,
    connect_when_listening,
    new_secret,
)

__all__ = [
    "RECORD_BYTES",
    "ChannelError",
    "ChannelServer",
    "Connection",
    "connect",
    "connect_when_listening",
    "new_secret",
]
