"""--metrics-file as users keep saved pages (issue 30): several files after one flag, a folder, a glob, a lab case
folder, and a saved series' times.csv, whose times give untimed pages a timeline."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from conftest import FIXTURES, run_kvdiag

SERIES = FIXTURES / "series" / "vllm033_pressure"


def _times() -> list[float]:
    with open(SERIES / "times.csv", newline="") as fh:
        return [float(r["unix_time"]) for r in csv.DictReader(fh)]


def _iso(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(int(t), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _judged(*values: str) -> dict:
    res = run_kvdiag("analyze", "--metrics-file", *values, "--format", "json")
    assert res.code == 2, res.err  # the pressure series is critical
    return res.json()


def test_several_pages_after_one_flag_take_times_csv():
    pages = sorted(str(p) for p in (SERIES / "metrics").glob("*.prom"))
    assert len(pages) == 60
    rep = _judged(*pages)
    assert len(rep["inputs"]) == 60
    times = _times()
    assert rep["window"] == {"start": _iso(times[0]), "end": _iso(times[-1])}
    assert rep["verdict"]["primary"] == "capacity_pressure"
    assert "times.csv" in rep["inputs"][7]["notes"][0] and _iso(times[7]) in rep["inputs"][7]["notes"][0]


def test_folder_glob_case_and_times_csv_read_the_same_pages():
    want = _judged(str(SERIES / "metrics"))
    assert len(want["inputs"]) == 60
    for value in (str(SERIES / "metrics" / "*.prom"), str(SERIES), str(SERIES / "times.csv")):
        got = _judged(value)
        assert [i["name"] for i in got["inputs"]] == [i["name"] for i in want["inputs"]], value
        assert got["window"] == want["window"] and got["verdict"] == want["verdict"], value


def test_without_times_csv_the_pages_have_no_timeline(tmp_path):
    shutil.copytree(SERIES / "metrics", tmp_path / "metrics")
    res = run_kvdiag("analyze", "--metrics-file", str(tmp_path / "metrics"), "--format", "json")
    rep = res.json()
    assert rep["window"]["start"] is None or rep["window"]["start"] != _iso(_times()[0])
    # with the times.csv beside the folder, the same pages are a 15-minute series
    shutil.copy(SERIES / "times.csv", tmp_path / "times.csv")
    rep2 = run_kvdiag("analyze", "--metrics-file", str(tmp_path / "metrics"), "--format", "json").json()
    assert rep2["window"]["start"] == _iso(_times()[0])


def test_bad_sets_are_one_line_exit_3(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "case" / "metrics").mkdir(parents=True)
    shutil.copy(SERIES / "metrics" / "0000.prom", tmp_path / "case" / "metrics")
    (tmp_path / "case" / "times.csv").write_text("sample,unix_time\n0,1778491854300\n")
    for args, needle in (([str(tmp_path / "empty")], "no saved pages"),
                         ([str(tmp_path / "nothing-*.prom")], "matches no file"),
                         ([str(tmp_path / "case" / "metrics")], "Unix seconds")):
        res = run_kvdiag("analyze", "--metrics-file", *args)
        assert res.code == 3, (args, res.err)
        assert needle in res.err and "Traceback" not in res.err
        assert len(res.err.strip().splitlines()) == 1, res.err


def test_greedy_values_stop_at_the_next_option():
    res = run_kvdiag("analyze", "--metrics-file", str(SERIES / "metrics" / "0000.prom"),
                     str(SERIES / "metrics" / "0059.prom"), "--format", "json")
    assert res.code in (0, 1, 2), res.err
    assert [Path(i["name"]).name for i in res.json()["inputs"]] == ["0000.prom", "0059.prom"]
