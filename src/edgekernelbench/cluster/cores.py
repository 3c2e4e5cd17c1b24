"""The cores of a node, and claiming them: a timed judgment runs only on a physical core that no other task
of EdgeKernelBench uses while it times.

Ray counts CPUs but does not place a task on any CPU in particular, so the timing slots it schedules by
(a node declares one per physical core: `timing_slots`) are made real here, on the node: a task claims
physical cores (an flock on one lock file per core, in `locks_dir()`: machine-wide, so two Ray nodes on
one machine share them; released by the kernel when the process dies) and pins itself and every process it
starts to their logical CPUs.

- A timed task claims its cores exclusively (LOCK_EX): no other claim on them while it holds them, whether
  timed or not, and both SMT siblings of a core are its. It holds them for its whole judgment (the judge
  builds, checks and times in one sandboxed process tree, pinned there).
- An untimed task (correctness only) claims shared (LOCK_SH) every core no timed task holds, and runs on
  all of them (its builder and judge run at once); never on a core a timed task holds. A timed task waits
  for a core no untimed task holds (on a node that mixes timed and untimed work, of two runs at once).

Physical cores come from Linux sysfs (topology/core_cpus_list, else thread_siblings_list), restricted to
the CPUs this process may run on; without them every CPU counts as a core of its own (and says so). A VM's
hypervisor may hide that two vCPUs share a core: `ekb cluster start --timing-slots` then declares fewer."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import EKBError

SYSFS_CPUS = Path("/sys/devices/system/cpu")
LOCKS_ENV = "EKB_CORE_LOCKS"  # the directory of the per-core lock files (default: a per-user one in /tmp)
POLL_S = 0.05


@dataclass(frozen=True)
class Cores:
    """The physical cores this process may run on: each one's logical CPUs (SMT siblings together)."""

    groups: tuple[tuple[int, ...], ...]
    source: str  # where the grouping came from

    @property
    def count(self) -> int:
        return len(self.groups)


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Linux's CPU list format ("0-3,8,10-11") as CPU numbers."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


def _allowed() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def physical_cores(root: Path = SYSFS_CPUS, allowed: set[int] | None = None) -> Cores:
    """The physical cores among the CPUs this process may use (`allowed`), from sysfs."""
    allowed = _allowed() if allowed is None else set(allowed)
    groups: dict[tuple[int, ...], None] = {}
    for cpu in sorted(allowed):
        topo = root / f"cpu{cpu}" / "topology"
        siblings: tuple[int, ...] = ()
        for name in ("core_cpus_list", "thread_siblings_list"):
            with contextlib.suppress(OSError, ValueError):
                siblings = parse_cpu_list((topo / name).read_text())
                break
        if not siblings:
            return Cores(
                tuple((c,) for c in sorted(allowed)), "no sysfs topology: every CPU counted as a core"
            )
        groups[tuple(sorted(c for c in siblings if c in allowed))] = None
    source = f"sysfs topology ({root})"
    return Cores(tuple(sorted(groups)), source)


def timing_slots() -> int:
    """The timing slots this machine offers: one per physical core (its SMT siblings are not a second)."""
    return max(1, physical_cores().count)


class CoreBusy(EKBError):
    """No core could be claimed before the wait ran out."""


@dataclass(frozen=True)
class Claim:
    """The cores a task holds: their logical CPUs, and whether it holds them alone (a timed task)."""

    cpus: tuple[int, ...]
    exclusive: bool


def locks_dir() -> Path:
    """The directory of the per-core lock files: $EKB_CORE_LOCKS, else <tmp>/ekb-cores-<uid>; created private,
    and refused when it is not a directory of this user (a link, another user's)."""
    named = os.environ.get(LOCKS_ENV)
    path = Path(named) if named else Path(tempfile.gettempdir()) / f"ekb-cores-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=bool(named))
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise EKBError(f"{path}: not a directory of this user (the cores' lock files go there; {LOCKS_ENV})")
    return path


def _open_lock(directory: Path, group: tuple[int, ...]) -> int:
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    return os.open(directory / f"core{group[0]}.lock", flags, 0o600)


def _try(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _take(directory: Path, cores: Cores, n: int, exclusive: bool) -> list[tuple[int, tuple[int, ...]]]:
    """One attempt; [] when it holds nothing. Exclusive: n cores nobody holds (fd, CPUs), or nothing. Shared:
    every core no timed task holds (at least n), so that an untimed judgment's builder and judge spread over
    them as they would on a machine of their own."""
    held: list[tuple[int, tuple[int, ...]]] = []
    for group in cores.groups:
        if exclusive and len(held) == n:
            break
        fd = _open_lock(directory, group)
        if _try(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH):
            held.append((fd, group))
        else:
            os.close(fd)
    if len(held) >= n:
        return held
    for fd, _ in held:
        os.close(fd)
    return []


@contextlib.contextmanager
def claim_cores(n: int, exclusive: bool, wait_s: float, cores: Cores | None = None) -> Iterator[Claim]:
    """Claims `n` physical cores (at most as many as there are) and pins this thread, and so every process
    it starts from now on, to their CPUs; on exit the cores are released and the thread's CPUs restored.
    Raises CoreBusy when they cannot be had within `wait_s` seconds."""
    cores = cores or physical_cores()
    n = max(1, min(n, cores.count))
    directory = locks_dir()
    deadline = time.monotonic() + wait_s
    while not (held := _take(directory, cores, n, exclusive)):
        if time.monotonic() > deadline:
            what = f"{n} free core(s)" if exclusive else "core that no timed task holds"
            raise CoreBusy(f"no {what} of {cores.count} within {wait_s:.0f} s ({directory})")
        time.sleep(POLL_S)
    cpus = tuple(sorted(c for _, group in held for c in group))
    before = None
    try:
        with contextlib.suppress(AttributeError, OSError):
            before = os.sched_getaffinity(0)
            os.sched_setaffinity(0, cpus)
        yield Claim(cpus, exclusive)
    finally:
        if before is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, before)
        for fd, _ in held:
            os.close(fd)
