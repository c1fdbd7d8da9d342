"""Bad model configs and ``estimate`` option values: one line naming the file and field (or the option), exit 3."""

from __future__ import annotations

import json

import pytest

OK = {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "head_dim": 128, "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256,
      "torch_dtype": "bfloat16", "max_position_embeddings": 8192}


def _one_line(res, *needles):
    assert res.code == 3, (res.code, res.out, res.err)
    assert "Traceback" not in res.err and "internal error" not in res.err
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvdiag: error: "), lines
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


FIELD_CASES = [
    ({"num_key_value_heads": 0}, "num_key_value_heads = 0"),
    ({"num_key_value_heads": -8}, "num_key_value_heads = -8"),
    ({"num_attention_heads": 0, "head_dim": None}, "num_attention_heads = 0"),
    ({"num_attention_heads": 0}, "num_attention_heads = 0"),
    ({"num_hidden_layers": 10**30}, "num_hidden_layers"),
    ({"head_dim": 0}, "head_dim = 0"),
    ({"head_dim": 10**6}, "head_dim = 1e+06"),
    ({"head_dim": 1e18}, "head_dim"),
    ({"sliding_window": -5}, "sliding_window = -5"),
    ({"text_config": "x"}, "text_config = str"),
    ({"text_config": [1]}, "text_config = list"),
    ({"max_position_embeddings": 0}, "max_position_embeddings = 0"),
    ({"max_position_embeddings": -1}, "max_position_embeddings = -1"),
]


@pytest.mark.parametrize("verb, change, field", [("estimate", c, f) for c, f in FIELD_CASES]
                         + [("analyze", c, f) for c, f in FIELD_CASES if "max_position" not in f])
def test_invalid_fields_name_the_file_and_field(kvdiag, tmp_path, change, field, verb):
    cfg = dict(OK, **change)
    p = tmp_path / "cfg.json"
    p.write_text(json.dumps(cfg))
    args = ["--kv-cache-memory", "20"] if verb == "estimate" else ["--gpu-memory", "80"]
    _one_line(kvdiag(verb, "--model-config", str(p), *args), f"{p}: field {field}")


@pytest.mark.parametrize("raw, needle", [
    ('{"num_hidden_layers": 1e400}', "num_hidden_layers = inf: expected a finite number"),
    ('{"num_hidden_layers": 32, "head_dim": NaN}', "head_dim = nan: expected a finite number"),
    ('{"num_hidden_layers": 32, "rope_scaling": {"factor": -Infinity}}', "rope_scaling.factor = -inf"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
], ids=["1e400", "nan", "nested-inf", "deep"])
@pytest.mark.parametrize("verb", ["estimate", "analyze"])
def test_non_finite_numbers_and_deep_json(kvdiag, tmp_path, raw, needle, verb):
    p = tmp_path / "cfg.json"
    p.write_text(raw)
    args = ["--kv-cache-memory", "20"] if verb == "estimate" else ["--gpu-memory", "80"]
    _one_line(kvdiag(verb, "--model-config", str(p), *args), str(p), needle)


@pytest.mark.parametrize("option, value", [
    ("--kv-cache-memory", "nan"), ("--kv-cache-memory", "inf"), ("--kv-cache-memory", "1e308"),
    ("--gpu-memory", "nan"), ("--gpu-memory", "-inf"),
    ("--tensor-parallel-size", "9999999999999999999999999"), ("--block-size", "100000"),
])
def test_estimate_option_values_are_bounded(kvdiag, tmp_path, option, value):
    p = tmp_path / "cfg.json"
    p.write_text(json.dumps(OK))
    args = [option, value]
    if option != "--kv-cache-memory" and option != "--gpu-memory":
        args += ["--kv-cache-memory", "20"]
    _one_line(kvdiag("estimate", "--model-config", str(p), *args), f"Invalid value for '{option}'")


def test_a_valid_config_still_estimates(kvdiag, tmp_path):
    p = tmp_path / "cfg.json"
    p.write_text(json.dumps(OK))
    res = kvdiag("estimate", "--model-config", str(p), "--kv-cache-memory", "20")
    assert res.code == 0 and "GPU blocks:" in res.out
