"""Every shared real case (fixtures/logs/real/<case>/evidence.log, copied from shared/fixtures/real with its
expected.json and source.md) parses, and the facts its expected.json lists that are printed in its log come out
of the log collector with the right values, in base units."""

from __future__ import annotations

import json
import re

import pytest

from conftest import FIXTURES
from kvdiag.bundle import Bundle
from kvdiag.collect.logs import read_logs

GIB = 2**30
MIB = 2**20
CASES = sorted(p for p in (FIXTURES / "logs" / "real").iterdir() if (p / "evidence.log").exists())

# expected.json fact → (signal, scale to base units, how the signal's values are compared)
FACTS = {
    "weights_gib": ("weights_bytes", GIB, "any"), "weights_gb": ("weights_bytes", GIB, "any"),
    "gpu_total_gib": ("gpu_total_bytes", GIB, "any"),
    "gpu_memory_utilization": ("gpu_memory_utilization", 1, "any"),
    "max_model_len": ("max_model_len", 1, "any"),
    "num_gpu_blocks": ("num_gpu_blocks", 1, "any"), "num_gpu_blocks_before": ("num_gpu_blocks", 1, "any"),
    "num_cpu_blocks": ("num_cpu_blocks", 1, "any"),
    "block_size": ("block_size", 1, "any"), "attention_block_size_tokens": ("block_size", 1, "any"),
    "kv_cache_gib": ("kv_cache_memory_bytes", GIB, "any"),
    "run3_available_kv_cache_gib": ("kv_cache_memory_bytes", GIB, "any"),
    "kv_capacity_tokens": ("kv_cache_size_tokens", 1, "any"),
    "kv_capacity_tokens_before": ("kv_cache_size_tokens", 1, "any"),
    "logged_gpu_kv_cache_size_tokens": ("kv_cache_size_tokens", 1, "any"),
    "max_concurrency": ("max_concurrency", 1, "any"),
    "peak_torch_gib": ("peak_torch_memory_bytes", GIB, "any"), "activation_peak_gib": ("activation_peak_bytes", GIB, "any"),
    "non_torch_gib": ("non_torch_bytes", GIB, "any"),
    "budget_gib": ("gpu_budget_bytes", GIB, "any"),
    "free_at_startup_gib": ("gpu_free_at_startup_bytes", GIB, "any"),
    "cudagraph_gib": ("cudagraph_bytes", GIB, "any"),
    "cudagraph_estimate_gib": ("cudagraph_estimate_bytes", GIB, "any"),
    "oom_tried_alloc_mib": ("cuda_oom", MIB, "any"), "oom_tried_alloc_gib": ("cuda_oom", GIB, "any"),
    "oom_free_mib": ("oom_free_bytes", MIB, "any"), "oom_free_gib": ("oom_free_bytes", GIB, "any"),
    "torch_allocated_gib": ("oom_torch_allocated_bytes", GIB, "any"),
    "process_in_use_gib": ("oom_process_in_use_bytes", GIB, "any"),
    "peak_gpu_kv_usage_pct": ("kv_cache_usage", 0.01, "max"), "kv_usage_max_pct": ("kv_cache_usage", 0.01, "max"),
    "kv_usage_min_pct": ("kv_cache_usage", 0.01, "min"),
    "kv_usage_pct_one_request_before": ("kv_cache_usage", 0.01, "any"),
    "blocks_used_one_request_before": ("num_blocks_used", 1, "any"),
    "peak_cpu_kv_usage_pct": ("cpu_cache_usage", 0.01, "max"),
    "max_swapped_reqs": ("num_requests_swapped", 1, "max"),
    "pending_reqs": ("num_requests_waiting", 1, "any"),
    "running_max": ("num_requests_running", 1, "max"), "waiting_max": ("num_requests_waiting", 1, "max"),
    "total_num_cumulative_preemption": ("num_preemptions", 1, "max"),
    "kv_usage_pct_series": ("kv_cache_usage", 0.01, "series"),
    "running_reqs_series": ("num_requests_running", 1, "series"),
    "waiting_reqs_series": ("num_requests_waiting", 1, "series"),
    "prefix_cache_hit_rate_pct": ("prefix_cache_hit_rate", 0.01, "any"),
    "max_num_seqs": ("max_num_seqs", 1, "any"), "mamba_cache_blocks": ("mamba_cache_blocks", 1, "any"),
    "tensor_parallel_size": ("tensor_parallel_size", 1, "any"),
}


# facts whose bare number is too common: they count as printed only next to their name
CONTEXT = {"block_size": r"block[_ ]size\W{1,4}", "tensor_parallel_size": r"tensor[_-]parallel[_-]size\W{1,4}",
           "max_num_seqs": r"max[_-]num[_-]seqs\W{1,4}", "gpu_memory_utilization": r"gpu[_-]memory[_-]utilization\W{1,4}",
           "process_in_use_gib": r"this process has ", "num_cpu_blocks": r"CPU blocks: "}


def printed(fact: str, value, log: str) -> bool:
    """Is this number printed in the log's vLLM lines (editorial '#' lines do not count), as written, with
    thousands separators, or with one or two decimals (and next to its name for the facts in CONTEXT)?"""
    text = "\n".join(line for line in log.splitlines() if not line.startswith("#"))
    vals = value if isinstance(value, list) else [value]
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        forms = {str(v), f"{v:,}", f"{v:.2f}", f"{v:.1f}"} if isinstance(v, float) else {str(v), f"{v:,}"}
        pre = CONTEXT.get(fact, r"(?<![\d.])")
        if not any(re.search(pre + re.escape(f) + r"(?![\d])", text) for f in forms):
            return False
    return True


def subsequence(expected: list[float], got: list[float]) -> bool:
    it = iter(got)
    return all(any(g == pytest.approx(e, rel=1e-3) for g in it) for e in expected)


def checked_facts(case) -> list[tuple[str, object]]:
    facts = json.loads((case / "expected.json").read_text()).get("facts", {})
    log = (case / "evidence.log").read_text(errors="replace")
    return [(k, v) for k, v in facts.items() if k in FACTS and printed(k, v, log)]


@pytest.mark.parametrize("case", CASES, ids=[c.name[:3] for c in CASES])
def test_real_case_facts(case):
    bundle = Bundle()
    info = read_logs(bundle, [str(case / "evidence.log")], year=2025, progress=False)[0]
    assert info.records > 0
    wrong = []
    for fact, expected in checked_facts(case):
        signal, scale, how = FACTS[fact]
        got = bundle.signal(signal)["value"].dropna().tolist()
        if how == "series":
            ok = subsequence([v * scale for v in expected], got)
        elif not got:
            ok = False
        elif how == "max":
            ok = max(got) == pytest.approx(expected * scale, rel=1e-3)
        elif how == "min":
            ok = min(got) == pytest.approx(expected * scale, rel=1e-3)
        else:
            ok = any(g == pytest.approx(expected * scale, rel=1e-3) for g in got)
        if not ok:
            wrong.append(f"{fact}={expected!r} → {signal} {got[:8]}")
    assert not wrong, wrong


def test_real_cases_cover_the_facts():
    """The parametrized test above must check something: most printed facts of the 21 cases."""
    assert len(CASES) >= 21
    total = sum(len(checked_facts(c)) for c in CASES)
    assert total >= 60, total


@pytest.mark.parametrize("case, phase", [("003", "sampler"), ("005", "kv_alloc"), ("014", "encoder"),
                                         ("018", "encoder"), ("019", "load"), ("021", "load"),
                                         ("031", "runtime")])
def test_real_oom_phase(case, phase):
    """The OOM classes are told apart by the raising traceback frame (or, without frames, by what ran)."""
    path = next(c for c in CASES if c.name.startswith(case)) / "evidence.log"
    bundle = Bundle()
    read_logs(bundle, [str(path)], year=2025, progress=False)
    assert phase in bundle.signal("cuda_oom")["text"].tolist()
