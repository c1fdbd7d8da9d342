"""The catalogue of vLLM's memory messages: template extraction from source (tools/vllm_catalog.py), template
compilation and matching (kvdiag.catalog), the event table, and the checked-in data against vLLM facts."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest

from kvdiag import catalog
from kvdiag.catalog import Catalog, compile_template, expand, split_template
from kvdiag.catalog.mapping import UNITS, map_entry, marker, table
from kvdiag.signals import SIGNALS

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("vllm_catalog", ROOT / "tools" / "vllm_catalog.py")
vc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vc)


def extract(src: str) -> list[dict]:
    """Messages the generator takes from a module's source (as it reads a wheel member)."""
    c = vc.Collector("vllm/x.py")
    c.visit(ast.parse(src))
    return [{"template": vc.template_text(m["parts"]), "kind": m["kind"], "what": m["what"],
             "function": m["function"],
             "placeholders": [{"name": p.name, "spec": p.spec, "type": vc.placeholder_type(p)}
                              for p in m["parts"] if isinstance(p, vc.Ph)]} for m in c.messages]


def one(src: str) -> dict:
    got = extract(src)
    assert len(got) == 1, got
    return got[0]


def roundtrip(entry: dict, text: str) -> dict[str, str]:
    """Compile the extracted template and match the text Python itself formats from the same source."""
    rx, needle, _ = compile_template(entry["template"], entry["placeholders"])
    assert needle and needle in text
    m = rx.search(text)
    assert m, (entry["template"], text)
    return {entry["placeholders"][int(k[1:])]["name"]: v for k, v in m.groupdict().items()}


# ---- extraction: every way vLLM builds a message ------------------------------------------------
def test_fstring_with_format_specs():
    e = one('def f(kv, n):\n    logger.info(f"Available KV cache memory: {kv / GiB_bytes:.2f} GiB for {n:,} tokens")')
    assert e["template"] == "Available KV cache memory: {kv / GiB_bytes:.2f} GiB for {n:,} tokens"
    assert [(p["spec"], p["type"]) for p in e["placeholders"]] == [(".2f", "number"), (",", "number")]
    kv, n = 61.02 * 2**30, 1234567
    GiB_bytes = 2**30
    assert roundtrip(e, f"Available KV cache memory: {kv / GiB_bytes:.2f} GiB for {n:,} tokens") == \
        {"kv / GiB_bytes": "61.02", "n": "1,234,567"}


def test_percent_formatting_with_logger_args():
    e = one('logger.info("# GPU blocks: %d, # CPU blocks: %d, util %.2f, dev %s", num_gpu_blocks, num_cpu_blocks,'
            ' util, dev)')
    assert e["template"] == "# GPU blocks: {num_gpu_blocks:d}, # CPU blocks: {num_cpu_blocks:d}, util {util:.2f}, dev {dev}"
    text = "# GPU blocks: %d, # CPU blocks: %d, util %.2f, dev %s" % (2755, 512, 0.9, "cuda")
    assert roundtrip(e, text) == {"num_gpu_blocks": "2755", "num_cpu_blocks": "512", "util": "0.90", "dev": "cuda"}


def test_fstring_passed_as_percent_argument():
    """vLLM 0.8+: logger.info("GPU KV cache size: %s tokens", f"{num_tokens:,}") - the number keeps its spec."""
    e = one('logger.info("GPU KV cache size: %s tokens", f"{num_tokens:,}")')
    assert e["template"] == "GPU KV cache size: {num_tokens:,} tokens"
    assert e["placeholders"][0]["type"] == "number"
    assert roundtrip(e, "GPU KV cache size: %s tokens" % f"{1096153:,}") == {"num_tokens": "1,096,153"}


def test_fstring_variable_passed_as_percent_argument():
    e = one('def f(n):\n    s = f"{n:,}"\n    logger.info("GPU KV cache size: %s tokens", s)')
    assert e["template"] == "GPU KV cache size: {n:,} tokens"


def test_percent_operator_and_literal_percent():
    e = one('raise RuntimeError("usage %.1f%% of %s blocks" % (usage * 100, n_blocks))')
    assert e["kind"] == "raise" and e["what"] == "RuntimeError"
    assert e["template"] == "usage {usage * 100:.1f}% of {n_blocks} blocks"
    assert roundtrip(e, "usage %.1f%% of %s blocks" % (99.25, 665)) == {"usage * 100": "99.2", "n_blocks": "665"}


def test_dot_format_positional_and_named():
    e = one('raise ValueError("max seq len ({}) is larger than KV cache ({kv:.1f} GiB)".format(max_len, kv=x))')
    assert e["template"] == "max seq len ({max_len}) is larger than KV cache ({x:.1f} GiB)"
    assert roundtrip(e, "max seq len ({}) is larger than KV cache ({kv:.1f} GiB)".format(32768, kv=1.25)) == \
        {"max_len": "32768", "x": "1.2"}


def test_implicit_and_plus_concatenation_and_message_variable():
    src = '''
class Worker:
    def determine_available_memory(self, needed, avail, max_model_len):
        msg = (f"To serve at least one request with the model's max seq len ({max_model_len}), "
               f"({needed:.2f} GiB KV cache is needed, " + "which is larger than the available KV cache memory "
               "(" + str(avail) + " GiB).")
        raise ValueError(msg)
'''
    e = one(src)
    assert e["function"] == "Worker.determine_available_memory"
    assert e["template"] == ("To serve at least one request with the model's max seq len ({max_model_len}), "
                             "({needed:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                             "memory ({str(avail)} GiB).")
    assert roundtrip(e, "To serve at least one request with the model's max seq len (40960), (3.50 GiB KV cache is "
                        "needed, which is larger than the available KV cache memory (1.25 GiB).") == \
        {"max_model_len": "40960", "needed": "3.50", "str(avail)": "1.25"}


def test_assert_warning_once_and_irrelevant_ignored():
    src = '''
def profile_run():
    assert free_gpu_memory > 0, f"Error in memory profiling. Initial free memory {a}, current {b}"
    logger.warning_once("CUDA graph memory %s GiB", g)
    logger.info("Loading tokenizer %s", name)
    raise ValueError(f"Unknown tokenizer {name}")
'''
    got = extract(src)
    rel = [g for g in got if vc.relevant([g["template"]])]
    assert [(g["kind"], g["what"]) for g in rel] == [("assert", "AssertionError"), ("log", "warning")]


def test_literal_braces_survive():
    e = one('logger.debug("KV cache groups {a}: %s", groups)')  # %-formatting prints braces as they are
    assert e["template"] == "KV cache groups {{a}}: {groups}"
    assert split_template(e["template"]) == ["KV cache groups {a}: ", 0]
    assert roundtrip(e, "KV cache groups {a}: [full, sliding]") == {"groups": "[full, sliding]"}


def test_progress_desc_and_phase_function():
    src = '''
class GPUModelRunner:
    def capture_model(self):
        for x in tqdm(sizes, desc=f"Capturing CUDA graphs ({mode}, {rt.name})"):
            pass
'''
    c = vc.Collector("vllm/v1/worker/gpu_model_runner.py")
    c.visit(ast.parse(src))
    assert [vc.template_text(p["parts"]) for p in c.progress] == ["Capturing CUDA graphs ({mode}, {rt.name})"]
    assert [f["qualname"] for f in c.functions] == ["GPUModelRunner.capture_model"]


def test_version_ranges():
    order = ["0.4", "0.5", "0.6", "0.7", "0.8"]
    assert vc.ranges(["0.4", "0.5", "0.7"], order) == ["0.4-0.5", "0.7"]
    assert expand(["0.4-0.5", "0.7"], order) == ["0.4", "0.5", "0.7"]


# ---- compilation ----------------------------------------------------------------------------------
def test_number_and_text_placeholders_and_needle():
    rx, needle, prefix = compile_template(
        "Free memory on device {device} ({free:.2f}/{total:.2f} GiB) on startup",
        [{"name": "device", "type": "text"}, {"name": "free", "type": "number"}, {"name": "total", "type": "number"}])
    assert needle == "Free memory on device"  # the longest literal run
    assert prefix == "Free memory on device"  # the first piece, for cut lines
    m = rx.search("ValueError: Free memory on device cuda:0 (14.50/79.18 GiB) on startup")
    assert m.group("g0", "g1", "g2") == ("cuda:0", "14.50", "79.18")
    assert not rx.search("Free memory on device cuda:0 (lots/79.18 GiB) on startup")  # a number must be a number


def test_blank_runs_match_rejoined_lines():
    rx, _, _ = compile_template("line one\nline  two {n}", [{"name": "n", "type": "number"}])
    assert rx.search("line one line two 5").group("g0") == "5"


def test_numbers_with_sign_separator_exponent():
    rx, _, _ = compile_template("x={v} end", [{"name": "v", "type": "number"}])
    for s in ("-1.05", "1,234,567", "3e-05", "+2", ".5"):
        assert rx.search(f"x={s} end").group("g0") == s


# ---- the shipped catalogue ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cat() -> Catalog:
    return catalog.load()


def test_covers_every_minor_with_provenance(cat):
    vs = cat.data["versions"]
    assert len(vs) >= 25
    assert [v["minor"] for v in vs] == [f"0.{i}" for i in range(4, 4 + len(vs))]
    for v in vs:
        assert v["wheel"].startswith(f"vllm-{v['version']}-") and v["wheel"].endswith(".whl")
        assert len(v["sha256"]) == 64 and v["py_files"] > 100


def test_known_vllm_messages_present_in_their_versions(cat):
    """Facts from vLLM's source (reference §2.4): E1 in every version, the V0 E2 wording to 0.10 only, the V1
    'Available KV cache memory' line from 0.9."""
    def versions_of(fragment):
        es = [e for e in cat.data["messages"] if fragment in e["template"]]
        assert es, fragment
        return sorted({m for e in es for m in expand(e["versions"], cat.minors)}, key=cat.minors.index)
    assert versions_of("No available memory for the cache blocks") == cat.minors
    v0 = versions_of("is larger than the maximum number of tokens that can be stored in KV cache")
    assert v0[0] == "0.4" and "0.10" in v0 and "0.11" not in v0
    assert versions_of("Available KV cache memory: ")[0] == "0.9"


def test_match_real_lines(cat):
    hit = cat.match("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
                    " when initializing the engine.")
    assert hit and hit[0]["event"] == "E1"
    entry, values = cat.match("Available KV cache memory: 61.02 GiB")
    assert entry["event"] == "M3"
    assert cat.numbers(entry, values) == {"kv_cache_memory_bytes": pytest.approx(61.02 * 2**30)}
    assert cat.match("Loading tokenizer for model meta-llama/Llama-3-8B") is None


def test_cut_line_gives_the_numbers_before_the_cut(cat):
    full = ("The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV "
            "cache (20480). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
            "the engine.")
    entry, values = cat.match(full[:150] + "…")
    assert entry["event"] == "E2a"
    assert cat.numbers(entry, values) == {"max_model_len": 32768, "kv_cache_size_tokens": 20480}
    entry, values = cat.match(full[:28])  # cut inside the first number: no number is trusted
    assert entry["event"] == "E2a" and cat.numbers(entry, values) == {}


def test_observations_are_signals(cat):
    entry, values = cat.match("ValueError: No available memory for the cache blocks.")
    assert cat.observations(entry, values) == [("vllm_message", 1.0, f"E1:{entry['id']}"),
                                               ("kv_capacity_error", 1.0, "no_kv_memory")]


# ---- the event table -------------------------------------------------------------------------------
def test_event_table_fields_are_signals_and_rules_are_used(cat):
    t = table()
    used = {e["rule"] for e in cat.data["messages"] if e["rule"]}
    for rule in t["rules"]:
        for _key, field, unit in rule["_numbers"]:
            assert field in SIGNALS, (rule["event"], field)
            assert unit in UNITS
        assert rule["match"] in used, f"rule for {rule['event']} matches no catalogued template: {rule['match']}"
    for e in cat.data["messages"]:
        assert marker(e["event"]) is not None or e["event"] in t["markers"], e["event"]


def test_mapping_is_baked_into_the_data(cat):
    """The JSON is what the table gives today (run `python tools/vllm_catalog.py --remap` after editing it)."""
    stale = [e["id"] for e in cat.data["messages"] if {k: e[k] for k in ("event", "rule", "numbers")} != map_entry(e)]
    assert not stale, f"{len(stale)} entries mapped differently than event_map.yaml says; run --remap"


def test_shipped_in_the_wheel_config():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"kvdiag.catalog"' in text and "vllm_messages.json" in text
    json.loads((ROOT / "kvdiag" / "catalog" / "vllm_messages.json").read_text())
