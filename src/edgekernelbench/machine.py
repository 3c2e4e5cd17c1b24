"""What this machine is, as the OS says: its CPU's name and its caches. No TVM here (the run store records
the machine without importing it); LLVM's view of the CPU and its ISA is backends/hostinfo.py."""

from __future__ import annotations

from pathlib import Path

SYSFS_CPU = Path("/sys/devices/system/cpu/cpu0/cache")


def sysfs_caches(root: Path = SYSFS_CPU) -> dict:
    """{"l1d_kib", "l2_kib", "l3_kib"} of CPU 0 from Linux sysfs (per core; lscpu sums over cores); {} where
    it says nothing."""
    out = {}
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size:
            continue
        scale = {"K": 1, "M": 1024, "G": 1024 * 1024}.get(size[-1].upper())
        kib = int(size[:-1]) * scale if scale else int(size) // 1024
        out[f"l{level}{'d' if level == 1 else ''}_kib"] = kib
    return out


def cpu_model() -> str:
    """The CPU's name from /proc/cpuinfo ("model name", or an ARM board's "Hardware" / "Model"), else
    platform.processor(), else ""."""
    import platform

    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Hardware", "Model", "cpu model", "uarch"):
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return value.strip()
    return platform.processor()


def cpu_governor(cpu: int = 0) -> str | None:
    """CPU `cpu`'s cpufreq scaling governor (Linux sysfs), None where it cannot be read (a virtual machine
    often has no cpufreq)."""
    try:
        return Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor").read_text().strip() or None
    except OSError:
        return None


def cpu_mhz(cpu: int = 0) -> float | None:
    """CPU `cpu`'s current clock in MHz: cpufreq's scaling_cur_freq, else /proc/cpuinfo's "cpu MHz" (what the
    kernel last saw; a hypervisor may report its nominal clock), else None."""
    try:
        return int(Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq").read_text()) / 1000.0
    except (OSError, ValueError):
        pass
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return None
    seen = -1
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "processor":
            seen = int(value) if value.strip().isdigit() else seen
        elif name.strip() == "cpu MHz" and seen in (cpu, -1):
            try:
                return float(value)
            except ValueError:
                return None
    return None
