"""Files: a bounded read of a regular file (over :func:`kvdiag.fileio.read_bounded`), UTF-8 text with the byte that
is not, a bounded binary stream for the log reader, and the small files the HTTP options name (a bearer token, a CA
bundle). Every other module of :mod:`kvdiag.inputs` reads its files here."""

from __future__ import annotations

import os
import stat

from ..errors import InputError
from ..fileio import MIB, check_output_target, read_bounded  # noqa: F401 - check_output_target re-exported

MAX_TOKEN_BYTES = 64 * 1024
MAX_CA_BYTES = 16 * MIB


def read_bytes(path: str, limit: int, what: str, label: str = "") -> bytes:
    """The whole regular file ``path`` of at most ``limit`` bytes (see :func:`kvdiag.fileio.read_bounded`)."""
    return read_bounded(str(path), limit, what, label=label)


def read_text(path: str, limit: int, what: str, label: str = "") -> str:
    """:func:`read_bytes` decoded as UTF-8; a BOM is dropped.

    Raises:
        InputError: as :func:`read_bytes`, or ``path: not UTF-8 text (byte N): expected …``.
    """
    raw = read_bytes(path, limit, what, label)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        name = f"{label} {path}" if label else str(path)
        raise InputError(f"{name}: not UTF-8 text (byte {exc.start:,}): expected {what}") from None


def open_binary(path: str):
    """A binary file object of ``path`` for a streaming reader (the log reader: a log may be larger than memory).

    Raises:
        OSError: as ``open`` (the caller words the message).
    """
    return open(path, "rb")  # noqa: SIM115 - the caller closes it


def regular_file(path: str, what: str, label: str = "") -> None:
    """Refuse ``path`` unless it is an existing regular file (for inputs a library opens by name).

    Raises:
        InputError: missing, a folder, a device or a pipe.
    """
    name = f"{label} {path}" if label else str(path)
    try:
        st = os.stat(path)
    except OSError:
        raise InputError(f"{name}: no such file, expected {what}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{name}: {'is a folder' if stat.S_ISDIR(st.st_mode) else 'not a regular file'}, "
                         f"expected {what}")


def bearer_token(path: str) -> str:
    """The token of ``--bearer-token-file``: one line of printable ASCII, never shown in a message.

    Raises:
        InputError: unreadable, larger than 64 KiB, not UTF-8, empty, or holding a control character.
    """
    raw = read_bytes(path, MAX_TOKEN_BYTES, "a bearer token", label="--bearer-token-file")
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InputError(f"--bearer-token-file {path}: not UTF-8 text, expected a bearer token") from None
    if not token:
        raise InputError(f"--bearer-token-file {path}: empty, expected a bearer token")
    problem = header_value_problem(token)
    if problem:
        raise InputError(f"--bearer-token-file {path}: the token {problem}, expected one line of printable ASCII "
                         "(token not shown)")
    return token


def header_value_problem(value: str) -> str:
    """Why ``value`` cannot be sent as an HTTP header value ('' when it can)."""
    if any(c in value for c in "\r\n"):
        return "has a line break"
    if any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in value):
        return "has a control character"
    if any(ord(c) > 255 for c in value):
        return "has a character outside latin-1 (HTTP headers cannot carry it)"
    return ""


def ca_bundle(path: str) -> str:
    """``--ca-cert``: a regular file of PEM certificates (checked here; the TLS library reads it by name).

    Raises:
        InputError: missing, not a regular file, larger than 16 MiB, or holding no PEM certificate.
    """
    raw = read_bytes(path, MAX_CA_BYTES, "a PEM CA bundle", label="--ca-cert")
    if b"-----BEGIN CERTIFICATE-----" not in raw:
        raise InputError(f"--ca-cert {path}: no '-----BEGIN CERTIFICATE-----' block, expected a PEM CA bundle")
    return str(path)


def folder_files(folders, limit: int = 10_000) -> list[str]:
    """The files under input folders (``--rules DIR``, a lab case, a series), at most ``limit``: the inputs an
    output option must not name (:func:`kvdiag.fileio.check_output_target`)."""
    out: list[str] = []
    for folder in folders or ():
        if not folder or not os.path.isdir(folder):
            continue
        for dirpath, _dirs, files in os.walk(folder):
            out += [os.path.join(dirpath, f) for f in files]
            if len(out) >= limit:
                return out[:limit]
    return out
