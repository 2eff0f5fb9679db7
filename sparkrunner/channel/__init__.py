"""What travels between sparkrunner's processes: encrypted connections (`transport`), the message kinds
(`messages`), the environment variables (`environment`), secret handover and the pickled payload.

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
