"""What an artifact weighs, file by file, and what a board needs of it, per form:

- "relax-vm": model.so (stripped: what `strip` leaves; its dynamic symbols stay, the VM loads by them), the
  weights, and the runtime library it needs (libtvm_runtime.so and libtvm_ffi.so, as installed here; for a
  cross profile none is here, so the total is left open and says so). run.py adds a Python with NumPy and
  apache-tvm-ffi; a C++ application embedding the runtime does not.
- "c-program": c/model, static (its libc and the kernels' runtime inside), stripped, and the weights with
  the C program's constants: nothing else.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .memory import human


@dataclass
class FileSize:
    path: str  # relative to the artifact; a runtime library's absolute path
    bytes: int
    stripped_bytes: int | None = None  # after `strip` (None: not a binary, or no strip tool here)
    role: str = ""

    @property
    def shipped(self) -> int:
        return self.stripped_bytes if self.stripped_bytes is not None else self.bytes


@dataclass
class BoardForm:
    name: str  # relax-vm | c-program
    files: list[str]
    total_bytes: int | None  # None: a part is not known here (note says which)
    note: str = ""


@dataclass
class SizeReport:
    files: list[FileSize] = field(default_factory=list)
    forms: list[BoardForm] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        parts = [
            f"{f.name} {human(f.total_bytes) if f.total_bytes is not None else 'unknown'}"
            + (f" ({f.note})" if f.note and f.total_bytes is None else "")
            for f in self.forms
        ]
        return "size on a board: " + "; ".join(parts)


def stripped_size(path: Path, strip: str | None) -> int | None:
    """The size of `path` after `strip` (on a copy), None without a strip tool or when it fails."""
    if strip is None:
        return None
    with tempfile.TemporaryDirectory(prefix="ekb-strip-") as tmp:
        dest = Path(tmp) / path.name
        proc = subprocess.run([strip, "-o", str(dest), str(path)], capture_output=True)
        return dest.stat().st_size if proc.returncode == 0 and dest.is_file() else None


def runtime_libraries() -> list[Path]:
    """libtvm_runtime.so and libtvm_ffi.so as installed here (the Relax VM form's runtime on the host)."""
    import tvm
    import tvm_ffi

    out = []
    for pkg, name in ((tvm, "libtvm_runtime.so"), (tvm_ffi, "libtvm_ffi.so")):
        p = Path(pkg.__file__).parent / "lib" / name
        if p.is_file():
            out.append(p)
    return out


def strip_tool(profile, compiler: str | None) -> str | None:
    """The strip that knows the target's binaries: the host's, or the cross binutils' next to its gcc."""
    if profile.kind == "cross":
        from ..backends.cross import binutil

        return binutil(compiler, "strip") if compiler else None
    return shutil.which("strip")


def artifact_size(out: Path, manifest: dict, profile, compiler: str | None) -> SizeReport:
    """The SizeReport of the artifact in `out` (its manifest as written so far)."""
    strip = strip_tool(profile, compiler)
    report = SizeReport()

    def add(path: Path, role: str, binary: bool = False) -> FileSize:
        rel = str(path.relative_to(out)) if path.is_relative_to(out) else str(path)
        f = FileSize(rel, path.stat().st_size, stripped_size(path, strip) if binary else None, role)
        report.files.append(f)
        return f

    lib = add(out / manifest["library"]["file"], "Relax VM executable and kernels", binary=True)
    w_bytes = sum((out / w["file"]).stat().st_size for w in manifest["weights"])
    report.files.append(FileSize("weights/", w_bytes, None, f"weights ({len(manifest['weights'])} files)"))
    c = manifest.get("c_program") or {}
    c_bytes = sum((out / "weights" / name).stat().st_size for name in c.get("constants", []))
    if c_bytes:
        report.files.append(FileSize("weights/const*.bin", c_bytes, None, "the C program's constants"))
    if profile.kind == "host":
        runtime = [add(p, "runtime library (host)", binary=True) for p in runtime_libraries()]
        vm_total = lib.shipped + w_bytes + sum(f.shipped for f in runtime)
        vm_note = "plus, for run.py, a Python with NumPy and apache-tvm-ffi"
        vm_files = [lib.path, "weights/", *(f.path for f in runtime)]
    else:
        vm_total, vm_files = None, [lib.path, "weights/"]
        mtriple = profile.target.get("mtriple", profile.name)
        vm_note = (
            f"model.so {lib.shipped} B + weights {w_bytes} B + a libtvm_runtime.so built for {mtriple}, "
            "which is not here"
        )
    report.forms.append(BoardForm("relax-vm", vm_files, vm_total, vm_note))
    if c.get("status") == "built":
        prog = add(out / c["binary"], "static C program", binary=True)
        total = prog.shipped + w_bytes + c_bytes
        report.forms.append(BoardForm("c-program", [prog.path, "weights/"], total, "self-contained"))
    return report
