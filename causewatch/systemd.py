"""systemd's notify protocol (sd_notify) for the daemon and the agent, without libsystemd.

Type=notify services send READY=1, WATCHDOG=1 and STOPPING=1 to the socket in $NOTIFY_SOCKET.
"""

from __future__ import annotations

import os
import socket


def sd_notify(state: str, env=os.environ) -> bool:
    """Send `state` to systemd's NOTIFY_SOCKET (a unix datagram socket); False outside systemd."""
    path = env.get("NOTIFY_SOCKET")
    if not path:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        s.connect("\0" + path[1:] if path.startswith("@") else path)
        s.sendall(state.encode())
    return True
