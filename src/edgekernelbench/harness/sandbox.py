"""The OS sandbox around every process that handles a candidate (the builder and the judge).

Two well-kept Linux mechanisms, each recorded in the result (`Isolation.describe()`):

1. Namespaces, through util-linux's `unshare` wrapped around the worker's command line:
   a new user namespace (the worker is "root" only inside it: no capability over the outer processes,
   so /proc/<pid>/environ and /proc/<pid>/mem of `ekb`'s processes stay closed to it), a new PID namespace
   with the worker as its init and a private /proc (it cannot even name an outer process; every process it
   starts dies with it: the kernel kills a PID namespace's members when its init exits, and unshare's
   --kill-child kills the init when unshare is killed), a new network namespace (no interface but a
   down loopback: no network; remote-device backends keep the network and say so), and new IPC and UTS
   namespaces.
2. Landlock (kernel ABI >= 1), applied by the worker to itself before it reads any candidate data
   (`restrict_self`): everything outside the listed paths is invisible (no read, no write, no execute),
   the worker's own job directory is the only writable place, and from ABI 6 on it may neither signal
   nor reach the abstract UNIX sockets of processes outside its domain. What is readable: the Python
   installation and the package's import paths, the system's libraries and tools (/usr), the files the
   job names (the native ONNX Runtime timer, user problem/profile files), /proc (its own, private),
   /sys (CPU topology), a few /etc files the loader reads, /dev/null, /dev/zero, /dev/urandom. Not
   readable: the run directory and its store, other candidates, the LLM cache, home directories, keys.

Where the kernel cannot provide one of them, the worker runs without it and the result says so in one line
(`Isolation.weaker`); it never runs weaker in silence.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Landlock: syscall numbers (the same on every Linux architecture that has it) and access rights
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
RULE_PATH_BENEATH = 1
CREATE_RULESET_VERSION = 1
PR_SET_NO_NEW_PRIVS = 38
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_ALL_ABI1 = (1 << 13) - 1  # execute .. make_sym
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR

# /etc files the dynamic loader, libc and Python read; the rest of /etc (shadow, ssh keys, ...) stays closed
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
)
SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/sys")
DEVICES_RW = ("/dev/null", "/dev/zero")
DEVICES_R = ("/dev/urandom", "/dev/random")
UNSHARE_FLAGS = (
    "--user",
    "--map-root-user",
    "--pid",
    "--fork",
    "--kill-child",
    "--mount-proc",
    "--ipc",
    "--uts",
)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@functools.cache
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        v = _libc().syscall(
            SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION)
        )
    except (AttributeError, OSError):
        return 0
    return max(int(v), 0)


def _fs_rights(abi: int) -> int:
    rights = FS_ALL_ABI1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


class SandboxError(OSError):
    """Landlock could not be applied (a syscall failed); the worker must not go on as if it had been."""


def restrict_self(read: list[str], write: list[str], abi: int | None = None) -> int:
    """Applies Landlock to this process (and its future children): read/execute beneath `read`, everything
    beneath `write`, nothing elsewhere; from ABI 6, no signals to and no abstract UNIX sockets of processes
    outside the domain. Returns the ABI used (0: Landlock unavailable, nothing done). Paths that do not
    exist are skipped. Raises SandboxError when a syscall fails."""
    abi = landlock_abi() if abi is None else abi
    if abi < 1:
        return 0
    libc = _libc()
    handled = _fs_rights(abi)
    attr = _RulesetAttr(handled, 0, (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 8  # ABI < 4 knows only handled_access_fs
    if abi in (4, 5):
        size = 16
    fd = libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise SandboxError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for paths, rights in ((read, READ), (write, handled)):
            for p in paths:
                _add_rule(libc, fd, p, rights & handled)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise SandboxError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(SYS_RESTRICT_SELF, fd, ctypes.c_uint32(0)) != 0:
            raise SandboxError(
                ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
            )
    finally:
        os.close(fd)
    return abi


def _add_rule(libc, ruleset_fd: int, path: str, rights: int) -> None:
    try:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # absent: nothing to allow
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS  # a rule on a file may carry file rights only (else EINVAL)
        rule = _PathBeneathAttr(rights, pfd)
        if (
            libc.syscall(SYS_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0))
            != 0
        ):
            err = ctypes.get_errno()
            raise SandboxError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
    finally:
        os.close(pfd)


# ------------------------------------------------------------------------------------------ the plan
@dataclass
class Isolation:
    """What a worker runs under; `describe()` goes into Result.extra["isolation"]."""

    namespaces: list[str] = field(default_factory=list)  # "user", "pid", "net", "mount", "ipc", "uts"
    network: str = "none"  # "none" (own empty namespace) | "host (remote device)" | "host"
    landlock_abi: int = 0  # 0: no Landlock
    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)
    weaker: list[str] = field(default_factory=list)  # one line per protection that is missing here
    # forked from a warm judge (harness/zygote.py) into PID and mount namespaces of its own, rather than
    # started as a fresh process
    forked: bool = False
    kernel_cache: str = ""  # a warm judge's judge also writes its kernel cache (backends/kernel_cache.py)

    def describe(self) -> dict:
        d = asdict(self)
        d.pop("read")
        d["write"] = ["job directory"] if self.write else []
        if d.pop("kernel_cache"):
            d["write"].append("kernel cache")
        return d


@functools.cache
def unshare_works(net: bool) -> str | None:
    """None when `unshare` can create the namespaces here, else why not (one line)."""
    exe = shutil.which("unshare")
    if exe is None:
        return "util-linux's unshare is not installed"
    cmd = [exe, *UNSHARE_FLAGS, *(["--net"] if net else []), "--", "true"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unshare failed: {e}"
    if p.returncode != 0:
        return (
            "unshare cannot create user/PID namespaces here: " + (p.stderr.strip().splitlines() or ["?"])[-1]
        )
    return None


def read_paths(extra: list[str] = ()) -> list[str]:
    """What a sandboxed worker may read: Python, the import paths, system directories, `extra` files."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths.update(p for p in sys.path if p and os.path.isabs(p))
    paths.update(SYSTEM_READ)
    paths.update(ETC_FILES)
    paths.update(DEVICES_R)
    paths.update(p for p in extra if p)
    return sorted(p for p in paths if os.path.exists(p))


def plan(
    job_dir: str, network: bool = False, extra_read: list[str] = (), gpu: bool = False
) -> tuple[list[str], Isolation]:
    """(command prefix, isolation) for a worker whose only writable place is `job_dir`. `network`: keep the
    host's network (a remote device is reached over it). `gpu`: the GPU device files stay open."""
    iso = Isolation(network="host (remote device)" if network else "none")
    prefix: list[str] = []
    why = unshare_works(not network)
    if why is None:
        prefix = [shutil.which("unshare") or "unshare", *UNSHARE_FLAGS, *([] if network else ["--net"]), "--"]
        iso.namespaces = ["user", "pid", "mount", "ipc", "uts", *([] if network else ["net"])]
    else:
        iso.network = "host"
        iso.weaker.append(f"no namespaces ({why}): the worker shares the host's processes and network")
    iso.landlock_abi = landlock_abi()
    if iso.landlock_abi < 1:
        iso.weaker.append(
            "no Landlock (the kernel lacks it): the worker can read and write what its user can"
        )
    elif iso.landlock_abi < 6:
        iso.weaker.append(f"Landlock ABI {iso.landlock_abi} < 6: signals and abstract sockets are not scoped")
    iso.read = read_paths(list(extra_read))
    iso.write = [job_dir, *DEVICES_RW, *(gpu_device_files() if gpu else [])]
    return prefix, iso


def gpu_device_files() -> list[str]:
    return [str(p) for p in sorted(Path("/dev").glob("nvidia*"))] + ["/dev/dri"]
