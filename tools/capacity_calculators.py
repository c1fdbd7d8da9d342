"""Regenerate docs/capacity-calculators.md: kvdiag vs public KV-cache / memory calculators on the shared pairs.

One command (from the repository root, in kvdiag's venv)::

    python tools/capacity_calculators.py            # writes docs/capacity-calculators.md

The calculators are pure-Python wheels on the package index, fetched with ``pip download --no-deps`` at pinned
versions into ``--wheels`` (default ``.calculators/``, git-ignored) and imported from their unpacked files
without installing them and without running their package ``__init__`` (which pulls network clients). They are
never kvdiag dependencies. Each is called with the same inputs kvdiag gets (the row's model config, the logged
"Available KV cache memory", max_model_len, kv_cache_dtype); what it returns is turned into the token figure vLLM
prints, ``floor(KV memory / bytes per token)``. None of them has a tensor / pipeline parallel option for the KV
cache, so their per-token bytes are divided by ``tp × pp`` (the step a user would take; generous to them).

Rows and their inputs: ``fixtures/capacity/pairs.csv`` and ``ROW_INPUTS`` / ``ROW_REASONS`` of
``tests/test_capacity.py`` (one source of truth with the tests); weights rows: ``fixtures/capacity/weights.csv`` and
its configs in ``fixtures/capacity/weights/`` (``tests/test_capacity_weights_modules.py``).
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import subprocess
import sys
import types
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from kvdiag import capacity as cap  # noqa: E402

GIB = 2**30
TOL = 0.005

CALCULATORS = {
    # name: (pip requirement, packages to stub, module to import)
    "hf-mem": ("hf-mem==0.5.6", ("hf_mem", "hf_mem.safetensors"), "hf_mem.safetensors.kv_cache"),
    "modelinfo-cli": ("modelinfo-cli==1.4.4", ("modelinfo",), "modelinfo.calculator"),
    "ml-memguard": ("ml-memguard==0.5.0", ("memory_guard",), "memory_guard.estimator"),
    "llm-sizer": ("llm-sizer==0.1.0", ("llm_sizer",), "llm_sizer.sizing"),
}


def _load(name: str, wheels: Path):
    req, packages, module = CALCULATORS[name]
    dist = req.split("==")[0].replace("-", "_")
    found = sorted(wheels.glob(f"{dist}-{req.split('==')[1]}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", req, "-d", str(wheels)],
                       check=True)
        found = sorted(wheels.glob(f"{dist}-*.whl"))
    target = wheels / found[0].stem
    if not target.exists():
        with zipfile.ZipFile(found[0]) as z:
            z.extractall(target)
    for pkg in packages:  # empty package objects: the submodule's own imports only
        mod = types.ModuleType(pkg)
        mod.__path__ = [str(target / pkg.replace(".", "/"))]
        sys.modules[pkg] = mod
    return importlib.import_module(module), found[0].name


def _kv_dtype_bytes(row: dict, shape) -> int:
    return cap.kv_cache_dtype_bytes(row["kv_cache_dtype"].split()[0], shape.dtype_bytes)


def calculator_bytes_per_token(name: str, mod, config: dict, row: dict, shape) -> float:
    """Whole-model KV bytes per token of one calculator (raises when it cannot take the config)."""
    mml = int(row["max_model_len"])
    s = _kv_dtype_bytes(row, shape)
    text = cap._text_config(config)
    if name == "hf-mem":
        dtype = "F8_E4M3" if s == 1 else "BF16"
        return mod.compute_safetensors_kv_cache_size(text, dtype, mml) / mml
    if name == "modelinfo-cli":
        return mod.calculate_footprint({}, 1, 1, text)["kv_cache_bytes"]
    if name == "ml-memguard":
        heads = text.get("num_key_value_heads", text.get("num_attention_heads"))
        head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
        est = mod.estimate_serving_memory(0, 16, heads, head_dim, text["num_hidden_layers"], 1, mml, s)
        return est.kv_cache_mb * 1024 * 1024 / mml
    if name == "llm-sizer":
        spec = types.SimpleNamespace(params=0, num_layers=text["num_hidden_layers"], hidden_size=text["hidden_size"])
        return mod.estimate_vram(spec, s, 1, 1).kv_cache_bytes
    raise KeyError(name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "capacity-calculators.md"))
    ap.add_argument("--wheels", default=str(ROOT / ".calculators"))
    args = ap.parse_args(argv)
    wheels = Path(args.wheels)
    wheels.mkdir(parents=True, exist_ok=True)

    import test_capacity as tc  # the rows' inputs, shared with the tests
    mods = {n: _load(n, wheels) for n in CALCULATORS}

    rows_out = []
    within = {"kvdiag": 0, **{n: 0 for n in CALCULATORS}}
    for row in tc.ROWS:
        cfg_name, overrides, _ = tc.ROW_INPUTS[row["id"]]
        config = {**tc.load_config(cfg_name), **overrides}
        shape = cap.model_shape(config)
        want = int(row["logged_kv_tokens"])
        kv = float(row["available_kv_gib"]) * GIB
        est = tc._estimate(row)
        cells = {"kvdiag": est.kv_capacity_tokens}
        par = int(row["tp"]) * int(row["pp"])
        for n, (mod, _) in mods.items():
            try:
                bpt = calculator_bytes_per_token(n, mod, config, row, shape) / par
                cells[n] = int(kv // bpt) if bpt > 0 else "cannot run (no KV dims in the config)"
            except Exception as exc:  # a calculator that cannot read the config: say so in its cell
                cells[n] = f"cannot run ({exc.__class__.__name__}: {str(exc)[:40]})"
        for n, v in cells.items():
            ok = isinstance(v, int) and (abs(v - want) / want <= TOL
                                         or (n == "kvdiag" and abs(v - want) <= est.layout.block_size))
            within[n] += ok
        rows_out.append((row, want, cells, est.layout.block_size))

    from kvdiag.capacity.weights import weights_breakdown, weights_bytes_per_worker
    weight_rows = []
    wdir = ROOT / "fixtures" / "capacity" / "weights"
    with open(ROOT / "fixtures" / "capacity" / "weights.csv", newline="") as fh:
        for w in csv.DictReader(fh):
            wcfg = json.loads((wdir / w["config"]).read_text())
            got = weights_bytes_per_worker(wcfg, w["quantization"] or None, int(w["tp"]), int(w["pp"]),
                                           mxfp4_backend=w["mxfp4_backend"] or None) / GIB
            scheme = weights_breakdown(wcfg, w["quantization"] or None)["scheme"]
            weight_rows.append((w, scheme, float(w["logged_gib"]), got))

    listed = {r["id"]: tc.ROW_REASONS[r["id"]] for r, *_ in rows_out if r["id"] in tc.ROW_REASONS}
    kinds: dict[str, int] = {}
    for row, *_ in rows_out:
        kinds[row["architecture_class"]] = kinds.get(row["architecture_class"], 0) + 1
    w_within = sum(1 for w, _, logged, got in weight_rows if abs(got - logged) / logged <= 0.01)
    lines = [
        "# kvdiag vs public KV-cache calculators",
        "",
        "Generated by `python tools/capacity_calculators.py` (do not edit by hand). Rows: `fixtures/capacity/pairs.csv`",
        "(the 15 shared pairs and this project's N rows; vLLM's own start-up lines, provenance in `fixtures/capacity/`",
        "`evidence.md`). Each tool gets the row's model config and the",
        "logged `Available KV cache memory`; its per-token KV bytes give `floor(KV memory / bytes per token)`, the",
        "figure vLLM prints as `GPU KV cache size: N tokens`. The calculators have no tensor / pipeline parallel option",
        "for the KV cache: their per-token bytes are divided by `tp x pp`. A cell is the predicted tokens and the signed",
        "error against the logged figure; bold = within 0.5 % (kvdiag: or one block, the slack of the two-decimal GiB).",
        "",
        "Calculators (pinned wheels, fetched with `pip download --no-deps`, imported without installing): "
        + ", ".join(f"`{w}`" for _, w in mods.values()) + ".",
        "",
        "## Headline",
        "",
        f"Rows within 0.5 % of the printed token figure (of {len(rows_out)}): "
        + ", ".join(f"{n} {within[n]}" for n in within) + ". "
        + f"kvdiag's rows outside, each listed with the reason the log and config cannot settle: "
        + (", ".join(f"{k} ({v})" for k, v in listed.items()) or "none") + ".",
        "",
        "Rows by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + f". Weights rows within 1 % of "
        f"`Model loading took`: {w_within} of {len(weight_rows)} (below).",
        "",
        "## Per row",
        "",
        "| row | model | kind | vLLM | logged tokens | " + " | ".join(within) + " |",
        "|---|---|---|---|---:|" + "---:|" * len(within),
    ]
    for row, want, cells, block in rows_out:
        out = []
        for n, v in cells.items():
            if isinstance(v, int):
                err = (v - want) / want
                ok = abs(err) <= TOL or (n == "kvdiag" and abs(v - want) <= block)
                txt = f"{v:,} ({err:+.1%})"
                out.append(f"**{txt}**" if ok else txt)
            else:
                out.append(str(v))
        if row["id"] in listed:
            out[0] += " (listed)"
        lines.append(f"| {row['id']} | {row['model']} | {row['architecture_class']} | "
                     f"{row['vllm_version'][:28]} | {want:,} | " + " | ".join(out) + " |")
    lines += [
        "",
        "## Weights vs `Model loading took X GiB`",
        "",
        "kvdiag's `weights_bytes_per_worker`: every checkpoint module priced by its quantisation scheme's rule (vLLM",
        "file @ version in `kvdiag/capacity/quantization.py`), honouring the scheme's own exclusions and the checkpoint's",
        "ignore list, plus the rotary cache vLLM allocates while loading; one worker's share under TP (norms and the",
        "rotary cache replicated). Rows: `fixtures/capacity/weights.csv` (its configs with provenance in",
        "`fixtures/capacity/weights/`). hf-mem reads weight sizes from the checkpoint's safetensors headers over HTTP",
        "from the Hub: it cannot run offline, so it has no column here; modelinfo-cli needs the safetensors tensors too;",
        "llm-sizer and ml-memguard take a parameter count the user supplies (no estimate of their own). Bold = within 1 %.",
        "",
        "| row | model | scheme | tp | vLLM | logged GiB | kvdiag GiB | error |",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    for w, scheme, logged, got in weight_rows:
        err = (got - logged) / logged
        cell = f"{err:+.2%}"
        cell = f"**{cell}**" if abs(err) <= 0.01 else cell + " (listed: " + w["listed_reason"] + ")"
        lines.append(f"| {w['id']} | {w['model']} | {scheme} | {w['tp']} | {w['vllm_version'][:24]} | {logged:.4f} | "
                     f"{got:.4f} | {cell} |")
    lines += [
        "",
        "## Why the calculators miss",
        "",
        "- All four use the plain `2 x layers x kv_heads x head_dim x bytes` per token. hf-mem counts sliding layers",
        "  of a hybrid model as full (an upper bound) and reads `head_dim`; ml-memguard takes the heads and head size",
        "  it is given; modelinfo-cli derives the head size as `hidden_size / num_attention_heads` (Qwen3: 2x off)",
        "  and always charges 2 bytes (fp8 KV: 2x off); llm-sizer uses `hidden_size` (no GQA).",
        "- None models vLLM's KV-cache groups and padding layers, the hybrid Mamba / linear-attention block size,",
        "  MLA latents (one per token, not per head) or the version-dependent printed line: the MLA, hybrid and",
        "  sliding-window rows are off by the factors shown; the plain dense / MoE GQA rows are right.",
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}: " + ", ".join(f"{n} {within[n]}/{len(rows_out)}" for n in within))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
