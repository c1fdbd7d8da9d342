"""Install as a tool (issue 30): ``uv tool install .`` and ``pipx install .`` from a clone give a working ``kvdiag``
in an environment of its own, from the package index, without matplotlib (the ``kvdiag[html]`` extra): every format
but html works, and ``--format html`` is one line naming the extra, exit 3."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT

LOG = next((FIXTURES / "incidents").glob("029-*")) / "vllm.log"
BIN = Path(sys.executable).parent
# the tool must run its own installed copy: no PYTHONPATH pointing at this checkout
CLEAN = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _clone(tmp: Path) -> Path:
    """The checkout's files as a clone has them (tracked and new, not ignored), without build leftovers."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    dst = tmp / "kvdiag-clone"
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
    return dst


def _check_tool(kvdiag: Path, tmp: Path) -> None:
    run = lambda *a: subprocess.run([str(kvdiag), *a], capture_output=True, text=True, timeout=300, cwd=tmp,  # noqa
                                    env=CLEAN)
    res = run("analyze", "--log", str(LOG))
    assert res.returncode == 2 and res.stdout.startswith("CRITICAL: capacity_pressure"), res.stderr
    for fmt in ("json", "markdown", "text"):
        res = run("analyze", "--log", str(LOG), "--format", fmt)
        assert res.returncode == 2 and res.stdout, (fmt, res.stderr)
    res = run("analyze", "--log", str(LOG), "--format", "html")
    assert res.returncode == 3 and res.stdout == "", res.stdout[:200]
    assert len(res.stderr.strip().splitlines()) == 1 and "kvdiag[html]" in res.stderr, res.stderr
    res = run("dashboards", "export")
    assert res.returncode == 0 and '"uid": "kvdiag-vllm-kv"' in res.stdout, res.stderr
    assert run("watch", "--help").returncode == 0
    python = kvdiag.resolve().parent / "python"
    where = subprocess.run([str(python), "-c", "import kvdiag; print(kvdiag.__file__)"], capture_output=True,
                           text=True, timeout=60, env=CLEAN, cwd=tmp).stdout
    assert str(ROOT) not in where and str(tmp) in where, where  # the installed copy, not this checkout
    has = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('matplotlib') is None)"],
                         capture_output=True, text=True, timeout=60, env=CLEAN, cwd=tmp)
    assert has.stdout.strip() == "True", "matplotlib came with the base install"


def test_uv_tool_install_from_a_clone(tmp_path):
    uv = shutil.which("uv", path=str(BIN)) or shutil.which("uv")
    assert uv, "uv is a test dependency (pip install -e '.[test]')"
    clone = _clone(tmp_path)
    env = {**CLEAN, "UV_TOOL_DIR": str(tmp_path / "tools"), "UV_TOOL_BIN_DIR": str(tmp_path / "bin"),
           "UV_PYTHON_DOWNLOADS": "never"}
    res = subprocess.run([uv, "tool", "install", "--python", sys.executable, str(clone)], capture_output=True,
                         text=True, timeout=900, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    _check_tool(tmp_path / "bin" / "kvdiag", tmp_path)


def test_pipx_install_from_a_clone(tmp_path):
    clone = _clone(tmp_path)
    env = {**CLEAN, "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin"),
           "PIPX_MAN_DIR": str(tmp_path / "man")}
    res = subprocess.run([sys.executable, "-m", "pipx", "install", "--python", sys.executable, str(clone)],
                         capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    _check_tool(tmp_path / "bin" / "kvdiag", tmp_path)
