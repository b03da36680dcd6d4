"""Preload servers (mindrl/platforms/preload/): a worker forked from one runs its script with
the requesting process's arguments, environment and streams, exits as the script does, dies
with the process that asked for it, and a Ray actor started through one is a working Ray
worker whose parent is the server."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mindrl.platforms import preload
from mindrl.platforms.preload import environment, kinds
from mindrl.platforms.preload import server as preload_server


def _wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path} after {timeout} s"
        time.sleep(0.05)


def _csv_server(kind: str, directory: Path):
    """`kind`'s server preloading only `csv` (the machinery, not the libraries), until the
    test ends."""
    proc = preload.start_server(kind, directory, dict(os.environ), modules=["csv"])
    _wait_for(directory / f"{kind}.sock")
    yield proc, directory / f"{kind}.sock"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def server(tmp_path):
    yield from _csv_server("tiny", tmp_path)


def _client(socket_path, script: Path, *args, env=None):
    return subprocess.Popen([sys.executable, str(preload.CLIENT), str(socket_path), str(script),
                             *args], stdout=subprocess.PIPE, text=True, cwd=str(script.parent),
                            env=env or dict(os.environ, WORKER_MARK="42"))


SCRIPT = """import json, os, sys, time
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[1:],
                  "mark": os.environ.get("WORKER_MARK"), "cwd": os.getcwd(),
                  "preloaded": "csv" in sys.modules}), flush=True)
if sys.argv[1] == "sleep":
    time.sleep(60)
sys.exit(int(sys.argv[2]))
"""


def test_a_forked_worker_runs_the_script_as_python_would_and_exits_with_its_code(server,
                                                                                  tmp_path):
    proc, sock = server
    script = tmp_path / "work" / "script.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    client = _client(sock, script, "exit", "7")
    import json
    seen = json.loads(client.stdout.readline())
    assert client.wait(timeout=30) == 7
    assert seen["ppid"] == proc.pid and seen["pid"] != client.pid      # forked by the server
    assert seen["argv"] == ["exit", "7"] and seen["mark"] == "42"
    assert seen["cwd"] == str(script.parent) and seen["preloaded"]


def test_the_worker_dies_with_its_client_and_gets_its_signals(server, tmp_path):
    proc, sock = server
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    import json
    killed = _client(sock, script, "sleep", "0")
    worker = json.loads(killed.stdout.readline())["pid"]
    killed.kill()                               # SIGKILL: nothing can be forwarded
    killed.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{worker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{worker}"), "the worker outlived its client"
    termed = _client(sock, script, "sleep", "0")
    json.loads(termed.stdout.readline())
    termed.send_signal(signal.SIGTERM)          # forwarded; the client dies as the worker did
    assert termed.wait(timeout=10) == -signal.SIGTERM


HANDLERS = """import json, signal
names = {signal.SIG_IGN: "ignored", signal.SIG_DFL: "default",
         signal.default_int_handler: "KeyboardInterrupt"}
print(json.dumps({"ppid": __import__("os").getppid(), **{
    s.name: names.get(signal.getsignal(s), "other")
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}}), flush=True)
"""


def test_the_worker_handles_signals_as_its_client_would_not_as_the_server_does(tmp_path):
    """The server started with SIGINT and SIGHUP ignored (as a suite run in the background
    starts it): a client started from a terminal gets a worker whose Ctrl-C raises
    KeyboardInterrupt, one started with SIGINT ignored a worker that ignores it, as a plain
    `python SCRIPT` would in each case; both forked from the server."""
    import json

    script = tmp_path / "handlers.py"
    script.write_text(HANDLERS)
    before = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGHUP)}
    try:
        server = preload.start_server("tiny", tmp_path, dict(os.environ), modules=["csv"])
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    try:
        _wait_for(tmp_path / "tiny.sock")
        seen = {}
        for name, wrapper in (("terminal", "signal.SIG_DFL"), ("background", "signal.SIG_IGN")):
            code = (f"import os, signal, sys; signal.signal(signal.SIGINT, {wrapper}); "
                    "os.execv(sys.argv[1], sys.argv[1:])")
            out = subprocess.run([sys.executable, "-c", code, sys.executable,
                                  str(preload.CLIENT), str(tmp_path / "tiny.sock"), str(script)],
                                 capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
            assert out.returncode == 0, out.stderr
            seen[name] = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert seen["terminal"] == {"ppid": server.pid, "SIGINT": "KeyboardInterrupt",
                                "SIGTERM": "default", "SIGHUP": "default"}
    assert seen["background"] == {"ppid": server.pid, "SIGINT": "ignored",
                                  "SIGTERM": "default", "SIGHUP": "default"}


def test_a_request_whose_import_time_environment_differs_starts_plainly(server, tmp_path):
    proc, sock = server
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    import json
    client = _client(sock, script, "exit", "0",
                     env=dict(os.environ, VLLM_LOGGING_LEVEL="DEBUG", WORKER_MARK="1"))
    seen = json.loads(client.stdout.readline())
    assert client.wait(timeout=30) == 0
    assert seen["pid"] == client.pid and not seen["preloaded"]   # exec'd, not forked
    assert seen["mark"] == "1"
    noted = (sock.parent / preload.PLAIN_STARTS).read_text()
    assert noted.startswith("script.py: environment differs in VLLM_LOGGING_LEVEL"), noted


HOOK = """import os, sys
if sys.argv[1:2] == ["exit"]:
    os.environ["WORKER_MARK"] = "hooked"
"""


def _with_a_path_directory(sock, tmp_path, name: str, module: str, text: str):
    """SCRIPT run through the server with tmp_path/name (holding `module`) put in front of
    PYTHONPATH: what the script saw, once it exited 0."""
    import json
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    directory = tmp_path / name
    directory.mkdir()
    (directory / module).write_text(text)
    path = os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))
    client = _client(sock, script, "exit", "0", env=dict(os.environ, PYTHONPATH=path))
    seen = json.loads(client.stdout.readline())
    assert client.wait(timeout=30) == 0
    return client, seen


def test_a_pythonpath_that_adds_a_hook_is_forked_and_runs_the_hook(server, tmp_path):
    # A test hook on PYTHONPATH (a sitecustomize, as tests/support/hang_in_update): the
    # worker still forks, and the hook runs before the script, as at an interpreter's start.
    proc, sock = server
    _, seen = _with_a_path_directory(sock, tmp_path, "hook", "sitecustomize.py", HOOK)
    assert seen["ppid"] == proc.pid and seen["preloaded"]        # forked
    assert seen["mark"] == "hooked"                              # the hook ran first
    assert not (sock.parent / preload.PLAIN_STARTS).exists()


def test_a_pythonpath_that_would_shadow_an_import_starts_plainly(server, tmp_path):
    proc, sock = server
    # the server imported the real csv
    client, seen = _with_a_path_directory(sock, tmp_path, "shadow", "csv.py", "")
    shadow = tmp_path / "shadow"
    assert seen["pid"] == client.pid and not seen["preloaded"]   # exec'd
    noted = (sock.parent / preload.PLAIN_STARTS).read_text()
    assert f"PYTHONPATH adds what this server imported from elsewhere: {shadow}/csv.py" \
        in noted, noted


def test_the_python_wrapper_forks_scripts_and_runs_options_plainly(server, tmp_path):
    proc, sock = server
    wrapper = preload.write_python_wrapper(sock.parent, "tiny")
    assert preload.python_wrapper(str(sock.parent)) == wrapper
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    import json
    run = subprocess.run([str(wrapper), str(script), "exit", "3"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 3
    assert json.loads(run.stdout)["ppid"] == proc.pid              # forked by the server
    plain = subprocess.run([str(wrapper), "-c", "import sys; print(sys.argv[1:])", "a"],
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and plain.stdout.strip() == "['a']"
    assert "-c: interpreter options (-c, -m, ...): only a script forks" in \
        (sock.parent / preload.PLAIN_STARTS).read_text()


SETUP = """import os, sys
os.environ["SET_UP"] = sys.argv[1]
os.execvp("sh", args=["sh", "-c", 'echo "$$ $SET_UP $WORKER_MARK $(pwd)"'])
"""


@pytest.fixture
def exec_only_server(tmp_path):
    yield from _csv_server("ray_setup", tmp_path)


def test_an_exec_only_server_s_fork_works_out_the_exec_that_the_client_makes(
        exec_only_server, tmp_path):
    # Ray's setup step (setup_worker.py) only reads its arguments and environment and execs
    # the worker: the fork runs it up to that exec, the client makes it, so the process Ray
    # started is the one that ends up running the worker.
    proc, sock = exec_only_server
    script = tmp_path / "work" / preload.EXEC_ONLY["ray_setup"]
    script.parent.mkdir()
    script.write_text(SETUP)
    wrapper = preload.write_python_wrapper(sock.parent, "ray_setup")
    assert preload.python_wrapper(str(sock.parent), "ray_setup") == wrapper
    client = subprocess.Popen([str(wrapper), str(script), "done"], stdout=subprocess.PIPE,
                              text=True, cwd=str(script.parent),
                              env=dict(os.environ, WORKER_MARK="42", VLLM_LOGGING_LEVEL="X"))
    out, _ = client.communicate(timeout=60)
    assert client.returncode == 0
    # the client's own pid ran the exec'd command, with the script's environment and the
    # request's directory (any environment: nothing the server imported reaches the exec)
    assert out.split() == [str(client.pid), "done", "42", str(script.parent)], out
    assert not (sock.parent / preload.PLAIN_STARTS).exists()
    # Ray's other processes (`python -u SCRIPT`) and other scripts start plainly: no note
    plain = subprocess.run([str(wrapper), "-u", "-c", "import sys; print(sys.argv[1:])", "a"],
                           capture_output=True, text=True, timeout=60)
    assert plain.stdout.strip() == "['a']"
    assert not (sock.parent / preload.PLAIN_STARTS).exists()
    # asked directly for another script, the server refuses it (noted) and it runs plainly
    other = tmp_path / "other.py"
    other.write_text(SCRIPT)
    client = _client(sock, other, "exit", "5")
    import json
    assert json.loads(client.stdout.readline())["pid"] == client.pid
    assert client.wait(timeout=30) == 5
    assert "other.py: only setup_worker.py forks from this server" in \
        (sock.parent / preload.PLAIN_STARTS).read_text()
    # a node's dashboard and monitors go to the ray_node server (none here: noted, plain)
    monitor = tmp_path / "ray" / "_private" / "log_monitor.py"
    monitor.parent.mkdir(parents=True)
    monitor.write_text("import os; print(os.environ.get('PYTHONUNBUFFERED'))")
    run = subprocess.run([str(wrapper), "-u", str(monitor)], capture_output=True, text=True,
                         timeout=60)
    assert run.stdout.strip() == "1"
    assert f"log_monitor.py: no server at {sock.parent / 'ray_node.sock'}" in \
        (sock.parent / preload.PLAIN_STARTS).read_text()


def test_a_fork_asked_for_unbuffered_streams_writes_through(server, tmp_path):
    proc, sock = server      # as `python -u` (Ray's monitors): each print reaches the pipe
    script = tmp_path / "script.py"
    script.write_text("import os, time\nprint(os.getppid())\ntime.sleep(60)\n")
    client = _client(sock, script, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        import select
        assert select.select([client.stdout], [], [], 30)[0], "the print stayed in a buffer"
        assert client.stdout.readline().strip() == str(proc.pid)     # forked, not plain
    finally:
        client.kill()
        client.wait()


def test_added_path_is_what_a_request_puts_in_front_of_the_server_s(tmp_path):
    assert environment.added_path(None, "/h") == ["/h"]
    assert environment.added_path("/s", "/h:/g:/s") == ["/h", "/g"]
    assert environment.added_path("/s", "/s") == []
    assert environment.added_path("/s", "/h") is None               # the server's own dropped
    assert environment.added_path("/s:/t", "/h:/t:/s") is None      # reordered
    (tmp_path / "torch").mkdir()
    (tmp_path / "sitecustomize.py").write_text("")
    (tmp_path / "usercustomize.py").write_text("")
    assert environment.shadowed([str(tmp_path), "/nonexistent"], {"torch", "csv"}) == \
        [f"{tmp_path}/torch", f"{tmp_path}/usercustomize.py"]


def test_every_warm_up_names_a_function_that_exists():
    import importlib

    for kind, calls in kinds.WARM_UPS.items():
        assert kind in kinds.PRELOADS
        for call in calls:
            module, function = call.split(":")
            assert callable(getattr(importlib.import_module(module), function)), call


def test_tqdm_s_monitor_thread_is_stopped_before_the_server_serves():
    # A compile's progress bar starts tqdm's monitor thread, which never ends by itself: a
    # server left with it would start every worker plainly ("the server runs 2 threads").
    from tqdm import tqdm

    for _ in tqdm(range(2), disable=False, file=open(os.devnull, "w")):
        pass
    monitor = tqdm.monitor
    assert monitor is not None and monitor.is_alive()
    preload_server._until_one_thread(0.0)
    assert tqdm.monitor is None and not monitor.is_alive()


def test_differences_count_what_the_imports_saw():
    before = {"VLLM_X": "1"}
    after = {"VLLM_X": "1", "TORCHINDUCTOR_Y": "/c"}       # set by an import
    assert environment._differences(before, after, {"VLLM_X": "1"}) == []
    assert environment._differences(before, after, {"VLLM_X": "1", "TORCHINDUCTOR_Y": "/c"}) == []
    assert environment._differences(before, after, {"VLLM_X": "2"}) == ["VLLM_X"]
    assert environment._differences(before, after, {}) == ["VLLM_X"]
    assert environment._differences(before, after, {"VLLM_X": "1", "TORCHINDUCTOR_Y": "/d"}) == \
        ["TORCHINDUCTOR_Y"]
    assert environment._import_env({"VLLM_A": "1", "HOME": "/r", "TORCHINDUCTOR_CACHE_DIR": "x"}) \
        == {"VLLM_A": "1"}


def test_the_server_never_imports_ray_and_forgets_who_tried(tmp_path):
    # As vLLM's executor does: Ray optional. The server must not load it (Ray's core reads
    # the worker's job id from the environment once, at load), and forgets the module that
    # tried, so that a worker imports it afresh, with Ray.
    (tmp_path / "optional_ray.py").write_text(
        "try:\n    import ray\nexcept ImportError:\n    ray = None\n")
    script = ("import sys; from mindrl.platforms.preload import server\n"
              "server._import_without_ray(['optional_ray'])\n"
              "print(any(m == 'ray' or m.startswith('ray.') for m in sys.modules),"
              " 'optional_ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert out.stdout.split()[-2:] == ["False", "False"], out.stderr[-2000:]


@pytest.mark.slow
def test_a_ray_actor_through_the_server_is_a_forked_ray_worker(tmp_path, monkeypatch):
    import ray

    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    proc = preload.start_server("tiny", tmp_path, env, modules=["csv"])
    setup = preload.start_server("ray_setup", tmp_path, env)      # Ray's setup step, forked
    preload.write_python_wrapper(tmp_path, "ray_setup")
    _wait_for(tmp_path / "tiny.sock")
    _wait_for(tmp_path / "ray_setup.sock")
    monkeypatch.setenv(preload.PRELOAD_DIR_ENV, str(tmp_path))
    try:
        executable = sys.executable
        with preload.ray_node_python():
            assert sys.executable == str(tmp_path / preload.WRAPPERS["ray_setup"])
            ray.init(address="local", num_cpus=1, include_dashboard=False,
                     object_store_memory=128 * 2**20, log_to_driver=False)
        assert sys.executable == executable

        @ray.remote
        class Probe:
            def where(self):
                return os.getpid(), os.getppid(), os.environ.get("PROBE")

        runtime_env = preload.runtime_env("tiny", {"PROBE": "yes"})
        assert runtime_env["py_executable"].endswith(f"{tmp_path / 'tiny.sock'}")
        actor = Probe.options(runtime_env=runtime_env).remote()
        pid, ppid, probe = ray.get(actor.where.remote(), timeout=120)
        assert ppid == proc.pid and probe == "yes"
        # Ray's raylet starts every worker's setup step with the wrapper, and none was refused
        node = ray._private.worker._global_node
        raylet = node.all_processes["raylet"][0].process.pid
        assert str(tmp_path / preload.WRAPPERS["ray_setup"]) in \
            Path(f"/proc/{raylet}/cmdline").read_text()
        notes = tmp_path / preload.PLAIN_STARTS     # (no ray_node server here: the node's
        assert not [line for line in (notes.read_text() if notes.exists() else "").splitlines()
                    if line.startswith("setup_worker.py")]   # dashboard starts plainly)
        ray.kill(actor)
        deadline = time.monotonic() + 20
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{pid}")
    finally:
        ray.shutdown()
        for server in (proc, setup):
            server.terminate()
            server.wait(timeout=10)
