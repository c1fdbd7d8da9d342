"""The long fuzz campaign of issue 19: ≥ 100,000 generated inputs across logs, /metrics pages, recordings, config.json
files, rule files, state files and URLs, through kvdiag in-process (the generators and runners of tests/fuzzgen.py).

Run by hand (it is slow; mind shared cores)::

    nice -n 10 python benchmarks/fuzz_campaign.py --total 100000 --state /tmp/kvdiag-campaign.json

Resumable: progress and counts are saved to ``--state`` every few hundred inputs; running the same command again
continues where it stopped (input ``i`` of a family is always the same: its generator is seeded with
``seed:family:i``). One worker process runs the inputs; the parent kills it when an input takes longer than
``--hang`` seconds and runs it again in a new one (a hang is an input over the limit twice; once is counted as
``slow_once``); workers are recycled every ``--recycle`` inputs. Every ``--judge``-th
input goes through the whole pipeline (collector, derive, rules, all three renderers), the others through the
collector or loader alone. Inputs that raised (uncaught) or hung are saved under ``--keep`` for replay.

Prints per family: inputs, reports (ok), clean refusals (one KvdiagError), uncaught exceptions, hangs over
``--hang`` s, and the peak RSS of the worker processes (an upper bound on any single input's).

Plug-in generator families (``--plugins MODULE_OR_FILE,...``, ``docs/fuzz-plugins.md``): each names the command and
the input kind it attacks; its cases run through the real CLI in-process (``benchmarks/fuzz_plugins.py``), every
``--variants``-th one also with ``--debug`` and with each ``--format`` of its command, and planted secrets are looked
for in stdout, stderr and every file the command wrote (``leak``). ``--markdown FILE`` writes the counts per family,
per command and per input kind as a Markdown table for a doc.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
GEN_MODULE = "fuzzgen"  # --gen-module FILE: another module with FAMILIES (e.g. benchmarks/fuzzgen_blind.py)


def _load_gen(spec: str):
    """The generator module: a module name on sys.path, or a .py file (its runners may return outcomes other than
    ok/refused: oracle violations, counted and kept like an uncaught exception, with the module's LAST_FINDING)."""
    import importlib

    if not spec.endswith(".py"):
        return importlib.import_module(spec)
    path = Path(spec).resolve()
    sys.path.insert(0, str(path.parent))
    return importlib.import_module(path.stem)


def _worker(conn, seed: str, judge_every: int, scratch: str, plugins: tuple = (), variants: int = 10) -> None:
    fuzzgen = _load_gen(GEN_MODULE)

    import fuzz_plugins

    tmp = Path(scratch)
    plugged = fuzz_plugins.load_plugins(list(plugins)) if plugins else {}
    for family, (gen, run) in fuzzgen.FAMILIES.items():  # warm up (imports, caches) before the clock runs
        try:
            run(gen(random.Random(f"warm:{family}")), tmp, judge=True)
        except Exception:  # noqa: BLE001 - counted when it comes up for real
            pass
    conn.send("ready")
    while True:
        job = conn.recv()
        if job is None:
            return
        family, i = job
        secrets: list = []
        if family in plugged:
            data = b""
            try:
                case = plugged[family]["generate"](random.Random(f"{seed}:{family}:{i}"))
                secrets = [str(x) for x in case.get("secrets") or []]
                outcome, err, _runs = fuzz_plugins.run_case(case, tmp, f"{family}-{i % 4}", i % variants == 0)
                if outcome in ("uncaught", "leak", "debug-code"):
                    data = json.dumps({k: (v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
                                       for k, v in case.get("files", {}).items()} | {"argv": case["argv"]}).encode()
            except Exception as exc:  # noqa: BLE001 - a generator's own fault is counted, never stops the run
                outcome, err = "uncaught", "generator or runner: " + "".join(traceback.format_exception(exc)[-3:])[-1500:]
        else:
            gen, run = fuzzgen.FAMILIES[family]
            data = gen(random.Random(f"{seed}:{family}:{i}"))
            try:
                outcome, err = run(data, tmp, judge=(i % judge_every == 0)), ""
                if outcome not in ("ok", "refused"):  # an oracle violation of a --gen-module
                    err = getattr(fuzzgen, "LAST_FINDING", "") or outcome
            except Exception as exc:  # noqa: BLE001 - the campaign counts what escaped
                outcome, err = "uncaught", "".join(traceback.format_exception(exc)[-3:])[-1500:]
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        conn.send((outcome, err, rss_mb, data if outcome not in ("ok", "refused") else b"", secrets))


class Worker:
    plugins: tuple = ()
    variants: int = 10

    def __init__(self, seed: str, judge_every: int, scratch: str) -> None:
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, seed, judge_every, scratch, Worker.plugins,
                                                      Worker.variants), daemon=False)  # kvdiag itself may start processes
        self.proc.start()
        self.done = 0
        if not self.conn.poll(600) or self.conn.recv() != "ready":
            raise SystemExit("fuzz worker did not start")

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def main() -> int:
    global GEN_MODULE
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--gen-module", default="fuzzgen")
    GEN_MODULE = pre.parse_known_args()[0].gen_module
    fuzzgen = _load_gen(GEN_MODULE)

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gen-module", default="fuzzgen",
                    help="the module (name or .py file) whose FAMILIES are run instead of tests/fuzzgen.py")
    ap.add_argument("--total", type=int, default=100_000, help="inputs over all families (split evenly)")
    ap.add_argument("--state", default="/tmp/kvdiag-campaign.json", help="progress file (resume from it)")
    ap.add_argument("--keep", default="/tmp/kvdiag-campaign-finds", help="folder for inputs that failed")
    ap.add_argument("--seed", default="19")
    ap.add_argument("--hang", type=float, default=10.0, help="seconds after which an input counts as a hang")
    ap.add_argument("--judge", type=int, default=10, help="every N-th input through the whole pipeline")
    ap.add_argument("--recycle", type=int, default=2000, help="inputs per worker process")
    ap.add_argument("--plugins", default="", help="generator modules or files, comma-separated (docs/fuzz-plugins.md)")
    ap.add_argument("--variants", type=int, default=10, help="every N-th plug-in case also with --debug and every "
                    "--format of its command")
    ap.add_argument("--markdown", default="", help="write the counts per family, command and input kind here")
    ap.add_argument("--families", default="", help="families to run (default: all, plug-ins included)")
    ap.add_argument("--max-minutes", type=float, default=0, help="stop (resumably) after this long; 0: no limit")
    args = ap.parse_args()

    import fuzz_plugins

    specs = tuple(x for x in args.plugins.split(",") if x)
    plugged = fuzz_plugins.load_plugins(list(specs)) if specs else {}
    Worker.plugins, Worker.variants = specs, max(1, args.variants)
    about = {f: {"command": "analyze" if f not in ("config", "rule", "state") else
                 {"config": "estimate", "rule": "rules", "state": "check"}[f], "kind": f} for f in fuzzgen.FAMILIES}
    about.update({f: {"command": v["command"], "kind": v["kind"]} for f, v in plugged.items()})
    families = args.families.split(",") if args.families else [*fuzzgen.FAMILIES, *plugged]
    unknown = [f for f in families if f not in about]
    if unknown:
        raise SystemExit(f"unknown families: {', '.join(unknown)} (known: {', '.join(about)})")
    per_family = -(-args.total // len(families))
    state_path = Path(args.state)
    blank = {"inputs": 0, "ok": 0, "refused": 0, "uncaught": 0, "hangs": 0, "leak": 0, "debug-code": 0,
             "planted": 0, "peak_rss_mb": 0.0, "seconds": 0.0}
    state = {"seed": args.seed, "families": {f: dict(blank) for f in families}}
    if state_path.exists():
        old = json.loads(state_path.read_text())
        if old.get("seed") == args.seed:
            state["families"].update({f: {**blank, **v} for f, v in old["families"].items() if f in families})
    keep = Path(args.keep)
    keep.mkdir(parents=True, exist_ok=True)
    scratch = fuzzgen.scratch_dir()
    t_start = time.monotonic()

    def save() -> None:
        tmp = state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, state_path)

    worker = Worker(args.seed, args.judge, str(scratch))
    try:
        while True:
            todo = [f for f in families if state["families"][f]["inputs"] < per_family]
            if not todo:
                break
            if args.max_minutes and time.monotonic() - t_start > args.max_minutes * 60:
                print(f"stopped after {args.max_minutes:g} min (resume with the same command)", file=sys.stderr)
                break
            for family in todo:
                st = state["families"][family]
                i = st["inputs"]
                t0 = time.monotonic()
                worker.conn.send((family, i))
                if worker.conn.poll(args.hang * (6 if family in plugged else 1)):  # a case runs up to 6 times
                    try:
                        outcome, err, rss, data, secrets = worker.conn.recv()
                    except (EOFError, OSError):  # the worker died (in kvdiag, or in a generator): counted, not fatal
                        outcome, err, rss, data, secrets = "uncaught", "the worker process died on this input", 0.0, b"", []
                        worker.stop(kill=True)
                        worker = Worker(args.seed, args.judge, str(scratch))
                    st["peak_rss_mb"] = max(st["peak_rss_mb"], rss)
                    st["planted"] += len(secrets)
                    distinct = state.setdefault("secrets", [])
                    for sec in secrets:
                        if len(distinct) < 5000 and sec not in distinct:
                            distinct.append(sec)
                else:  # over the limit: again in a fresh, warm worker; a hang is one that repeats (a busy machine
                    # can stall one input, and the same input is generated again from its seed)
                    worker.stop(kill=True)
                    worker = Worker(args.seed, args.judge, str(scratch))
                    t0 = time.monotonic()
                    worker.conn.send((family, i))
                    if worker.conn.poll(args.hang * (6 if family in plugged else 1)):
                        outcome, err, rss, data, _secrets = worker.conn.recv()
                        st["slow_once"] = st.get("slow_once", 0) + 1
                    else:
                        outcome, err, data = "hangs", f"no answer within {args.hang:g}s, twice", b""
                        worker.stop(kill=True)
                        worker = Worker(args.seed, args.judge, str(scratch))
                st["seconds"] += time.monotonic() - t0
                st[outcome] = st.get(outcome, 0) + 1
                st["inputs"] += 1
                if outcome not in ("ok", "refused"):
                    (keep / f"{family}-{i}.txt").write_text(err)
                    if data:
                        (keep / f"{family}-{i}.input").write_bytes(data)
                    print(f"{family} #{i}: {outcome}: {err.strip().splitlines()[-1] if err.strip() else ''}",
                          file=sys.stderr)
                worker.done += 1
                if worker.done >= args.recycle:
                    worker.stop()
                    worker = Worker(args.seed, args.judge, str(scratch))
            done = sum(v["inputs"] for v in state["families"].values())
            if done % 700 < len(todo):
                save()
                print(f"{done:,} inputs, {time.monotonic() - t_start:,.0f} s", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("interrupted (resume with the same command)", file=sys.stderr)
    finally:
        worker.stop()
        save()
        for p in scratch.rglob("*"):
            if p.is_file():
                p.unlink()
        for p in sorted(scratch.rglob("*"), reverse=True):
            p.rmdir()
        scratch.rmdir()
    print(f"{'family':<10} {'inputs':>8} {'reports':>8} {'refusals':>8} {'uncaught':>8} {'hangs>%gs' % args.hang:>9} "
          f"{'peak RSS':>9} {'ms/input':>8} {'slow once':>9}")
    total = dict(blank)
    for family, st in state["families"].items():
        print(f"{family:<10} {st['inputs']:>8,} {st['ok']:>8,} {st['refused']:>8,} {st['uncaught']:>8,} "
              f"{st['hangs']:>9,} {st['peak_rss_mb']:>6.0f} MB {1000 * st['seconds'] / max(st['inputs'], 1):>8.1f} "
              f"{st.get('slow_once', 0):>9,}")
        for k in ("inputs", "ok", "refused", "uncaught", "hangs", "seconds"):
            total[k] += st.get(k, 0)
        total["peak_rss_mb"] = max(total["peak_rss_mb"], st["peak_rss_mb"])
    print(f"{'all':<10} {total['inputs']:>8,} {total['ok']:>8,} {total['refused']:>8,} {total['uncaught']:>8,} "
          f"{total['hangs']:>9,} {total['peak_rss_mb']:>6.0f} MB {1000 * total['seconds'] / max(total['inputs'], 1):>8.1f}")
    extra = {k: sum(st.get(k, 0) for st in state["families"].values()) for k in ("leak", "debug-code", "planted")}
    print(f"leaks {extra['leak']:,}, --debug exit-code changes {extra['debug-code']:,}, planted secrets "
          f"{extra['planted']:,} ({len(state.get('secrets', []))} distinct)")
    if args.markdown:
        Path(args.markdown).write_text(markdown_counts(state, about, args), encoding="utf-8")
    return 1 if total["uncaught"] or total["hangs"] or extra["leak"] or extra["debug-code"] else 0


def markdown_counts(state: dict, about: dict, args) -> str:
    """The campaign's counts as Markdown tables: per family, per command, per input kind."""
    keys = ("inputs", "ok", "refused", "uncaught", "hangs", "leak", "debug-code", "planted")
    head = "| {} | " + " | ".join(keys) + " | peak RSS MB |\n|---|" + "---:|" * (len(keys) + 1) + "\n"

    def table(title: str, group) -> str:
        rows: dict = {}
        for fam, st in state["families"].items():
            g = group(fam)
            r = rows.setdefault(g, {k: 0 for k in keys} | {"peak_rss_mb": 0.0})
            for k in keys:
                r[k] += st.get(k, 0)
            r["peak_rss_mb"] = max(r["peak_rss_mb"], st.get("peak_rss_mb", 0.0))
        body = "".join(f"| {g} | " + " | ".join(f"{r[k]:,}" for k in keys) + f" | {r['peak_rss_mb']:.0f} |\n"
                       for g, r in sorted(rows.items()))
        return f"### {title}\n\n" + head.format(title.split()[-1]) + body + "\n"

    return (f"Seed {state['seed']!r}, hang limit {args.hang:g} s, variants every {args.variants} case(s); "
            f"{len(state.get('secrets', []))} distinct planted secrets.\n\n"
            + table("Per family", lambda f: f)
            + table("Per command", lambda f: about.get(f, {}).get("command", "?"))
            + table("Per input kind", lambda f: about.get(f, {}).get("kind", "?")))


if __name__ == "__main__":
    sys.exit(main())
