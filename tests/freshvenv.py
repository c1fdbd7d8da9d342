"""A fresh virtual environment for tests that install kvdiag the way a user does.

The venv is made without ``--system-site-packages``: from inside a venv that flag inherits the *base*
interpreter's packages, not the running venv's, so kvdiag's dependencies (pandas, click, ...) would be missing.
Instead a ``.pth`` file in the new venv's site-packages lists the site-packages folders of the interpreter that
runs the tests (a venv's, the system's, the user's), so the new venv sees the same dependencies without
downloading them, inside a venv or outside one. Its own site-packages come first on ``sys.path`` (``site`` appends
``.pth`` entries after the folder holding the file), so a kvdiag installed into it wins over one the running
interpreter has; ``.pth`` files inside the listed folders are not executed (an editable install there stays off).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def dependency_dirs() -> list[str]:
    """The running interpreter's site-packages / dist-packages folders, in ``sys.path`` order."""
    out = []
    for p in sys.path:
        if p and Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir() and p not in out:
            out.append(p)
    return out


def share_dependencies(venv: Path) -> Path:
    """Write the ``.pth`` file that lets ``venv`` import the running interpreter's packages; returns its path."""
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    pth = Path(purelib) / "_kvdiag_test_dependencies.pth"
    pth.write_text("".join(f"{d}\n" for d in dependency_dirs()), encoding="utf-8")
    return pth


def make_venv(venv: Path) -> Path:
    """``python -m venv VENV`` with the running interpreter (same version), then :func:`share_dependencies`.
    Returns the venv's python."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    share_dependencies(venv)
    return venv / "bin" / "python"


def python3_on_path(tmp: Path) -> dict:
    """An environment whose ``python3`` is the running interpreter's version (a folder with a ``python3`` link
    first on PATH), with no venv active: what a user's shell has before the README's commands."""
    bindir = tmp / "bin-python3"
    bindir.mkdir(exist_ok=True)
    link = bindir / "python3"
    if not link.exists():
        os.symlink(getattr(sys, "_base_executable", sys.executable), link)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    return env
