"""The sandbox's child: run as `python -I -S sandbox_child.py CONFIG_JSON` by sandbox.py.

A fresh interpreter (isolated mode, no site-packages, an empty environment, its own session)
sets up every layer it is told to apply, in this order, and only then runs the code:

  1. dies with its parent (PR_SET_PDEATHSIG), reads the code from its scratch folder and
     deletes the file, closes stdin, imports the stdlib extension modules code may use (new
     native code cannot be mapped once the filter holds);
  2. rlimits: CPU, address space, file size, open files, no core files, no processes;
  3. network_namespace: a fresh network namespace (only a down loopback);
  4. capabilities: drops every capability (a root worker's child keeps uid 0, not its powers);
  5. landlock: reads only beneath the stdlib and a few /dev files, writes only beneath the
     scratch folder (and, where the kernel's Landlock has them, no TCP and no signals or
     abstract sockets outside the sandbox);
  6. seccomp: a syscall filter (libseccomp through pyseccomp): no fork/clone/exec, no
     sockets, no io_uring, no signals to other processes, no executable mappings, no mounts,
     namespaces, tracing, SysV IPC, permission/owner changes, limit raising or device nodes;
  7. audit_hook: a Python audit hook that refuses ctypes, sockets, subprocesses, writes
     outside the scratch folder and reads of other processes' /proc, and keeps itself.

Then it writes what held to the report fd and runs the code. In strict mode a layer that
fails to set up ends the child (exit 125) before any code runs, naming the layer. The probe
(`--probe`) is the same run with no code, in best-effort mode: what it reports is exactly what
a call on this machine gets.

This file imports nothing of mindrl (it runs without site-packages): only the stdlib, and
pyseccomp from the directory the parent names.
"""

import json
import os
import sys

SETUP_FAILED = 125
CHILD_LAYERS = ("rlimits", "network_namespace", "capabilities", "landlock", "seccomp",
                "audit_hook")

# Extension modules code commonly uses, imported before the filter forbids mapping new
# native code (pure-Python stdlib modules import later as usual, from the read-only stdlib).
PRELOAD = ("math", "cmath", "_random", "random", "_bisect", "bisect", "_heapq", "heapq",
           "_json", "json", "_datetime", "datetime", "_decimal", "decimal", "fractions",
           "_statistics", "statistics", "_struct", "struct", "array", "binascii",
           "unicodedata", "_contextvars", "_pickle", "_csv", "_sha256", "_sha512", "_md5",
           "_sha1", "_blake2", "_opcode", "select", "zlib", "_bz2", "_lzma", "resource",
           "fcntl", "termios", "_queue", "string", "re", "itertools",
           "collections", "functools", "operator", "typing", "dataclasses", "textwrap",
           "copy", "pprint", "numbers", "enum", "io", "traceback")

PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446

# Landlock access rights by the ABI version that introduced them.
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
FS_MAKE_SYM, FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1,
             5: (1 << 16) - 1}
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

# Denied outright (EPERM) by the syscall filter; those marked core must exist on the arch.
DENY_CORE = ("fork", "vfork", "clone", "clone3", "execve", "execveat", "socket",
             "socketpair", "ptrace", "personality", "setrlimit", "prlimit64", "unshare",
             "setns", "mount", "umount2", "chroot", "pivot_root", "mknod", "mknodat")
DENY_MORE = ("io_uring_setup", "io_uring_enter", "io_uring_register", "process_vm_readv",
             "process_vm_writev", "process_madvise", "kcmp", "pidfd_open", "pidfd_getfd",
             "pidfd_send_signal", "perf_event_open", "bpf", "userfaultfd", "keyctl",
             "add_key", "request_key", "open_by_handle_at", "name_to_handle_at",
             "mount_setattr", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
             "fspick", "quotactl", "swapon", "swapoff", "reboot", "kexec_load",
             "kexec_file_load", "init_module", "finit_module", "delete_module", "acct",
             "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
             "setdomainname", "syslog", "iopl", "ioperm", "vhangup", "uselib",
             "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
             "fchownat", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
             "lremovexattr", "fremovexattr", "utime", "utimes", "utimensat", "futimesat",
             "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
             "setgroups", "setfsuid", "setfsgid", "capset", "setsid", "setpgid",
             "setpriority", "ioprio_set", "sched_setaffinity", "sched_setscheduler",
             "sched_setparam", "sched_setattr", "migrate_pages", "move_pages", "mbind",
             "set_mempolicy", "shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv",
             "msgctl", "semget", "semop", "semtimedop", "semctl", "fanotify_init",
             "memfd_secret")
SIGNAL_CALLS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
EXEC_MAP_CALLS = ("mmap", "mprotect", "pkey_mprotect")
PROT_EXEC = 4


class LayerError(Exception):
    pass


def main(argv):
    probe = len(argv) > 1 and argv[1] == "--probe"
    config = json.loads(argv[2] if probe else argv[1])
    report_fd = config["report_fd"]
    import ctypes

    libc = ctypes.CDLL(config["libs"].get("c"), use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)        # SIGKILL when the worker dies
    if os.getppid() != config["parent"]:
        os._exit(SETUP_FAILED)                      # the worker died before prctl held
    code = ""
    if config.get("code_file"):
        with open(config["code_file"], encoding="utf-8") as f:
            code = f.read()
        os.unlink(config["code_file"])
    os.close(0)                                     # stdin closed: input() finds no stdin
    sys.stdin = sys.__stdin__ = None
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    seccomp = _import_pyseccomp(config) if "seccomp" in config["apply"] else None
    os.chdir(config["scratch"])

    held, missing = [], {}
    for layer in CHILD_LAYERS:
        if layer not in config["apply"]:
            continue
        try:
            if layer == "rlimits":
                _rlimits(config["limits"])
            elif layer == "network_namespace":
                _network_namespace(libc)
            elif layer == "capabilities":
                _drop_capabilities(libc)
            elif layer == "landlock":
                _landlock(libc, config)
            elif layer == "seccomp":
                if isinstance(seccomp, str):
                    raise LayerError(seccomp)
                _seccomp(seccomp)
            elif layer == "audit_hook":
                _purge_ctypes()
                _audit_hook(config["scratch"])
            held.append(layer)
        except Exception as e:  # noqa: BLE001 - any failure is the layer's, reported by name
            reason = str(e) or type(e).__name__
            missing[layer] = reason
            if config["strict"]:
                _report(report_fd, held, missing, refused=f"{layer}: {reason}")
                os._exit(SETUP_FAILED)
    del libc, seccomp, ctypes
    os.environ.clear()   # started empty; Python's locale coercion adds LC_CTYPE
    _report(report_fd, held, missing)
    if probe:
        return 0
    return _run(code)


def _report(fd, held, missing, refused=None):
    data = json.dumps({"held": held, "missing": missing, "refused": refused}).encode()
    while data:
        data = data[os.write(fd, data):]
    os.close(fd)


def _run(code):
    import traceback

    scope = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(code, "<code>", "exec"), scope)
    except SystemExit as e:
        code_ = e.code
        if code_ is None or isinstance(code_, int):
            return code_ or 0
        print(code_, file=sys.stderr)
        return 1
    except BaseException as e:  # noqa: BLE001 - the code's error is its answer
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        traceback.print_exception(type(e), e, tb)   # from the code's own frames on
        return 1
    return 0


def _import_pyseccomp(config):
    """pyseccomp from the directory the parent found it in, loading the libseccomp the parent
    found (ctypes.util.find_library would run ldconfig); a reason string when it cannot."""
    where, lib = config.get("pyseccomp_dir"), config["libs"].get("seccomp")
    if not where:
        return "the pyseccomp package is not installed (pip install pyseccomp)"
    if not lib:
        return "libseccomp.so.2 not found (Debian: apt-get install libseccomp2)"
    import ctypes.util

    found = dict(config["libs"])
    original = ctypes.util.find_library
    ctypes.util.find_library = lambda name: found.get(name) or original(name)
    sys.path.insert(0, where)
    try:
        import pyseccomp
    except Exception as e:  # noqa: BLE001
        return f"pyseccomp cannot load libseccomp: {e}"
    finally:
        sys.path.remove(where)
        ctypes.util.find_library = original
    return pyseccomp


def _rlimits(limits):
    import resource

    def cap(kind, value):
        _, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(kind, (value, value))

    cpu = int(limits["cpu_s"])
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    top = cpu + 1 if hard == resource.RLIM_INFINITY else min(cpu + 1, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (min(cpu, top), top))   # SIGXCPU, then SIGKILL
    cap(resource.RLIMIT_AS, int(limits["memory_bytes"]))
    cap(resource.RLIMIT_FSIZE, int(limits["file_size_bytes"]))
    cap(resource.RLIMIT_NOFILE, int(limits["open_files"]))
    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_NPROC, 0)


def _errno_text():
    import ctypes

    err = ctypes.get_errno()
    return f"{os.strerror(err)} (errno {err})"


def _network_namespace(libc):
    before = os.readlink("/proc/self/ns/net")
    if libc.unshare(CLONE_NEWNET) != 0:
        first = _errno_text()
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            raise LayerError(f"unshare(CLONE_NEWNET): {first}; with a user namespace: "
                             f"{_errno_text()}")
    if os.readlink("/proc/self/ns/net") == before:
        raise LayerError("unshare succeeded but the network namespace is the same")


def _drop_capabilities(libc):
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()   # _LINUX_CAPABILITY_VERSION_3, all 0
    if libc.capset(ctypes.byref(header), data) != 0:
        raise LayerError(f"capset: {_errno_text()}")
    with open("/proc/self/status") as f:
        effective = next((line.split()[1] for line in f if line.startswith("CapEff:")), "?")
    if effective.strip("0"):
        raise LayerError(f"capabilities still held after capset: CapEff {effective}")


def _landlock(libc, config):
    import ctypes

    abi = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), 1)
    if abi < 1:
        raise LayerError(f"the kernel has no Landlock: {_errno_text()}")
    fs = FS_BY_ABI.get(abi, FS_BY_ABI[5])

    class Ruleset(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    ruleset = Ruleset(fs, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                      SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset_fd = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(ruleset),
                              ctypes.c_size_t(size), 0)
    if ruleset_fd < 0:
        raise LayerError(f"landlock_create_ruleset (ABI {abi}): {_errno_text()}")
    read = FS_READ_FILE | FS_READ_DIR
    scratch = (FS_READ_FILE | FS_READ_DIR | FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE
               | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SYM | FS_REFER | FS_TRUNCATE)
    rules = [(p, read) for p in config["read_paths"]]
    rules += [("/dev/null", FS_READ_FILE | FS_WRITE_FILE), ("/dev/zero", FS_READ_FILE),
              ("/dev/urandom", FS_READ_FILE), ("/dev/random", FS_READ_FILE),
              (config["scratch"], scratch)]
    try:
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                if not os.path.isdir(path):
                    rights &= FILE_RIGHTS
                rule = PathBeneath(rights & fs, fd)
                if libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset_fd, 1, ctypes.byref(rule), 0):
                    raise LayerError(f"landlock_add_rule {path}: {_errno_text()}")
            finally:
                os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise LayerError(f"prctl(PR_SET_NO_NEW_PRIVS): {_errno_text()}")
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset_fd, 0) != 0:
            raise LayerError(f"landlock_restrict_self: {_errno_text()}")
    finally:
        os.close(ruleset_fd)


def _seccomp(seccomp):
    import errno

    deny = seccomp.ERRNO(errno.EPERM)
    flt = seccomp.SyscallFilter(seccomp.ALLOW)
    pid = os.getpid()
    for name in DENY_CORE:
        try:
            flt.add_rule(deny, name)
        except Exception as e:  # noqa: BLE001
            if name not in ("fork", "vfork", "clone3", "mknod"):   # absent on some arches
                raise LayerError(f"cannot filter {name}: {e}") from e
    for name in DENY_MORE:
        try:
            flt.add_rule(deny, name)
        except Exception:  # noqa: BLE001 - not a syscall of this arch or libseccomp version
            pass
    for name in SIGNAL_CALLS:   # signals only to itself (its pid is its only thread's tid)
        flt.add_rule(deny, name, seccomp.Arg(0, seccomp.NE, pid))
    for name in EXEC_MAP_CALLS:  # no new executable memory: no native code loaded from now on
        try:
            flt.add_rule(deny, name, seccomp.Arg(2, seccomp.MASKED_EQ, PROT_EXEC, PROT_EXEC))
        except Exception as e:  # noqa: BLE001
            if name != "pkey_mprotect":
                raise LayerError(f"cannot filter {name}: {e}") from e
    flt.load()                  # sets no_new_privs itself


def _purge_ctypes():
    """Forget the modules the set-up used: code that imports them runs into the audit hook."""
    for name in list(sys.modules):
        if name.split(".")[0] in ("ctypes", "_ctypes", "pyseccomp"):
            del sys.modules[name]


def _audit_hook(scratch):
    """Install the hook. It reads only its default arguments (bound now, and themselves
    guarded: setting a function's __code__ or __defaults__ is refused), so code that patches
    os.path or builtins cannot change what it checks."""
    import os.path as osp

    scratch_real = osp.realpath(scratch)
    proc_self = f"/proc/{os.getpid()}"

    def hook(event, args, _scratch=scratch_real + os.sep, _scratch_dir=scratch_real,
             _proc_self=proc_self, _pid=os.getpid(), _realpath=osp.realpath,
             _fspath=os.fspath, _str=str, _bytes=bytes, _isinstance=isinstance,
             _decode=os.fsdecode, _write=os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
             | os.O_APPEND, _perm=PermissionError,
             _blocked_imports=frozenset({"ctypes", "_ctypes", "socket", "_socket", "ssl",
                                         "_ssl", "subprocess", "_posixsubprocess", "pty",
                                         "multiprocessing", "_multiprocessing", "mmap",
                                         "pyseccomp", "_xxsubinterpreters", "_xxinterpchannels",
                                         "_testcapi", "_testinternalcapi"}),
             _blocked=frozenset({"os.system", "os.exec", "os.posix_spawn", "os.spawn",
                                 "os.fork", "os.forkpty", "subprocess.Popen", "os.killpg",
                                 "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                                 "code.__new__", "function.__new__", "sys.setprofile",
                                 "sys.settrace", "os.chroot", "os.setxattr",
                                 "os.removexattr", "os.chflags", "os.lchflags"}),
             _path_events=frozenset({"os.remove", "os.rmdir", "os.rename", "os.mkdir",
                                     "os.symlink", "os.link", "os.chmod", "os.chown",
                                     "os.truncate", "os.utime", "os.mkfifo", "os.mknod"}),
             _guarded=frozenset({"__code__", "__defaults__", "__kwdefaults__"})):
        def inside(path):
            if _isinstance(path, int) or path is None:
                return True
            try:
                real = _realpath(_decode(_fspath(path)))
            except Exception:  # noqa: BLE001 - a path it cannot read is not inside
                return False
            return real == _scratch_dir or real.startswith(_scratch)

        if event in _blocked or event.startswith("ctypes.") or event.startswith("socket."):
            raise _perm(f"sandbox: {event} is not allowed")
        if event == "import" and _str(args[0]).split(".")[0] in _blocked_imports:
            raise _perm(f"sandbox: import of {args[0]} is not allowed")
        if event == "open":
            path, flags = args[0], args[2] if len(args) > 2 and args[2] is not None else 0
            if (flags & _write or (args[1] and any(c in _str(args[1]) for c in "wax+"))) \
                    and not inside(path):
                raise _perm(f"sandbox: writing outside the scratch folder: {path!r}")
            if not _isinstance(path, int) and path is not None:
                try:
                    real = _realpath(_decode(_fspath(path)))
                except Exception:  # noqa: BLE001
                    real = ""
                if real.startswith("/proc/") and not (real == _proc_self
                                                      or real.startswith(_proc_self + "/")):
                    raise _perm(f"sandbox: reading {path!r} is not allowed")
        elif event in _path_events:
            if any(a is not None and not _isinstance(a, int) and not inside(a)
                   for a in args[:2] if _isinstance(a, (_str, _bytes)) or hasattr(a, "__fspath__")):
                raise _perm(f"sandbox: {event} outside the scratch folder")
            if event in ("os.rename", "os.symlink", "os.link") and len(args) > 2 and any(
                    fd is not None for fd in args[2:4]):
                raise _perm(f"sandbox: {event} with a directory fd is not allowed")
        elif event == "os.kill":
            if args[0] != _pid:
                raise _perm("sandbox: signals only to itself")
        elif event in ("object.__setattr__", "object.__delattr__") and args[1] in _guarded:
            raise _perm(f"sandbox: setting {args[1]} is not allowed")

    sys.addaudithook(hook)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
