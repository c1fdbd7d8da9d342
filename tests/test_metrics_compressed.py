"""Compressed pages and recordings (``--metrics-file x.om.gz``): ``analyze`` and ``check`` decompress them as
``diff`` does, bounded as plain files are, and a broken stream is one error line, exit 3."""

import gzip
import json

import pytest

from conftest import FIXTURES, run_kvdiag

RECORDING = FIXTURES / "lab" / "overload_000" / "recording.om.gz"


def _json(*args):
    r = run_kvdiag("analyze", *args, "--format", "json")
    return r, json.loads(r.out)


def test_a_gzip_recording_reads_as_its_plain_copy(tmp_path):
    plain = tmp_path / "recording.om"
    plain.write_bytes(gzip.decompress(RECORDING.read_bytes()))
    r_gz, gz = _json("--metrics-file", str(RECORDING))
    r_plain, pl = _json("--metrics-file", str(plain))
    assert r_gz.code == r_plain.code == 2, r_gz.err
    assert gz["verdict"] == pl["verdict"]
    assert [f["rule_id"] for f in gz["findings"] if f["status"] == "fires"] == \
        [f["rule_id"] for f in pl["findings"] if f["status"] == "fires"]
    assert gz["inputs"][0]["name"] == str(RECORDING) and gz["inputs"][0]["records"] == pl["inputs"][0]["records"] > 1


def test_check_reads_a_gzip_recording():
    r = run_kvdiag("check", "--metrics-file", str(RECORDING))
    assert r.code == 2 and r.out.startswith("KVDIAG CRITICAL"), (r.out, r.err)


@pytest.mark.parametrize("cut", [20, 1000])
def test_a_cut_gzip_stream_is_one_error_line(tmp_path, cut):
    bad = tmp_path / "cut.om.gz"
    bad.write_bytes(RECORDING.read_bytes()[:cut])
    r = run_kvdiag("analyze", "--metrics-file", str(bad))
    assert r.code == 3
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in r.err
