"""Reading files that something untrusted may have written: a builder's output, a candidate file, a run
directory's profiles.

A candidate's Python runs in the builder, which writes its files into its job directory; an agent writes
candidate files into a run directory. Either may leave a symlink where a file is expected (to
/proc/self/mem: a read that fails in a way nobody handles; to /proc/self/environ: the reader's own
environment, API keys included, copied wherever the file's text goes), a FIFO (a read that never ends), a
directory or a file of gigabytes. `read_regular` opens the file itself, never what a link points to
(O_NOFOLLOW, and each directory on the way with O_NOFOLLOW too when `root` is given), checks that it is a
regular file of at most `limit` bytes on the open descriptor (no race between the check and the read) and
reads it; anything else is an `UntrustedFileError`, one line saying which rule the file broke."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from .errors import EKBError

__all__ = ["UntrustedFileError", "read_regular", "sha256_hex"]


class UntrustedFileError(EKBError):
    """A file that must be a plain file of bounded size is not one (a link, a device, a FIFO, too large)."""


_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_FLAGS |= getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = _FLAGS | getattr(os, "O_DIRECTORY", 0)


def _open(path: Path, root: Path | None) -> int:
    """A descriptor of `path` opened without following a link: its last component always, and every
    component below `root` too when `root` is given (`path` must then lie inside it)."""
    if root is None:
        return os.open(path, _FLAGS)
    rel = Path(os.path.relpath(path, root))
    if rel.is_absolute() or ".." in rel.parts:
        raise UntrustedFileError(f"{path}: not inside {root}")
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in rel.parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(rel.parts[-1], _FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


def read_regular(path: Path | str, limit: int, root: Path | str | None = None) -> bytes:
    """The bytes of `path`, a regular file (not a link, FIFO, device or directory) of at most `limit` bytes.
    `root`: no component of `path` below it may be a link either. Raises UntrustedFileError (a missing
    file included: FileNotFoundError is one)."""
    path = Path(path)
    try:
        fd = _open(path, Path(root) if root is not None else None)
    except FileNotFoundError:
        raise UntrustedFileError(f"{path}: no such file") from None
    except OSError as e:  # ELOOP: a symbolic link; ENOTDIR: a link or file where a directory should be
        why = os.strerror(e.errno or 0)
        raise UntrustedFileError(f"{path}: not opened as a plain file ({why})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(f"{path}: not a regular file")
        if info.st_size > limit:
            raise UntrustedFileError(f"{path}: {info.st_size} bytes, more than the limit of {limit}")
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise UntrustedFileError(f"{path}: grew past the limit of {limit} bytes while it was read")
        return b"".join(chunks)
    except OSError as e:
        raise UntrustedFileError(f"{path}: cannot be read ({os.strerror(e.errno or 0)})") from None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def sha256_hex(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
