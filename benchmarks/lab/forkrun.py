#!/usr/bin/env python3
"""Run many twin-lab scenarios without paying vLLM's import time for each one.

``twin.py all`` starts one fresh Python per scenario (vLLM keeps process-global state), and importing torch and
vLLM takes 10-25 s of a core: more than simulating a short scenario. Here each of ``--jobs`` workers sets the
environment twin.py sets, imports torch and the vLLM modules once, and then forks one child per scenario: each
child starts from a process that has imported vLLM but never built an engine, a registry or a logger, and runs
twin.py's own ``run_scenario`` on it. The scratch folder a child uses is fixed per worker, so that the Hugging
Face cache path the libraries read at import time is the one the child writes the model config into.

Run with the lab's Python (shared/twin/README.md):

    $TWIN_PYTHON benchmarks/lab/forkrun.py --scenarios benchmarks/lab/families.yaml --out DIR [--jobs 2] [NAME ...]

Scenarios whose ``DIR/NAME/truth.json`` exists are skipped (resume). Output per case is what ``twin.py run``
writes: the pages, log and truth are byte-identical but for ``truth.json``'s ``generation.wall_seconds`` and the
``python_gc_*`` series (the real garbage-collector counts of the process that ran vLLM's front end, which differ
with what the process did before: here, the imports). Compared on two cases against ``twin.py all`` on 2026-12-01.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time

TWIN_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "twin", "twin.py")

# the environment twin.py's _run_scenario sets before it imports vLLM (HF_HOME is set per worker below)
ENV = dict(VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", NO_COLOR="1", VLLM_LOGGING_COLOR="0",
           VLLM_LOGGING_LEVEL="INFO", VLLM_CONFIGURE_LOGGING="1", TZ="UTC", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
PRELOAD = ["torch", "prometheus_client", "vllm.logger", "vllm.config.logging", "vllm.engine.arg_utils",
           "vllm.entrypoints.common.cli_args", "vllm.entrypoints.common.startup", "vllm.sampling_params",
           "vllm.usage.usage_lib", "vllm.utils.argparse_utils", "vllm.utils.hashing",
           "vllm.v1.attention.backends.flash_attn", "vllm.v1.attention.backends.utils", "vllm.v1.core.kv_cache_planning",
           "vllm.v1.core.kv_cache_utils", "vllm.v1.core.sched.scheduler", "vllm.v1.engine",
           "vllm.v1.engine.output_processor", "vllm.v1.kv_cache_interface", "vllm.v1.metrics.loggers",
           "vllm.v1.metrics.stats", "vllm.v1.outputs", "vllm.v1.request", "vllm.v1.structured_output", "vllm.version"]


def load_twin(path: str):
    spec = importlib.util.spec_from_file_location("twin", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["twin"] = mod
    spec.loader.exec_module(mod)
    return mod


def worker(slot: int, names: list[str], twin_path: str, scen_path: str, out: str) -> int:
    scratch = os.path.join(tempfile.gettempdir(), f"twin-fork-{os.getpid()}-{slot}")
    os.environ.update(ENV, HF_HOME=os.path.join(scratch, "hf"))
    time.tzset()
    twin = load_twin(twin_path)
    for m in PRELOAD:
        __import__(m)
    scenarios = twin.load_scenarios(scen_path)
    rc = 0
    for name in names:
        t0 = time.time()
        pid = os.fork()
        if pid == 0:  # the child: one scenario, then exit without running the parent's cleanup
            code = 1
            try:
                def fixed_mkdtemp(*_a, **_k):
                    os.makedirs(scratch, exist_ok=True)
                    return scratch
                tempfile.mkdtemp = fixed_mkdtemp
                doc = twin.run_scenario(scenarios[name], out)
                print(twin.summary_line(doc), flush=True)
                code = 3 if any(not c["ok"] for c in doc["checks"]) else 0
            except BaseException as exc:  # noqa: BLE001 - reported, the worker goes on
                print(f"{name}: FAILED ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 3):
            rc = 1
        print(f"  [{slot}] {name} exit {code} in {time.time() - t0:.1f}s", file=sys.stderr, flush=True)
    return rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--twin", default=os.environ.get("TWIN_PY", os.path.abspath(TWIN_DEFAULT)))
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    import yaml

    with open(a.scenarios) as f:
        allnames = list(yaml.safe_load(f)["scenarios"])
    names = [n for n in (a.names or allnames) if not os.path.exists(os.path.join(a.out, n, "truth.json"))]
    print(f"{len(names)} scenario(s) to run ({len(allnames) - len(names)} already done)", file=sys.stderr, flush=True)
    if not names:
        return 0
    jobs = max(1, min(a.jobs, len(names)))
    pids = []
    for slot in range(jobs):
        part = names[slot::jobs]
        pid = os.fork()
        if pid == 0:
            os._exit(worker(slot, part, a.twin, os.path.abspath(a.scenarios), os.path.abspath(a.out)))
        pids.append(pid)
    rc = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        rc |= os.waitstatus_to_exitcode(status)
    return rc


if __name__ == "__main__":
    sys.exit(main())
