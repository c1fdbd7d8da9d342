"""The twin-lab recordings (fixtures/lab/*) in one real Prometheus, and the exported alerts evaluated on them.

Each recording (V1 names, and its ``v0/`` copy under V0-era names) becomes one instance (``<case>-v1`` /
``<case>-v0``, ``job="lab"``): its vLLM families are merged into one OpenMetrics file (one metadata block per family,
every recording's samples under it, the ``instance`` and ``job`` labels added), loaded with
``promtool tsdb create-blocks-from openmetrics`` and served by Debian's ``prometheus`` on loopback
(:class:`promserver.PrometheusServer`).

Used by ``tests/test_export_lab.py``; ``python tests/labprom.py`` prints the agreement table.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LAB = ROOT / "fixtures" / "lab"
JOB = "lab"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)\s+(\S+)\s*$")


def recordings() -> list[tuple[str, Path]]:
    """``(instance, recording.om.gz)`` for every case: ``<case>-v1``, ``<case>-v0`` and ``<case>-v1u`` (the V1
    recording with ``vllm_`` names, as a Prometheus 2.x server stores a current prometheus-client's output)."""
    out = []
    for case in sorted(p.parent for p in LAB.glob("*/truth.json")):
        for names, folder in (("v1", case), ("v0", case / "v0"), ("v1u", case)):
            rec = folder / "recording.om.gz"
            if rec.exists():
                out.append((f"{case.name}-{names}", rec))
    return out


def merged_openmetrics(recs: list[tuple[str, Path]]) -> tuple[str, dict[str, tuple[float, float]]]:
    """One OpenMetrics text holding the vLLM families of every recording, and each instance's first and last
    sample time (Unix seconds).

    Raises:
        ValueError: a sample line that is not ``name{labels} value timestamp`` (file:line).
    """
    meta: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    spans: dict[str, tuple[float, float]] = {}
    for inst, path in recs:
        family = None
        lo, hi = float("inf"), float("-inf")
        underscore = inst.endswith("-v1u")
        for n, line in enumerate(gzip.decompress(path.read_bytes()).decode("utf-8").splitlines(), 1):
            if underscore:
                line = re.sub(r"^(# (?:TYPE|HELP|UNIT) )?vllm:", lambda m: (m.group(1) or "") + "vllm_", line)
            if line.startswith("#"):
                parts = line.split()
                if len(parts) >= 3 and parts[1] in ("TYPE", "HELP", "UNIT"):
                    family = parts[2]
                    if family.startswith("vllm") and len(meta.setdefault(family, [])) < 3 \
                            and not any(m.split()[1] == parts[1] for m in meta[family]):
                        meta[family].append(line)
                continue
            if not line.strip() or family is None or not family.startswith("vllm"):
                continue
            line = line.split(" # ")[0]  # no exemplars
            m = _SAMPLE.match(line)
            if not m:
                raise ValueError(f"{path}:{n}: expected 'name{{labels}} value timestamp', got {line[:80]!r}")
            name, labels, value, ts = m.groups()
            inner = labels[1:-1] if labels else ""
            extra = f'instance="{inst}",job="{JOB}"'
            samples.setdefault(family, []).append(f"{name}{{{extra}{',' + inner if inner else ''}}} {value} {ts}")
            lo, hi = min(lo, float(ts)), max(hi, float(ts))
        spans[inst] = (lo, hi)
    lines = []
    for family, ms in meta.items():
        if family in samples:
            lines += sorted(ms, key=lambda m: ("HELP", "TYPE", "UNIT").index(m.split()[1]))
            lines += samples[family]
    lines.append("# EOF")
    return "\n".join(lines) + "\n", spans


def kvdiag_fired(url: str, inst: str, start: float, end: float, python: str = sys.executable) -> dict:
    """``kvdiag analyze --prometheus-url`` on one instance over ``[start, end]``: the JSON report."""
    proc = subprocess.run([python, "-m", "kvdiag", "analyze", "--prometheus-url", url,
                           "--selector", f'{{instance="{inst}"}}', "--since", f"{start:.3f}", "--until", f"{end:.3f}",
                           "--format", "json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    if proc.returncode not in (0, 1, 2, 3) or not proc.stdout.strip():
        raise RuntimeError(f"kvdiag analyze {inst}: exit {proc.returncode}: {proc.stderr[-1500:]}")
    return json.loads(proc.stdout)


def alerts_firing(url: str, doc: dict, at: float) -> dict[str, set[str]]:
    """Each exported alert's expression (recording rules expanded: the recorded series do not exist for the past)
    evaluated at ``at`` → ``{instance: {rule ids}}``."""
    from kvdiag.export import expand_records

    records = [r for g in doc["groups"] for r in g["rules"] if "record" in r]
    out: dict[str, set[str]] = {}
    for g in doc["groups"]:
        for a in g["rules"]:
            if "alert" not in a:
                continue
            q = expand_records(a["expr"], records)
            r = requests.get(f"{url}/api/v1/query", params={"query": q, "time": f"{at:.3f}"}, timeout=60)
            body = r.json()
            if body.get("status") != "success":
                raise RuntimeError(f"{a['alert']}: {body.get('error')}")
            for s in body["data"]["result"]:
                out.setdefault(s["metric"].get("instance", ""), set()).add(a["labels"]["kvdiag_rule"])
    return out


def agreement(url: str, spans: dict[str, tuple[float, float]], rules) -> list[dict]:
    """Per instance: kvdiag's fired rules (those exported) and classes, the alerts that fire at the window's end
    with the window set to the instance's span (the same question ``analyze --since START --until END`` answers)."""
    from kvdiag.export import export_document

    rows = []
    exported_docs: dict[int, dict] = {}
    for inst, (lo, hi) in sorted(spans.items()):
        start, end = float(int(lo)), float(int(hi) + 1)  # whole seconds: the export's window is a whole duration
        span = int(end - start)
        if span not in exported_docs:
            exported_docs[span] = export_document(rules, window=f"{span}s", for_="0m")[0]
        doc = exported_docs[span]
        exported = {a["labels"]["kvdiag_rule"] for g in doc["groups"] for a in g["rules"] if "alert" in a}
        report = kvdiag_fired(url, inst, start, end)
        fired = {f["rule_id"] for f in report["findings"] if f["status"] == "fires"}
        firing = alerts_firing(url, doc, end).get(inst, set())
        cls = {f["rule_id"]: f["class"] for f in report["findings"]}
        rows.append({"instance": inst, "window_s": span, "primary": report["verdict"]["primary"],
                     "kvdiag_fired": sorted(fired), "kvdiag_fired_exported": sorted(fired & exported),
                     "alerts": sorted(firing),
                     "kvdiag_classes": sorted({cls[r] for r in fired & exported}),
                     "alert_classes": sorted({cls.get(r, "?") for r in firing})})
    return rows


def main() -> None:  # pragma: no cover - a report, not a test
    sys.path.insert(0, str(HERE))
    import tempfile

    from promserver import PrometheusServer, backfill
    from kvdiag.engine.model import load_rules

    with tempfile.TemporaryDirectory() as tmp:
        text, spans = merged_openmetrics(recordings())
        om = Path(tmp) / "lab.om"
        om.write_text(text)
        backfill(om, Path(tmp) / "data")
        with PrometheusServer(Path(tmp) / "data") as prom:
            rows = agreement(prom.url, spans, load_rules())
    print("| instance | window | kvdiag primary | kvdiag fired (all) | kvdiag fired (exported) | alerts firing | agree |")
    print("| --- | ---: | --- | --- | --- | --- | --- |")
    for r in rows:
        ok = "yes" if r["kvdiag_fired_exported"] == r["alerts"] else "NO"
        print(f"| {r['instance']} | {r['window_s']}s | {r['primary']} | {', '.join(r['kvdiag_fired']) or '-'} "
              f"| {', '.join(r['kvdiag_fired_exported']) or '-'} "
              f"| {', '.join(r['alerts']) or '-'} | {ok} |")


if __name__ == "__main__":
    main()
