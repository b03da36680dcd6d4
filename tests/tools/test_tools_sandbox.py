"""The code sandbox against hostile snippets: one or more per layer, each asserting what did
NOT happen (no connection made, no file written, no variable seen, no process made, the test
process alive, the process group gone, the scratch folder removed).

Every snippet runs inside the sandbox (never outside it). Each runs once with every layer this
machine has, and again with only the layer under test applied (the others marked missing in a
simulated probe result, best_effort), so each layer is shown to stop it on its own. Where this
machine lacks a layer the test asserts the refusal/report and skips the hostile run: the tests
follow the probe's report, never an assumption about the machine. Kills aimed at the test
process use signal 0 (a permission check that sends nothing), so a broken layer fails the test
instead of killing it; the real SIGKILL goes through the runner (test_tools_runner.py).
"""

import os
import socket
import textwrap

import pytest

from mindrl.tools import sandbox
from mindrl.tools.limits import BEST_EFFORT, STRICT, ToolLimits
from mindrl.tools.sandbox_child import CHILD_LAYERS

LAYERS = sandbox.probe()
FULL_MODE = STRICT if not sandbox.missing_layers(LAYERS) else BEST_EFFORT


def run(code, needs=(), only=None, tmp=None, **limits):
    """Run a snippet in the sandbox. needs: layers the assertion relies on (skip where this
    machine lacks one); only: apply just this child layer (a simulated probe: the rest
    missing)."""
    lacking = [layer for layer in ((only,) if only else ()) + tuple(needs) if LAYERS.get(layer)]
    if lacking:
        pytest.skip(f"sandbox layer(s) unavailable here: "
                    + "; ".join(f"{l}: {LAYERS[l]}" for l in lacking))
    layers = dict(LAYERS)
    mode = FULL_MODE
    if only:
        layers.update({l: "off for this test" for l in CHILD_LAYERS if l != only})
        mode = BEST_EFFORT
    limits.setdefault("timeout_s", 5.0)
    result = sandbox.run_python(textwrap.dedent(code), ToolLimits(sandbox=mode, **limits),
                                layers, scratch_root=str(tmp) if tmp else None)
    for layer in ((only,) if only else ()) + tuple(needs):
        if layer in CHILD_LAYERS:
            assert layer in result.held, (layer, result)
    return result


def test_the_probe_reports_every_layer_and_a_call_applies_what_holds():
    lines = sandbox.describe(LAYERS)
    print("\n".join(lines))   # shown with -s: which layers hold on this machine
    assert [line.split(":")[0] for line in lines] == [f"sandbox layer {l}" for l in sandbox.LAYERS]
    result = run("print('hello')")
    assert result.status == "ok" and result.output == "hello\n"
    assert set(result.held) == {l for l in CHILD_LAYERS if not LAYERS[l]}
    assert set(result.missing) == {l for l in CHILD_LAYERS if LAYERS[l]}


# -- strict and best_effort on a machine that lacks a layer (a simulated probe result)


def test_strict_refuses_naming_the_missing_layer_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran.txt"
    layers = dict(LAYERS, landlock="the kernel has no Landlock (simulated)")
    result = sandbox.run_python(f"open({str(marker)!r}, 'w').write('x')",
                                ToolLimits(sandbox=STRICT), layers)
    assert result.status == "refused" and "landlock" in result.output
    assert "simulated" in result.output and not marker.exists()
    with pytest.raises(sandbox.SandboxUnavailable, match="landlock.*best_effort"):
        sandbox.check_mode(STRICT, layers)


def test_best_effort_runs_without_the_missing_layer_and_says_so():
    if any(LAYERS[l] for l in sandbox.PARENT_LAYERS):
        pytest.skip("this machine cannot run the sandbox at all")
    layers = dict(LAYERS, seccomp="libseccomp.so.2 not found (simulated)")
    result = sandbox.run_python("print('ran')", ToolLimits(sandbox=BEST_EFFORT), layers)
    assert result.status == "ok" and result.output == "ran\n"
    assert "seccomp" not in result.held and "seccomp" in result.missing
    assert "seccomp" in result.note and result.note.startswith("sandbox best_effort")


def test_the_probe_reports_a_missing_libseccomp_instead_of_crashing(monkeypatch):
    config = dict(sandbox._static_config(), libs=dict(sandbox._static_config()["libs"],
                                                      seccomp=None))
    monkeypatch.setattr(sandbox, "_static_config", lambda: config)
    layers = sandbox.probe.__wrapped__()
    assert "libseccomp" in layers["seccomp"] and "apt-get install libseccomp2" in layers["seccomp"]
    others = [l for l in CHILD_LAYERS if l != "seccomp"]
    assert {l: layers[l] for l in others} == {l: LAYERS[l] for l in others}


# -- no network


@pytest.fixture
def listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


CONNECT = """
    try:
        import socket
        s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
        print("CONNECTED")
    except BaseException as e:
        print("no connection:", type(e).__name__, e)
"""


@pytest.mark.parametrize("only", [None, "network_namespace", "seccomp", "audit_hook"])
def test_no_connection_reaches_a_listener_of_the_test_process(listener, only):
    result = run(CONNECT.format(port=listener.getsockname()[1]), only=only)
    assert "CONNECTED" not in result.output and "no connection" in result.output
    with pytest.raises(BlockingIOError):
        listener.accept()   # nothing ever connected


# -- no child processes


FORK = """
    import os
    try:
        pid = os.fork()
    except BaseException as e:
        print("no fork:", type(e).__name__, e)
    else:
        if pid == 0:
            print("CHILD RAN", flush=True)
            os._exit(0)
        print("FORKED", flush=True)
"""
EXEC = """
    import os
    try:
        os.execv("/bin/sh", ["sh", "-c", "echo EXECUTED"])
    except BaseException as e:
        print("no exec:", type(e).__name__, e)
"""
SYSTEM = """
    import os
    try:
        print("status", os.system("echo SYSTEM RAN; touch {marker}"))
    except BaseException as e:
        print("no system:", type(e).__name__, e)
"""
SUBPROCESS = """
    try:
        import subprocess
        print(subprocess.run(["/bin/echo", "SUBPROCESS RAN"], capture_output=True).stdout)
    except BaseException as e:
        print("no subprocess:", type(e).__name__, e)
"""
THREAD = """
    import threading
    try:
        t = threading.Thread(target=lambda: print("THREAD RAN", flush=True)); t.start(); t.join()
    except BaseException as e:
        print("no thread:", type(e).__name__, e)
"""


@pytest.mark.parametrize("only", [None, "seccomp", "audit_hook"])
def test_fork_exec_system_and_subprocess_make_no_process(tmp_path, only):
    marker = tmp_path / "system-ran"
    for snippet, ran in ((FORK, ("CHILD RAN", "FORKED")), (EXEC, ("EXECUTED",)),
                         (SYSTEM.format(marker=marker), ("SYSTEM RAN",)),
                         (SUBPROCESS, ("SUBPROCESS RAN",))):
        result = run(snippet, only=only)
        assert not any(word in result.output for word in ran), result.output
        assert "no " in result.output or "status" in result.output, result.output
    assert not marker.exists()


def test_threads_are_not_started_either():
    result = run(THREAD, needs=("seccomp",))
    assert "THREAD RAN" not in result.output and "no thread" in result.output


def _unloaded_library():
    import _ssl   # an extension module the sandbox child never imports

    return _ssl.__file__


def test_ctypes_cannot_be_imported():
    result = run("""
        try:
            import ctypes
            print("LOADED", ctypes.CDLL("libc.so.6"))
        except BaseException as e:
            print("no ctypes:", type(e).__name__, e)
    """, only="audit_hook")
    assert "LOADED" not in result.output and "no ctypes: PermissionError" in result.output


def test_without_the_audit_hook_ctypes_still_loads_no_new_code_and_makes_no_process():
    """seccomp alone: libc (already mapped) opens, but a library not yet loaded cannot be
    mapped executable, and libc's fork() through ctypes fails in the kernel."""
    result = run(f"""
        import ctypes
        try:
            ctypes.CDLL({_unloaded_library()!r})
            print("LOADED NEW CODE")
        except OSError as e:
            print("no new library:", e)
        pid = ctypes.CDLL("libc.so.6").fork()
        if pid == 0:
            print("CHILD RAN", flush=True)
            ctypes.CDLL("libc.so.6")._exit(0)
        print("fork returned", pid)
    """, only="seccomp")
    assert "LOADED NEW CODE" not in result.output and "no new library" in result.output
    assert "CHILD RAN" not in result.output and "fork returned -1" in result.output


# -- no writes outside the scratch folder


WRITE = """
    import os
    for path in {paths!r}:
        try:
            with open(path, "w") as f:
                f.write("escaped")
            print("WROTE", path)
        except BaseException as e:
            print("no write:", type(e).__name__)
        try:
            os.close(os.open(path + ".2", os.O_CREAT | os.O_WRONLY))
            print("CREATED", path)
        except BaseException as e:
            print("no create:", type(e).__name__)
    with open("inside.txt", "w") as f:
        f.write("fine")
    print(open("inside.txt").read())
"""


@pytest.mark.parametrize("only", [None, "landlock", "audit_hook"])
def test_no_file_is_written_outside_the_scratch_folder(tmp_path, only):
    targets = [str(tmp_path / "escaped.txt"), f"/dev/shm/mindrl-sandbox-test-{os.getpid()}",
               str(tmp_path / "sub" / ".." / "escaped-too.txt")]
    result = run(WRITE.format(paths=targets), only=only)
    assert "WROTE" not in result.output and "CREATED" not in result.output, result.output
    assert result.output.rstrip().endswith("fine")   # its own folder is writable
    for path in targets:
        assert not os.path.exists(path) and not os.path.exists(path + ".2")


def test_the_scratch_folder_is_removed_after_the_call(tmp_path):
    root = tmp_path / "scratch-root"
    root.mkdir()
    result = run("""
        import os
        os.makedirs("a/b", exist_ok=True)
        open("a/b/f.txt", "w").write("x" * 1000)
        print(os.getcwd())
    """, tmp=root)
    scratch = result.output.strip()
    assert result.status == "ok" and scratch.startswith(str(root))
    assert not os.path.exists(scratch) and list(root.iterdir()) == []


# -- an empty environment, and no reading the test process's


@pytest.mark.parametrize("only", [None, "landlock", "audit_hook"])
def test_no_variable_of_the_test_process_is_seen(monkeypatch, only):
    secret = f"s3cr3t-{os.getpid()}-value"
    monkeypatch.setenv("MINDRL_SANDBOX_TEST_SECRET", secret)
    result = run("""
        import os
        print(dict(os.environ))
        for path in (f"/proc/{os.getppid()}/environ", "/proc/1/environ",
                     f"/proc/{os.getppid()}/cmdline"):
            try:
                print(open(path, "rb").read())
            except BaseException as e:
                print("no read:", type(e).__name__)
    """, only=only)
    assert secret not in result.output and "MINDRL_SANDBOX_TEST_SECRET" not in result.output
    assert result.output.startswith("{}\n") and result.output.count("no read") == 3


def test_stdin_is_closed():
    result = run("""
        import os, sys
        print("stdin", sys.stdin)
        try:
            os.read(0, 1)
            print("READ STDIN")
        except OSError as e:
            print("no stdin:", e.strerror)
        input()
    """)
    assert result.status == "error" and "stdin None" in result.output
    assert "READ STDIN" not in result.output and "no stdin: Bad file descriptor" in result.output
    assert "lost sys.stdin" in result.output


def test_capabilities_are_dropped():
    result = run("""
        print([l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1])
    """, only="capabilities")
    assert result.output.strip().strip("0") == "" and result.status == "ok"


# -- the test process stays alive


KILL_PARENT = """
    import os
    for target in (os.getppid(), -1, 1):
        try:
            os.kill(target, 0)          # signal 0: the permission check alone
            print("MAY SIGNAL", target)
        except BaseException as e:
            print("no signal:", type(e).__name__)
"""


@pytest.mark.parametrize("only", [None, "seccomp", "audit_hook"])
def test_the_code_may_not_signal_its_parent_or_anyone_else(only):
    result = run(KILL_PARENT, only=only)
    assert "MAY SIGNAL" not in result.output and result.output.count("no signal") == 3
    os.kill(os.getpid(), 0)   # and this process is there to say so


def test_it_may_signal_itself():
    result = run("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert result.status == "error" and result.exit_code == -15


# -- limits and the deadline


def test_an_infinite_loop_is_killed_at_the_deadline_with_its_process_group():
    result = run("""
        import os
        print(os.getpid(), flush=True)
        os.close(1); os.close(2)   # no EOF to wait for: the deadline must end it
        while True:
            pass
    """, timeout_s=1.0)
    assert result.status == "timeout" and 1.0 <= result.seconds < 4.0
    assert int(result.output.split()[0]) == result.pgid
    with pytest.raises(ProcessLookupError):
        os.killpg(result.pgid, 0)   # nothing of its group is left


def test_the_cpu_limit_stops_a_busy_loop_before_a_long_deadline():
    result = run("while True: pass", only="rlimits", timeout_s=10.0, cpu_s=1)
    assert result.status == "error" and result.seconds < 6.0
    assert result.exit_code in (-24, -9) and "killed by SIG" in result.output


def test_a_memory_bomb_is_stopped_by_the_limit():
    result = run("""
        blocks = []
        try:
            blocks.append(bytearray(8 * 2**30))
            print("ALLOCATED 8 GiB")
        except MemoryError:
            print("no memory")
        x = [0] * (2**31)
    """, only="rlimits", memory_mb=256)
    assert "ALLOCATED" not in result.output and "no memory" in result.output
    assert result.status == "error" and "MemoryError" in result.output


def test_file_size_and_open_file_limits():
    result = run("""
        try:
            open("big.bin", "wb").write(b"x" * (3 * 2**20))
            print("WROTE 3 MiB")
        except OSError as e:
            print("file size:", e.strerror)
        files = []
        try:
            for i in range(100):
                files.append(open(f"f{i}", "w"))
            print("OPENED 100")
        except OSError as e:
            print("open files:", e.strerror, len(files) < 32)
    """, only="rlimits", file_size_mb=1, open_files=32)
    assert "WROTE" not in result.output and "file size: File too large" in result.output
    assert "OPENED" not in result.output and "open files: Too many open files True" in result.output


def test_huge_output_is_cut_with_a_marker():
    result = run("""
        import sys
        for _ in range(2000):
            sys.stdout.write("y" * 10000)
    """, max_output_bytes=1000)
    assert result.status == "ok" and result.output_bytes == 2000 * 10000
    kept, marker = result.output.split("\n[output cut: ")
    assert kept == "y" * 1000 and marker == f"{2000 * 10000 - 1000} more bytes]"


def test_the_child_dies_with_the_process_that_started_it():
    """A sacrificial parent (a worker's stand-in) starts a sleeping call and is SIGKILLed:
    the sandbox child goes with it, leaving nothing running."""
    import signal
    import subprocess
    import sys
    import time

    if LAYERS.get("process_group"):
        pytest.skip(f"no sandbox here: {LAYERS['process_group']}")
    parent = subprocess.Popen([sys.executable, "-c", (
        "from mindrl.tools import sandbox, ToolLimits\n"
        "sandbox.run_python('import time\\nwhile True: time.sleep(1)',"
        " ToolLimits(timeout_s=60, sandbox='best_effort'))\n")])
    try:
        child = None
        deadline = time.monotonic() + 30
        while child is None and time.monotonic() < deadline:
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    cmdline = open(f"/proc/{entry}/cmdline", "rb").read()
                    ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                if ppid == parent.pid and b"sandbox_child.py" in cmdline:
                    child = int(entry)
            time.sleep(0.05)
        assert child is not None, "the sandbox child never started"
        time.sleep(0.3)   # its set-up (PR_SET_PDEATHSIG first) is done by now
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    def running(pid):   # a zombie waiting for its new parent to reap it runs nothing
        try:
            return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in "ZX"
        except OSError:
            return False

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and running(child):
        time.sleep(0.05)
    assert not running(child)
