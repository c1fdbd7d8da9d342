"""Bounded reads and safe writes for the files kvdiag is pointed at (never hang on ``/dev/zero``, never turn a
device, pipe or an input into a report)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import InputError

MIB = 1024 * 1024


def read_bounded(path: str, limit_bytes: int, what: str, label: str = "") -> bytes:
    """Read a whole regular file of at most ``limit_bytes``.

    Raises:
        InputError: missing, a folder, not a regular file (device, pipe: they may never end), larger than the
            limit, or unreadable — the message names ``label`` (e.g. ``--state``) and the path.
    """
    name = f"{label} {path}" if label else path
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{name}: no such file, expected {what}") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{name}: is a folder, expected {what}")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{name}: not a regular file (a device or pipe), expected {what}")
    if st.st_size > limit_bytes:
        raise InputError(f"{name}: {st.st_size / MIB:,.1f} MiB, larger than the {limit_bytes / MIB:,.0f} MiB "
                         f"kvdiag reads for {what}")
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit_bytes + 1)
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror}") from None
    if len(data) > limit_bytes:
        raise InputError(f"{name}: larger than the {limit_bytes / MIB:,.0f} MiB kvdiag reads for {what}")
    return data


def check_output_target(path: str, option: str, inputs: list[str] | tuple[str, ...] = ()) -> Path:
    """Where an output option may write: a new or regular file that is none of the inputs.

    A symlink is followed to its target (so the link stays a link). Returns the path to write.

    Raises:
        InputError: ``path`` is a folder, a device or pipe, or the same file as one of ``inputs``.
    """
    p = Path(path)
    target = p.resolve() if p.is_symlink() else p
    if target.exists():
        st = os.stat(target)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{option} {path}: is a folder, expected a file path")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{option} {path}: not a regular file (a device or pipe); kvdiag writes reports "
                             "only to files (leave the option out for standard output)")
        for src in inputs:
            if src and src != "-" and _covers(src, target):
                raise InputError(f"{option} {path}: is also an input ({src}); kvdiag never overwrites its input")
    return target


def _covers(src: str, target: Path) -> bool:
    """Whether the input ``src`` — a file, a folder read whole, or a glob (``--metrics-file 'run/*.prom'``) —
    includes the existing file ``target``."""
    import glob

    try:
        if any(ch in src for ch in "*?[") and not os.path.exists(src):
            return any(os.path.samefile(g, target) for g in glob.glob(src) if os.path.isfile(g))
        if os.path.isdir(src):
            real = os.path.realpath(target)
            return os.path.commonpath([real, os.path.realpath(src)]) == os.path.realpath(src)
        return os.path.exists(src) and os.path.samefile(src, target)
    except (OSError, ValueError):
        return False


def atomic_write(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a temporary file in the same folder, flushed, then renamed
    over ``path``; on any failure (full disk, a signal) the temporary file is removed and ``path`` keeps its
    previous content. The file keeps the mode of the one it replaces (a new one: 0666 less the umask).

    Raises:
        OSError: the folder cannot be written, or the write or rename failed (the caller words the message).
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
        tmp = None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def read_stream_bounded(stream, limit: int) -> bytes:
    """At most ``limit`` bytes of a binary stream that may offer only ``readinto`` (a decompressing one): the caller
    asks for ``limit + 1`` to tell "exactly the limit" from "more"."""
    out = bytearray()
    buf = bytearray(min(limit, 1 << 20))
    while len(out) < limit:
        view = memoryview(buf)[:min(len(buf), limit - len(out))]
        n = stream.readinto(view)
        if not n:
            break
        out += view[:n]
    return bytes(out)

