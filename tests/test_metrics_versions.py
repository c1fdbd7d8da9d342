"""The same incident exposed with V0 names, V1 0.9-0.11 names and 0.33 names (and the vllm_ / ray_vllm:
spellings) gives the same verdict and the same numbers.

The incident is the real vLLM 0.33 run in fixtures/series/vllm033_pressure (usage pinned at 1.0,
preemptions, a waiting queue). Its pages are rewritten into the older expositions following
reference §1.2/§1.3: V0 (0.6-0.8) has ``gpu_cache_usage_perc``, no ``engine`` label, no prefix-cache
counters but the cumulative ``gpu_prefix_cache_hit_rate`` gauge; V1 0.9-0.10 has both usage gauges and
both prefix-cache counter pairs with the same values.
"""

from __future__ import annotations

import re

import pytest

from conftest import FIXTURES

RUN = FIXTURES / "series" / "vllm033_pressure" / "metrics"
PAGES = sorted(RUN.glob("*.prom"))[::3]  # every third page: the same window, a faster test


def v033(text: str) -> str:
    return text


def v0(text: str) -> str:
    """0.33 page → a V0 0.6-era page."""
    out, hits, queries = [], 0.0, 0.0
    for line in text.splitlines():
        m = re.match(r"vllm:prefix_cache_(hits|queries)_total\{.*\} (\S+)$", line)
        if m:
            if m.group(1) == "hits":
                hits = float(m.group(2))
            else:
                queries = float(m.group(2))
            continue
        if "prefix_cache" in line or "waiting_by_reason" in line:
            continue
        line = line.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        line = re.sub(r'engine="0",?', "", line).replace(",}", "}").replace("{}", "")
        out.append(line)
    out += ["# HELP vllm:gpu_prefix_cache_hit_rate GPU prefix cache block hit rate.",
            "# TYPE vllm:gpu_prefix_cache_hit_rate gauge",
            f'vllm:gpu_prefix_cache_hit_rate{{model_name="Qwen/Qwen2.5-7B-Instruct"}} {hits / queries if queries else -1}']
    return "\n".join(out) + "\n"


def v010(text: str) -> str:
    """0.33 page → a V1 0.10 page: old and new names side by side, same values."""
    out = []
    for line in text.splitlines():
        out.append(line)
        for new, old in (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
                         ("vllm:prefix_cache_", "vllm:gpu_prefix_cache_")):
            if new in line and "external" not in line:
                out.append(line.replace(new, old))
    return "\n".join(out) + "\n"


def underscore(text: str) -> str:
    return text.replace("vllm:", "vllm_")


def ray(text: str) -> str:
    return text.replace("vllm:", "ray_vllm:")


def _run(kvdiag, tmp_path, rewrite, name):
    d = tmp_path / name
    d.mkdir()
    args = []
    for p in PAGES:
        out = d / p.name
        out.write_text(rewrite(p.read_text(encoding="utf-8")), encoding="utf-8")
        args += ["--metrics-file", str(out)]
    res = kvdiag("analyze", *args, "--format", "json")
    report = res.json()
    cap = next(f for f in report["findings"] if f["class"] == "capacity_pressure")
    ev = {(e["signal"], e["agg"]): e["value"] for e in cap["evidence"]}
    return report["verdict"]["primary"], res.code, ev


@pytest.mark.parametrize("rewrite", [v0, v010, underscore, ray], ids=lambda f: f.__name__)
def test_same_incident_same_verdict_across_versions_and_spellings(kvdiag, tmp_path, rewrite):
    base = _run(kvdiag, tmp_path, v033, "v033")
    other = _run(kvdiag, tmp_path, rewrite, rewrite.__name__)
    assert base[0] == "capacity_pressure" and base[1] == 2
    assert other[0] == base[0] and other[1] == base[1]
    for key in (("kv_cache_usage", "max"), ("num_requests_waiting", "max"), ("num_preemptions", "increase")):
        assert other[2][key] == pytest.approx(base[2][key]), key


def test_v010_prefix_counters_are_not_doubled(tmp_path):
    from kvdiag.bundle import Bundle
    from kvdiag.collect.metrics import read_metrics_file
    from kvdiag.derive.windows import derive_windows

    rates = []
    for rewrite in (v033, v010):
        b = Bundle()
        for p in PAGES:
            out = tmp_path / f"{rewrite.__name__}-{p.name}"
            out.write_text(rewrite(p.read_text(encoding="utf-8")), encoding="utf-8")
            read_metrics_file(b, str(out))
        derive_windows(b)
        rates.append((b.signal("prefix_cache_queries")["value"].max(),
                      b.signal("prefix_cache_hit_rate_window")["value"].tolist()))
    assert rates[0] == rates[1]
    assert rates[0][0] > 0
