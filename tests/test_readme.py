"""The README's two commands, as a new user meets them (issue 11, "Must show" 1).

* ``.ci/run`` runs the README's virtual-environment line, its "Try it" command and its "Run the tests" command
  verbatim, in that order, in a venv it creates (so a step that only works outside a venv fails CI). The test run
  itself is left to ``.ci/run``: the suite does not run itself.
* The "Try it" command, verbatim, in a fresh venv made by the README's own line, on a fresh copy of the
  repository, exits with the code and verdict the README promises.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from conftest import ROOT
from freshvenv import python3_on_path, share_dependencies

README = (ROOT / "README.md").read_text(encoding="utf-8")
CI_RUN = ROOT / ".ci" / "run"


def section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}.*?$(.*?)(?=^## )", README, re.M | re.S)
    assert m, f"README has no section '## {title}'"
    return m.group(1)


def sh_block(title: str) -> str:
    """The one line of the first ```sh block of a README section."""
    m = re.search(r"```sh\n(.*?)\n```", section(title), re.S)
    assert m, f"README section '{title}' has no sh block"
    lines = [ln for ln in m.group(1).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def venv_line() -> str:
    m = re.search(r"`(python3 -m venv [^`]+)`", section("Try it"))
    assert m, "README's 'Try it' does not say how to make a virtual environment"
    return m.group(1)


def promised() -> tuple[str, int]:
    m = re.search(r"the verdict is `(\w+)`, exit code (\d+)", section("Try it"))
    assert m, "README's 'Try it' does not say which verdict and exit code to expect"
    return m.group(1), int(m.group(2))


def test_ci_runs_the_readme_commands_verbatim_in_a_fresh_venv():
    script = CI_RUN.read_text(encoding="utf-8")
    code = [ln for ln in script.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    wanted = [venv_line(), sh_block("Try it"), sh_block("Run the tests")]
    where = []
    for line in wanted:
        assert line in code, f".ci/run does not run the README's line verbatim: {line}"
        where.append(code.index(line))
    assert where == sorted(where), "the venv first, then 'Try it', then the tests"
    before = "\n".join(code[:where[0]])
    assert re.search(r"^\s*cd \"?\$work\"?\s*$", before, re.M) and "mktemp -d" in before, \
        "the venv is made in a fresh temporary folder, not in the checkout (where an old .venv may sit)"
    assert "--system-site-packages" not in script
    after = "\n".join(code[where[0]:])
    assert "sys.prefix != sys.base_prefix" in after, ".ci/run checks that python3 is the venv's"
    # the documented exit code of "Try it" is checked, and pytest's 'no tests collected' (5) is a failure
    assert f'"$rc" -ne {promised()[1]}' in after and '"$rc" -eq 5' in after
    subprocess.run(["bash", "-n", str(CI_RUN)], check=True, timeout=30)


def test_try_it_in_a_fresh_venv_on_a_fresh_copy(tmp_path):
    clone = tmp_path / "kvdiag"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"))
    env = python3_on_path(tmp_path)
    made = subprocess.run(["bash", "-ec", venv_line()], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr
    share_dependencies(clone / ".venv")  # pandas & co. from the running interpreter instead of a download
    res = subprocess.run(["bash", "-c", f". .venv/bin/activate && {sh_block('Try it')}"], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=600)
    verdict, code = promised()
    assert res.returncode == code, res.stdout[-2000:] + res.stderr[-2000:]
    headline = re.search(r"^(?:OK|WARNING|CRITICAL|UNKNOWN): .*$", res.stdout, re.M)  # after pip's own output
    assert headline and headline.group(0).startswith(f"CRITICAL: {verdict} "), res.stdout[-3000:]
    # it is the copy's kvdiag, installed into the fresh venv, that ran
    where = subprocess.run(["bash", "-c", ". .venv/bin/activate && command -v kvdiag && "
                            "python3 -c 'import kvdiag; print(kvdiag.__file__)'"],
                           cwd=clone, env=env, capture_output=True, text=True, timeout=60).stdout.split()
    assert where[0] == str(clone / ".venv" / "bin" / "kvdiag"), where
    assert where[1] == str(clone / "kvdiag" / "__init__.py"), where
