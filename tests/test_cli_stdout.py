"""Standard output that refuses the report (kvdiag.cli._main, ``_stdout_failed``): ``> /dev/full`` is one line on
stderr naming standard output and exit 3, for ``check`` too — never a traceback, never the verdict's code as if the
report had been written (breaker pass, session 7: ``check > /dev/full`` printed a 47-line traceback and exited 1)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

LOG = FIXTURES / "incidents" / "029-mtp-benchmark-queueing-kv-95pct-ttft-214s" / "vllm.log"


@pytest.mark.parametrize("args", [["check", "--log", str(LOG)], ["analyze", "--log", str(LOG), "--format", "json"],
                                  ["analyze", "--log", str(LOG)]])
def test_a_full_stdout_is_one_line_and_3(args):
    assert os.path.exists("/dev/full"), "Linux's /dev/full is the full disk this test writes to"
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "kvdiag", *args], stdout=full, stderr=subprocess.PIPE, text=True,
                           cwd=ROOT, timeout=120)
    assert p.returncode == 3, (p.returncode, p.stderr[-600:])
    assert p.stderr.strip() == "kvdiag: error: cannot write the report to standard output: No space left on device", \
        p.stderr[-600:]
