"""The Python a preloaded Ray worker starts with (Ray's runtime_env `py_executable`):
`python client.py SOCKET SCRIPT ARGS...`, run by path (it imports the standard library and the
message framing of protocol.py, nothing heavier). Interpreter options (`-c`, `-m`) start the
plain interpreter.

It asks the preload server at SOCKET (server.py) to fork a worker that runs SCRIPT with this
process's arguments, environment, working directory and standard streams, then stands in for
it: Ray's raylet started this process and watches it, so it forwards the signals it gets, exits
as the worker exits, and if it is killed the worker dies too (it holds the only write end of
the worker's lifeline pipe). Without a server, or when the server says its imports would not
be this process's, it becomes the plain `python SCRIPT ARGS...`. A server of an EXEC_ONLY kind
(Ray's setup step) answers with the exec its fork worked out, which this process then makes.
"""

import os
import select
import signal
import socket
import sys

from mindrl.platforms.preload.protocol import CLIENT_SIGNALS as FORWARDED
from mindrl.platforms.preload.protocol import PLAIN_STARTS, framed, read_message


def _plain(socket_path: str, argv, why: str) -> None:
    """Become `python SCRIPT ARGS`, noting why beside the socket (plain_starts.log): a plain
    start is correct, only slower, so nothing else would tell."""
    try:
        with open(os.path.join(os.path.dirname(socket_path), PLAIN_STARTS), "a") as log:
            log.write(f"{os.path.basename(argv[0]) if argv else 'python'}: {why}\n")
    except OSError:
        pass
    os.execv(sys.executable, [sys.executable, *argv])


def _exit_as(status: dict) -> None:
    if status.get("signal"):
        sig = status["signal"]
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(int(status.get("exit", 1)))


def main(argv) -> None:
    socket_path, script_argv = argv[0], argv[1:]
    if not script_argv or script_argv[0].startswith("-"):
        _plain(socket_path, script_argv, "interpreter options (-c, -m, ...): only a script forks")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(socket_path)
    except OSError as exc:
        _plain(socket_path, script_argv, f"no server at {socket_path}: {exc}")
    lifeline_read, _lifeline_write = os.pipe()    # the write end stays open while we live
    # What this process ignores (a job started in the background ignores SIGINT) the worker
    # ignores too, as `python SCRIPT` started here would; the rest it handles as such a start.
    ignored = [int(sig) for sig in FORWARDED if signal.getsignal(sig) == signal.SIG_IGN]
    request = framed({"argv": script_argv, "env": dict(os.environ), "cwd": os.getcwd(),
                      "ignored_signals": ignored})
    try:
        socket.send_fds(conn, [request], [0, 1, 2, lifeline_read])
        reply = read_message(conn)
    except (OSError, EOFError) as exc:
        conn.close()
        _plain(socket_path, script_argv, f"the server did not answer: {exc}")
    os.close(lifeline_read)
    if "exec" in reply:         # an EXEC_ONLY server worked out the exec: this process makes it
        conn.close()
        file, args = reply["exec"]
        os.execvpe(file, args, reply["env"])
    if "pid" not in reply:
        conn.close()
        _plain(socket_path, script_argv, reply.get("why", "refused"))
    pid = reply["pid"]
    for sig in FORWARDED:
        if int(sig) not in ignored:
            signal.signal(sig, lambda signum, _frame: os.kill(pid, signum))
    try:
        worker = os.pidfd_open(pid)
    except OSError:          # already gone: its status is on the connection
        worker = None
    while True:
        ready, _, _ = select.select([conn] + ([worker] if worker is not None else []), [], [])
        if conn in ready:
            try:
                _exit_as(read_message(conn))
            except (OSError, EOFError):   # the server died: watch the worker alone
                if worker is None:
                    os._exit(1)
                select.select([worker], [], [])
                os._exit(1)
        if worker in ready:
            # The worker exited; the server sends its status as it reaps it.
            if select.select([conn], [], [], 5.0)[0]:
                try:
                    _exit_as(read_message(conn))
                except (OSError, EOFError):
                    pass
            os._exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
