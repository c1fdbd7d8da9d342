"""Issue 11, must show 4: every remedy of every firing finding, over every incident report, either gives a number
from the data or names why none can be given.

The check, precisely (:func:`gives_a_number`, :func:`names_why_not`):

* **a number**: after removing (a) words that merely contain digits (``fp8``, ``V0``, ``FLAG=0``, ``--kv-cache-memory``), (b) ``e.g. …`` examples up to the next ``)``, ``:`` or ``;`` (an
  example is not this server's value) and (c) the rule-of-thumb constants a template hard-codes for every input
  (:data:`GENERIC`), at least one numeric literal is left (``0.93``, ``23,648``, ``2 replicas``, ``16 tokens``);
* **why not**: the remedy says why the number cannot be known from the input, in one of the phrasings of
  :data:`WHY_NOT` (``… not in the input``, ``pass --model-config for …``).

The inputs: every ``fixtures/incidents/*/vllm.log`` and the vLLM 0.33 runs (``fixtures/series/*``: the log alone, the
log with all 60 /metrics pages; ``fixtures/metrics/vllm033_*.prom`` alone), each in JSON.
"""

from __future__ import annotations

import re

import pytest

from conftest import FIXTURES, incident_cases

#: Constants some templates write for every input: they are facts of vLLM, not this server's numbers.
GENERIC = (r"about 2x the tokens", r"\b4-bit\b", r"0\.05 margin", r"1% to spare", r"\b2x\b")
#: Phrasings that say why a remedy has no number (each names the missing input or the option that would give it).
WHY_NOT = (r"not in the input", r"the input does not (say|show|give)", r"pass --[a-z][a-z-]+ (for|to)\b",
           r"no number can be given")
_IDENT = re.compile(r"\w+=\d+|[A-Za-z_-]*[A-Za-z_][A-Za-z_-]*\d[\w-]*|\d+(?=[A-Za-z_])\w*|--[\w-]+")
_EXAMPLE = re.compile(r"\be\.g\.[^):;]*")
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def gives_a_number(text: str) -> bool:
    """Does ``text`` hold a number of this input (see the module docstring)?"""
    t = _EXAMPLE.sub(" ", text)
    for g in GENERIC:
        t = re.sub(g, " ", t)
    t = _IDENT.sub(" ", t)
    return bool(_NUMBER.search(t))


def names_why_not(text: str) -> bool:
    return any(re.search(w, text) for w in WHY_NOT)


def _inputs() -> list[tuple[str, list[str]]]:
    out = [(c.name[:3], ["--log", str(c / "vllm.log")])
           for c in incident_cases()]  # bundled + the tuned corpus (never held-out)
    for run in sorted((FIXTURES / "series").glob("vllm033_*")):
        out.append((f"{run.name}-log", ["--log", str(run / "vllm.log")]))
        pages = [a for p in sorted((run / "metrics").glob("*.prom")) for a in ("--metrics-file", str(p))]
        out.append((f"{run.name}-log+metrics", ["--log", str(run / "vllm.log"), *pages]))
    for page in sorted((FIXTURES / "metrics").glob("vllm033_*.prom")):
        out.append((page.stem, ["--metrics-file", str(page)]))
    return out


INPUTS = _inputs()


def test_the_check_itself():
    """The check tells a number of this input from digits that are names, examples or generic constants."""
    assert gives_a_number("Lower max_model_len to at most 23,648 tokens (what the pool holds).")
    assert gives_a_number("Add replicas: 2 (demand 1.93x the pool, rounded up).")
    assert not gives_a_number("Use an fp8 KV cache (about 2x the tokens) or a larger tensor_parallel_size.")
    assert not gives_a_number("Lower max_num_seqs (e.g. 1024 → 512): the warm-up allocates fp32 logits.")
    assert not gives_a_number("Or use a quantized checkpoint (FP8, AWQ/GPTQ 4-bit) or a smaller model.")
    assert not gives_a_number("Disable it (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0) or use --enforce-eager.")
    assert names_why_not("Use an fp8 KV cache: pass --model-config for the KV bytes per token.")
    assert not names_why_not("Give the pool more memory.")


@pytest.mark.parametrize("name, args", INPUTS, ids=[n for n, _ in INPUTS])
def test_every_remedy_gives_a_number_or_says_why_not(name, args, kvdiag):
    res = kvdiag("analyze", *args, "--format", "json")
    assert "Traceback" not in res.err
    report = res.json()
    fired = [f for f in report["findings"] if f["status"] == "fires"]
    bad = [(f["rule_id"], r) for f in fired for r in f["remedy"] if not (gives_a_number(r) or names_why_not(r))]
    assert not bad, "\n".join(f"{rid}: {r}" for rid, r in bad)


def _stats_log(tmp_path, rows) -> str:
    """A vLLM V1 log of stats lines, one per ``(running, waiting, usage %)``."""
    path = tmp_path / "stats.log"
    path.write_text("".join(
        f"(APIServer pid=3646) INFO 05-19 10:13:{11 + 10 * i} [loggers.py:271] Engine 000: Avg prompt throughput: "
        f"0.0 tokens/s, Avg generation throughput: 1055.3 tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV "
        f"cache usage: {u}%, Prefix cache hit rate: 0.0%\n" for i, (r, w, u) in enumerate(rows)))
    return str(path)


def _cap_remedies(kvdiag, log) -> list[str]:
    res = kvdiag("analyze", "--log", log, "--format", "json")
    assert res.code == 2, res.err
    return next(f for f in res.json()["findings"] if f["rule_id"] == "CAP001")["remedy"]


def test_a_huge_queue_is_not_a_fleet_of_replicas_without_a_caveat(kvdiag, tmp_path):
    """A waiting queue of 10^9 asked for 47,571,430 replicas as plainly as 029's 4: above 10 pools' worth the remedy
    says the number is more likely a backlog than a load to provision for."""
    huge = _cap_remedies(kvdiag, _stats_log(tmp_path, [(20, 10**9, 99.0), (21, 10**9, 99.9)]))
    add = next(r for r in huge if r.startswith("Add replicas"))
    assert "47,571,430 in all" in add and "more likely a backlog" in add and "check the arrival rate" in add, add
    plain = _cap_remedies(kvdiag, _stats_log(tmp_path, [(9, 56, 94.2), (20, 23, 98.4)]))   # 029-like: 4 replicas
    add = next(r for r in plain if r.startswith("Add replicas"))
    assert "4 in all" in add and "backlog" not in add, add
