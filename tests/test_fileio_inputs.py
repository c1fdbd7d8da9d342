"""``--output`` never overwrites an input (kvdiag.fileio.check_output_target): also when the input was given as a
folder or a glob that holds the file (breaker pass, session 7: a saved page inside ``--metrics-file DIR`` was
replaced by the report)."""

from __future__ import annotations

import shutil

from conftest import FIXTURES, run_kvdiag

SERIES = FIXTURES / "series" / "vllm033_quiet"


def test_output_inside_an_input_folder_or_glob_is_refused(tmp_path):
    d = tmp_path / "sq"
    shutil.copytree(SERIES, d)
    page = sorted((d / "metrics").glob("*.prom"))[0]
    before = page.read_bytes()
    for src in (str(d / "metrics"), str(d / "metrics" / "*.prom")):
        res = run_kvdiag("analyze", "--metrics-file", src, "--output", str(page))
        assert res.code == 3, (src, res.code, res.err[-300:])
        assert "is also an input" in res.err and "never overwrites its input" in res.err, res.err
        assert page.read_bytes() == before


def test_output_beside_the_inputs_is_written(tmp_path):
    d = tmp_path / "sq"
    shutil.copytree(SERIES, d)
    out = tmp_path / "report.txt"
    res = run_kvdiag("analyze", "--metrics-file", str(d / "metrics"), "--output", str(out))
    assert res.code in (0, 1, 2), res.err[-300:]
    assert out.read_text().strip()
