"""What a preload client and its server agree on: where a kind's socket and the plain-start
notes lie in the servers' directory, the messages they exchange (length-prefixed JSON), the
request with the client's four descriptors, and the signals the client forwards. Standard
library only: the client imports it at every start."""

import json
import signal
import socket
import struct
from pathlib import Path

PLAIN_STARTS = "plain_starts.log"     # beside the sockets: each start that fell back, and why
# The signals a client forwards to its worker, and whose handling the worker takes from the
# client rather than from the server (which may have been started with any of them ignored,
# or with handlers of its own).
CLIENT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                  signal.SIGUSR2)


def socket_file(directory, kind: str) -> Path:
    return Path(directory) / f"{kind}.sock"


def framed(message: dict) -> bytes:
    """One message: its JSON's length (4 bytes, network order), then the JSON."""
    body = json.dumps(message).encode()
    return struct.pack("!I", len(body)) + body


def send_message(conn: socket.socket, message: dict) -> None:
    conn.sendall(framed(message))


def _read_exactly(conn: socket.socket, size: int, start: bytes = b"") -> bytes:
    data = start
    while len(data) < size:
        part = conn.recv(size - len(data))
        if not part:
            raise EOFError("the other side closed the connection")
        data += part
    return data


def read_message(conn: socket.socket) -> dict:
    (size,) = struct.unpack("!I", _read_exactly(conn, 4))
    return json.loads(_read_exactly(conn, size))


def receive_request(conn: socket.socket):
    """The client's request: its JSON and the four descriptors (stdin, stdout, stderr, lifeline)."""
    conn.settimeout(10.0)
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 4)
    head = _read_exactly(conn, 4, data[:4])
    (size,) = struct.unpack("!I", head)
    body = _read_exactly(conn, size, data[4:])
    conn.settimeout(None)
    return json.loads(body), fds
