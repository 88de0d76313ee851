"""Whether this host can listen on an address and port now."""

from __future__ import annotations

import errno
import socket


def port_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on now (in use, an address not of this host), or None when it can."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
        try:
            sock.bind((host, port))
        except (OSError, ValueError) as err:  # ValueError: a host name IDNA cannot encode
            if getattr(err, "errno", None) == errno.EADDRINUSE:
                return f"{host}:{port} is in use; stop what listens there or set port"
            why = getattr(err, "strerror", None) or str(err)
            return f"cannot listen on {host}:{port}: {why}; check host"
    return None
