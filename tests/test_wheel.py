"""The built wheel carries rules/ and the vLLM message catalogue inside the package: install it into a fresh venv
and list the rules.

Works from inside a venv and outside one: the fresh venv sees the running interpreter's dependencies through a
``.pth`` file (:mod:`freshvenv`), not through ``--system-site-packages`` (which, from a venv, is the base
interpreter's)."""

from __future__ import annotations

import subprocess
import sys

from conftest import FIXTURES, ROOT
from freshvenv import make_venv


def test_wheel_installs_and_lists_rules(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    wheel = next(dist.glob("kvdiag-*.whl"))
    venv = tmp_path / "venv"
    # the running interpreter's site-packages only provide the dependencies (pandas, click, ...); kvdiag itself
    # comes from the wheel
    py = make_venv(venv)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True, capture_output=True, timeout=600)
    where = subprocess.run([str(py), "-c", "import kvdiag, kvdiag.engine.model as m; "
                            "print(kvdiag.__file__); print(m.builtin_rules_dir())"],
                           check=True, capture_output=True, text=True, cwd=tmp_path).stdout.split()
    assert where[0].startswith(str(venv)), where
    assert where[1].startswith(str(venv)) and where[1].endswith("kvdiag/rules"), where
    # the catalogue of vLLM messages ships as package data and compiles from the installed copy
    cat = subprocess.run([str(py), "-c", "from kvdiag import catalog; c = catalog.load(); "
                          "print(catalog.DATA_PATH); print(len(c.data['versions']), len(c.entries))"],
                         check=True, capture_output=True, text=True, cwd=tmp_path).stdout.split()
    assert cat[0].startswith(str(venv)), cat
    assert int(cat[1]) >= 25 and int(cat[2]) > 0, cat
    out = subprocess.run([str(venv / "bin" / "kvdiag"), "rules", "list"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    listed = {line.split()[0] for line in out.stdout.splitlines()}
    shipped = {p.name.split("-")[0] for p in (ROOT / "rules").rglob("*.yaml") if p.parent.name != "cases"}
    assert shipped and listed == shipped
    case = next((FIXTURES / "incidents").glob("029-*"))
    res = subprocess.run([str(venv / "bin" / "kvdiag"), "analyze", "--log", str(case / "vllm.log")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and res.stdout.startswith("CRITICAL: capacity_pressure"), res.stdout + res.stderr
