"""Process-level sandbox for generated code (standard library only).

The generated program runs in a child process of the worker
(``child.py``), never in the worker itself. The child applies, in this
order:

1. ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (dies with the worker) and
   ``PR_SET_NO_NEW_PRIVS`` (no privilege gain through exec).
2. **Network**: at start-up, while still single-threaded, ``unshare(CLONE_NEWNET)``:
   a fresh network namespace with only a down loopback, so every connect fails
   with ENETUNREACH, in Python and in C alike. As root (or with CAP_SYS_ADMIN) this
   works directly; unprivileged it needs ``CLONE_NEWUSER | CLONE_NEWNET`` (the uid
   and gid are mapped to themselves, so files and devices look the same). Where
   both are refused (a container's seccomp profile, user namespaces disabled) only
   the audit hook below blocks Python-level sockets; ``network`` in the answer's
   ``sandbox`` says which (``netns``, ``userns+netns``, ``audit-only``).
3. **Files (kernel)**: Landlock (``restrict_writes``, unprivileged, Linux >= 5.13),
   also at start-up while single-threaded: writes, creations, deletions only under the
   child's private temp dir and the sandbox Triton cache (plus /dev/null, the GPU
   device nodes and the process's own /proc/<pid>, which the CUDA driver writes); with Landlock ABI >= 4 also no TCP bind/connect, with ABI >= 6 no
   signals to processes outside the sandbox. Covers C code (torch.save's zip writer).
   The child writes code objects into its temp dir; the worker moves them into
   ``artifact_dir``. Where Landlock is missing, only the audit hook's Python-level
   checks remain (``files`` in the answer's ``sandbox`` says which).
4. **rlimits** (when the request arrives): ``RLIMIT_CPU`` (soft = CPU used so far +
   ``cpu_s``; SIGXCPU kills), ``RLIMIT_FSIZE``, ``RLIMIT_CORE`` = 0, ``RLIMIT_NPROC``
   (threads and processes of the uid: current count + ``nproc_extra``; the kernel
   does not enforce it for root / CAP_SYS_RESOURCE) and ``RLIMIT_AS`` on the CPU
   only -- on a GPU the CUDA/HIP runtime reserves tens of GiB of virtual address
   space at context creation, so an address-space limit makes CUDA fail; there the
   device memory is bounded by the GPU and host memory by the machine (or the
   engine's cgroup / Slurm).
5. **Audit hook** (``sys.addaudithook``, active only while untrusted code runs: its
   import, ``ModelNew(...)``, ``forward``, Triton compiles of its kernels):
   sockets (every ``socket.*`` event) -> ``network``; ``subprocess.Popen`` /
   ``os.system`` / ``os.exec*`` / ``os.posix_spawn`` / ``os.fork`` / ``os.kill`` /
   ``os.putenv`` -> ``process``, except a spawn (``subprocess.Popen``,
   ``os.posix_spawn``, ``os.exec*``) whose nearest non-stdlib caller is Triton itself
   (ptxas, the launcher's C compiler, ld.lld) and ``os.putenv`` from torch/Triton
   (they set their own variables on lazy imports);
   ``open`` for writing, ``os.remove/rename/mkdir/...``, ``shutil.*`` outside the
   child's private temp dir and the sandbox Triton cache -> ``file_io``; ``open``
   for reading outside the read roots (Python's prefix and site-packages, /usr,
   /lib*, /opt, /etc, /sys, /dev, /proc/self, the temp dir, the cache) or of
   ``/proc/*/environ``, ``/proc/*/mem``, ``/etc/shadow`` -> ``file_io``; ``exec`` /
   ``compile`` / ``marshal.loads`` with the generated module as the immediate caller,
   and ``ctypes.*`` / ``sys._getframe`` / ``sys.settrace`` / ``pickle.find_class``
   with it as the nearest caller outside the standard library -> ``introspection``.
   (Reads outside the read roots are refused only when the generated module is that
   nearest caller: torch and Triton read their own files on lazy imports.) A blocked event raises ``PermissionError`` *and* is
   recorded, so swallowing the exception does not help.

The child's environment is rebuilt from an allowlist (``child_env``), so secrets
in the worker's environment (API keys of an LLM endpoint) are not inherited.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import resource
import signal
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Callable

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
PR_SET_NO_NEW_PRIVS = 38

DEFAULT_LIMITS = {
    "timeout_s": 240.0,              # wall clock, enforced by the parent (SIGKILL)
    "cpu_s": None,                   # RLIMIT_CPU; None -> 2 * timeout_s + 10
    "as_bytes": 16 * 1024 ** 3,      # RLIMIT_AS, CPU only
    "fsize_bytes": 256 * 1024 ** 2,  # RLIMIT_FSIZE
    "nproc_extra": 256,              # RLIMIT_NPROC = current tasks of the uid + this
}

ENV_ALLOW_PREFIXES = ("CUDA_", "HIP_", "ROCM_", "ROCR_", "HSA_", "NVIDIA_", "TRITON_", "KILN_",
                      "OMP_", "MKL_", "OPENBLAS_", "LC_", "PYTORCH_", "AMD_", "GPU_")
ENV_ALLOW = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "USER", "LOGNAME", "LD_LIBRARY_PATH",
             "CC", "CXX", "TERM", "SHELL", "PYTHONHASHSEED", "NUMEXPR_MAX_THREADS"}
ENV_DENY_SUBSTRINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def child_env(base: dict, extra: dict | None = None) -> dict:
    """The environment for a sandbox child: an allowlist of ``base`` plus ``extra``."""
    env = {}
    for k, v in base.items():
        if any(s in k.upper() for s in ENV_DENY_SUBSTRINGS):
            continue
        if k in ENV_ALLOW or k.startswith(ENV_ALLOW_PREFIXES):
            env[k] = v
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------
# process hygiene and network
# ---------------------------------------------------------------------------

def no_new_privs() -> bool:
    try:
        return _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    except Exception:
        return False


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def isolate_network() -> str:
    """Moves this (single-threaded) process into an empty network namespace.

    Returns ``netns`` (plain unshare), ``userns+netns`` (unprivileged, through a
    user namespace with the identity uid/gid map) or ``audit-only: <why>``.
    """
    if threading.active_count() > 1:
        return "audit-only: process already has threads"
    libc = _libc()
    if libc.unshare(CLONE_NEWNET) == 0:
        return "netns"
    err1 = os.strerror(ctypes.get_errno())
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        try:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
            _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
        except OSError as exc:  # the namespace still has no network
            return f"userns+netns (uid map not written: {exc})"
        return "userns+netns"
    err2 = os.strerror(ctypes.get_errno())
    return f"audit-only: unshare(CLONE_NEWNET): {err1}; with CLONE_NEWUSER: {err2}"


# -- Landlock (Linux >= 5.13, unprivileged): kernel-enforced write restriction -------------
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_FS_WRITE_FILE, _FS_REMOVE_DIR, _FS_REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_FS_MAKE = (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1
DEVICE_WRITE_PATHS = ("/dev/null", "/dev/zero", "/dev/full", "/dev/kfd", "/dev/dri")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict_writes(write_roots: list[str], fs_rules: bool = True, tcp: bool = True,
                    scope: bool = True) -> str:
    """Landlock: from now on this process and its children may create, modify or delete
    files only under ``write_roots`` (plus the device nodes a GPU needs); with Landlock
    ABI >= 4 no TCP bind/connect at all; with ABI >= 6 no signals to processes outside
    the sandbox and no abstract unix sockets. Enforced by the kernel, so it covers C code
    too (torch.save's zip writer, numpy's tofile). Call it while single-threaded (threads
    started before are not restricted). Returns a description for the answer."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 0:
        return f"unavailable ({os.strerror(ctypes.get_errno())})"
    fs = _FS_WRITE_FILE | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE
    if abi >= 2:
        fs |= _FS_REFER
    if abi >= 3:
        fs |= _FS_TRUNCATE
    if not fs_rules:
        fs = 0
    attr = _RulesetAttr(fs, (_NET_BIND_TCP | _NET_CONNECT_TCP) if (abi >= 4 and tcp) else 0,
                        (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if (abi >= 6 and scope) else 0)
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    rfd = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if rfd < 0:
        return f"unavailable (create_ruleset: {os.strerror(ctypes.get_errno())})"
    file_rights = _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
    # the process's own /proc/<pid> (the CUDA driver writes there, e.g. its threads' names;
    # without it cuInit fails with "OS call failed")
    paths = list(write_roots) + list(DEVICE_WRITE_PATHS) + [os.path.realpath("/proc/self")]
    try:
        paths += [os.path.join("/dev", n) for n in os.listdir("/dev") if n.startswith("nvidia")]
    except OSError:
        pass
    allowed = []
    try:
        for p in paths:
            try:
                fd = os.open(p, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                isdir = os.path.isdir(p)
                pb = _PathBeneath(fs if isdir else file_rights, fd)
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(rfd), ctypes.c_int(1), ctypes.byref(pb),
                                ctypes.c_uint32(0)) == 0:
                    allowed.append(p)
            finally:
                os.close(fd)
        no_new_privs()
        if libc.syscall(_SYS_RESTRICT, ctypes.c_int(rfd), ctypes.c_uint32(0)) != 0:
            return f"unavailable (restrict_self: {os.strerror(ctypes.get_errno())})"
    finally:
        os.close(rfd)
    extra = (", no TCP" if abi >= 4 else "") + (", signals scoped" if abi >= 6 else "")
    granted = [p for p in allowed if p in write_roots]
    return f"landlock ABI {abi}: writes only under {', '.join(granted)} and GPU devices{extra}"


def _uid_tasks(uid: int) -> int:
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                text = f.read()
        except OSError:
            continue
        real_uid = threads = None
        for line in text.splitlines():
            if line.startswith("Uid:"):
                real_uid = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
        if real_uid == uid:
            n += threads or 1
    return n


def apply_limits(limits: dict, gpu: bool) -> dict:
    """Sets the rlimits; returns what was set (for the answer's ``sandbox``)."""
    lim = dict(DEFAULT_LIMITS)
    lim.update({k: v for k, v in (limits or {}).items() if v is not None})
    done: dict = {}
    timeout = float(lim["timeout_s"])
    cpu = lim.get("cpu_s")
    cpu = float(cpu) if cpu is not None else 2 * timeout + 10
    ru = resource.getrusage(resource.RUSAGE_SELF)
    used = ru.ru_utime + ru.ru_stime
    soft = int(used + cpu) + 1
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 5))
        done["cpu_s"] = cpu
    except (ValueError, OSError) as exc:
        done["cpu_s"] = f"not set: {exc}"
    for name, key in (("RLIMIT_FSIZE", "fsize_bytes"), ("RLIMIT_CORE", None)):
        val = 0 if key is None else int(lim[key])
        try:
            resource.setrlimit(getattr(resource, name), (val, val))
            done[key or "core_bytes"] = val
        except (ValueError, OSError) as exc:
            done[key or "core_bytes"] = f"not set: {exc}"
    if gpu:
        done["as_bytes"] = "not set on a GPU (CUDA/HIP reserve large virtual address ranges)"
    else:
        try:
            cur = resource.getrlimit(resource.RLIMIT_AS)[1]
            val = int(lim["as_bytes"])
            if cur != resource.RLIM_INFINITY:
                val = min(val, cur)
            resource.setrlimit(resource.RLIMIT_AS, (val, val))
            done["as_bytes"] = val
        except (ValueError, OSError) as exc:
            done["as_bytes"] = f"not set: {exc}"
    try:
        uid = os.getuid()
        n = _uid_tasks(uid) + int(lim["nproc_extra"])
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
        done["nproc"] = n if os.geteuid() != 0 else f"{n} (not enforced for root)"
    except (ValueError, OSError) as exc:
        done["nproc"] = f"not set: {exc}"
    return done


# ---------------------------------------------------------------------------
# audit hook
# ---------------------------------------------------------------------------

class SandboxViolation(PermissionError):
    pass


def _event_paths(indices, args):
    """The paths among an audit event's args at `indices`, normalized (those
    that are not paths left out)."""
    for i in indices:
        if i < len(args):
            path = _norm(args[i])
            if path is not None:
                yield path


def _norm(p) -> str | None:
    if isinstance(p, int):
        return None
    try:
        p = os.fsdecode(os.fspath(p))
    except TypeError:
        return None
    return os.path.realpath(p)


def _under(path: str, roots) -> bool:
    for r in roots:
        if path == r or path.startswith(r.rstrip("/") + "/"):
            return True
    return False


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

_PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                   "os.fork", "os.forkpty", "pty.spawn", "os.kill", "os.killpg",
                   "signal.pthread_kill", "os.putenv", "os.unsetenv", "os.startfile",
                   "sys.addaudithook", "os.setuid", "os.setgid"}
_SPAWN_EVENTS = {"subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn"}
_WRITE_PATH_EVENTS = {"os.remove": (0,), "os.rename": (0, 1), "os.rmdir": (0,), "os.mkdir": (0,),
                      "os.chmod": (0,), "os.chown": (0,), "os.symlink": (0, 1), "os.link": (0, 1),
                      "os.truncate": (0,), "os.utime": (0,), "os.chflags": (0,),
                      "os.setxattr": (0,), "os.removexattr": (0,), "shutil.rmtree": (0,),
                      "shutil.copyfile": (1,), "shutil.copymode": (1,), "shutil.copystat": (1,),
                      "shutil.copytree": (1,), "shutil.move": (1,), "shutil.chown": (0,),
                      "shutil.make_archive": (0,), "shutil.unpack_archive": (1,),
                      "tempfile.mkstemp": (0,), "tempfile.mkdtemp": (0,)}
_READ_PATH_EVENTS = {"os.listdir": (0,), "os.scandir": (0,), "glob.glob": (0,), "os.chdir": (0,)}
# blocked when the generated module calls them itself (its frame is the immediate caller;
# importlib compiling and unmarshalling a module that it imports lazily is fine)
_IMMEDIATE_EVENTS = ("exec", "compile", "marshal.", "code.__new__", "function.__new__")
# blocked when the nearest caller outside the standard library is the generated module
_DIRECT_ONLY_EVENTS = ("ctypes.", "sys._getframe", "sys._current_frames", "sys.settrace",
                       "sys.setprofile", "pickle.find_class", "object.__setattr__",
                       "object.__delattr__", "sys.setrecursionlimit", "gc.", "cpython.")


class Guard:
    """The audit-hook policy. One per process; ``install()`` once."""

    def __init__(self, tmpdir: str, cache_dir: str | None, generated_files: Callable[[], set],
                 extra_read: list[str] | None = None):
        self.depth = 0
        self.violations: list[tuple[str, str]] = []
        self._busy = threading.local()
        self.generated_files = generated_files
        self.write_roots = [os.path.realpath(tmpdir), "/dev/null"]
        if cache_dir:
            self.write_roots.append(os.path.realpath(cache_dir))
        paths = sysconfig.get_paths()
        self.stdlib = [os.path.realpath(p) for p in {paths.get("stdlib"), paths.get("platstdlib")} if p]
        self.site = [os.path.realpath(p) for p in {paths.get("purelib"), paths.get("platlib")} if p]
        read = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr", "/lib", "/lib32", "/lib64",
                "/opt", "/etc", "/sys", "/dev", "/proc/self", "/proc/thread-self", "/proc/cpuinfo",
                "/proc/meminfo", "/proc/stat", "/proc/driver", "/proc/sys", "/proc/filesystems",
                "/proc/mounts", tmpdir, str(Path(__file__).resolve().parents[2])}
        for p in list(sys.path) + list(extra_read or []):
            if p and os.path.isdir(p) and ("site-packages" in p or "dist-packages" in p):
                read.add(p)
        for mod in ("torch", "triton", "numpy"):
            m = sys.modules.get(mod)
            if m is not None and getattr(m, "__file__", None):
                read.add(os.path.dirname(os.path.dirname(m.__file__)))
        for var in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "TRITON_HOME"):
            if os.environ.get(var):
                read.add(os.environ[var])
        if cache_dir:
            read.add(cache_dir)
        read.update(extra_read or [])
        self.read_roots = sorted({os.path.realpath(p) for p in read if p})
        self.deny_read = ["/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh",
                          "/proc/self/environ", "/proc/self/mem", "/proc/thread-self/environ"]
        tr = sys.modules.get("triton")
        self.triton_dir = os.path.realpath(os.path.dirname(tr.__file__)) if tr is not None and \
            getattr(tr, "__file__", None) else None
        self.here = os.path.realpath(__file__)

    # -- phases ------------------------------------------------------------------
    @contextlib.contextmanager
    def untrusted(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def install(self) -> None:
        sys.addaudithook(self.hook)

    # -- the hook ------------------------------------------------------------------
    def _origin(self) -> str:
        """Who asked: 'generated', 'triton' or 'other', from the nearest frame that is
        neither the standard library nor this module."""
        gen = self.generated_files()
        f = sys._getframe(2)
        while f is not None:
            fn = f.f_code.co_filename
            if fn in gen:
                return "generated"
            if fn.startswith("<"):
                if fn.startswith("<kiln-generated"):
                    return "generated"
                f = f.f_back
                continue
            rp = os.path.realpath(fn)
            if rp == self.here or (_under(rp, self.stdlib) and not _under(rp, self.site)):
                f = f.f_back
                continue
            if self.triton_dir and _under(rp, [self.triton_dir]):
                return "triton"
            return "other"
        return "other"

    def block(self, rule: str, detail: str):
        self.violations.append((rule, detail))
        raise SandboxViolation(f"kiln sandbox: {detail} is not allowed ({rule})")

    def hook(self, event: str, args: tuple) -> None:
        if self.depth <= 0 or getattr(self._busy, "on", False):
            return
        self._busy.on = True
        try:
            self._check(event, args)
        finally:
            self._busy.on = False

    def _check(self, event: str, args: tuple) -> None:
        if event.startswith("socket."):
            self.block("network", f"{event}{_short(args)}")
        if event in _PROCESS_EVENTS:
            origin = self._origin()
            if event in _SPAWN_EVENTS and origin == "triton":
                return  # ptxas, the launcher's C compiler, ld.lld
            if event in ("os.putenv", "os.unsetenv") and origin != "generated":
                return  # torch / Triton set their own variables on lazy import
            self.block("process", f"{event}{_short(args)}")
        if event == "open":
            path = _norm(args[0]) if args else None
            if path is None:
                return
            mode = args[1] if len(args) > 1 else None
            flags = args[2] if len(args) > 2 else 0
            write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                    (isinstance(flags, int) and flags & _WRITE_FLAGS)
            if write:
                if not _under(path, self.write_roots):
                    self.block("file_io", f"open({path!r}, {mode or 'flags=' + hex(flags or 0)!s}) for writing")
            elif _under(path, self.deny_read) or _proc_other(path):
                self.block("file_io", f"open({path!r}) for reading")
            elif not _under(path, self.read_roots) and self._origin() == "generated":
                self.block("file_io", f"open({path!r}) for reading")
            return
        if event in _WRITE_PATH_EVENTS:
            for path in _event_paths(_WRITE_PATH_EVENTS[event], args):
                if not _under(path, self.write_roots):
                    self.block("file_io", f"{event}({path!r})")
            return
        if event in _READ_PATH_EVENTS:
            for path in _event_paths(_READ_PATH_EVENTS[event], args):
                if _proc_other(path) or (not _under(path, self.read_roots) and self._origin() == "generated"):
                    self.block("file_io", f"{event}({path!r})")
            return
        if event.startswith(_IMMEDIATE_EVENTS) and self._immediate_caller_generated():
            self.block("introspection", event)
        if event.startswith(_DIRECT_ONLY_EVENTS) and self._origin() == "generated":
            self.block("introspection", event)

    def _immediate_caller_generated(self) -> bool:
        f = sys._getframe(2)
        while f is not None and os.path.realpath(f.f_code.co_filename) == self.here:
            f = f.f_back
        if f is None:
            return False
        fn = f.f_code.co_filename
        return fn in self.generated_files() or fn.startswith("<kiln-generated")


def _proc_other(path: str) -> bool:
    """/proc/<pid>/... of another process (self is /proc/self, resolved to our pid)."""
    if not path.startswith("/proc/"):
        return False
    part = path.split("/")[2] if path.count("/") >= 2 else ""
    if part.isdigit():
        if int(part) != os.getpid():
            return True
        rest = path.split("/", 3)[3] if path.count("/") >= 3 else ""
        return rest.startswith(("environ", "mem"))
    return False


def _short(args: tuple) -> str:
    text = repr(args)
    return text if len(text) <= 160 else text[:157] + "..."


# ---------------------------------------------------------------------------
# parent side helpers
# ---------------------------------------------------------------------------

def describe_exit(rc: int, cpu_s=None) -> tuple[str, str]:
    """(status, message) for a child that died without answering."""
    if rc is not None and rc < 0:
        sig = -rc
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        if sig == signal.SIGXCPU:
            return "timeout", f"killed by {name}: CPU time limit ({cpu_s} s) exceeded"
        if sig == signal.SIGKILL:
            return "crash", f"killed by {name} (out of memory, or the engine)"
        return "crash", f"the sandbox child died of {name}"
    return "crash", f"the sandbox child exited with code {rc} without answering"
