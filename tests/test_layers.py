"""The structure drawn from the imports (issue 26, "must show" 1): every module of ``kvdiag/`` sits in exactly one
layer, no module imports a higher layer, no import circle, no module over 800 lines.

The graph is read from the source with ``ast``: ``import x``, ``from x import y`` and relative imports, at module
level and inside functions alike (a function-level import is a dependency that only waits for its first call).
An arrow points at a module (``from ..collect.metrics import parse_page`` → ``kvdiag.collect.metrics``; ``from ..
import capacity`` → ``kvdiag.capacity``; a name that is no module → its package). Importing a submodule runs its
package's ``__init__`` too, which is not counted as an arrow of its own.

A module not placed in :data:`LAYERS` fails the test: a new module is placed when it is written. The exceptions
(:data:`KNOWN_UPWARD`, :data:`KNOWN_CIRCLES`, :data:`LONG_MODULES`) each say why and until when; one that no
longer matches anything fails too, so that it is deleted the day its reason goes.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "kvdiag"

LAYERS: list[tuple[str, tuple[str, ...]]] = [  # lowest first; a module may import its own layer and those below
    ("core", ("kvdiag", "kvdiag.errors", "kvdiag.redaction", "kvdiag.numbers", "kvdiag.durations", "kvdiag.fileio",
              "kvdiag.extras", "kvdiag.signals", "kvdiag.bundle", "kvdiag.catalog", "kvdiag.catalog.*",
              "kvdiag.capacity", "kvdiag.capacity.*", "kvdiag.vllm_defaults", "kvdiag.vllm_metrics", "kvdiag.thresholds",
              # the input layer's leaf guards (a bounded file, JSON document, table, PromQL answer), below every reader
              "kvdiag.inputs", "kvdiag.inputs.files", "kvdiag.inputs.jsondoc", "kvdiag.inputs.http",
              "kvdiag.inputs.logfile", "kvdiag.inputs.promapi", "kvdiag.inputs.table")),
    # reading: the guarded input layer and the collectors that turn logs, pages and PromQL answers into a bundle
    ("collect", ("kvdiag.inputs.*", "kvdiag.collect", "kvdiag.collect.*", "kvdiag.pages")),
    # the derived signals (the top-level modules today; the kvdiag/derive/ package of issue 26's derive branch)
    ("derive", ("kvdiag.derive", "kvdiag.derive.*", "kvdiag.derive_*", "kvdiag.windows")),
    # judging: the rules engine, and the what-if scheduler model with its workloads and step-cost parser
    ("engine", ("kvdiag.engine", "kvdiag.engine.*", "kvdiag.inputs.rules", "kvdiag.simulate", "kvdiag.simulate.*")),
    # showing: the report model and its renderers, the simulator's page, the Prometheus rule and Grafana exports
    ("report", ("kvdiag.report", "kvdiag.report.*", "kvdiag.simulate.html", "kvdiag.timeline", "kvdiag.export",
                "kvdiag.dashboards")),
    # a verb's work below its click command: collect → derive → judge → report, for one command each
    ("pipelines", ("kvdiag.analyze", "kvdiag.check", "kvdiag.diff", "kvdiag.watch", "kvdiag.record",
                   "kvdiag.exporter")),
    # the click commands, one module per verb, the group and the entry points
    ("commands", ("kvdiag.commands", "kvdiag.commands.*", "kvdiag.cli", "kvdiag.__main__")),
]
"""A name without ``*`` places one module and wins over a pattern (``kvdiag.inputs.rules`` is the input layer's
face of the rules engine's YAML guard, :func:`kvdiag.engine.model.bounded_yaml`: it sits on the engine)."""

KNOWN_UPWARD: dict[tuple[str, str], str] = {}
"""(importing module, imported module pattern) → why the arrow to a higher layer is there for now."""

KNOWN_CIRCLES: dict[frozenset[str], str] = {}
"""The modules of one import circle (a strongly connected component) → why it is left for now."""

MAX_LINES = 800
LONG_MODULES: dict[str, str] = {
    "collect/metrics.py": "the page collector, 815 lines: to be split with collect/logs.py (issue 26)",
}
"""Modules allowed over :data:`MAX_LINES` for now, path under ``kvdiag/`` → why. Catalogue data is JSON/YAML (no
module), so it is not counted."""


# --- the graph ----------------------------------------------------------------------------------------------------

def modules(root: Path) -> dict[str, Path]:
    """Dotted name → file for every module of the package at ``root`` (a package is its ``__init__.py``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _target(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The package's modules that module ``name`` (file ``path``) imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {_target(a.name, mods) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:  # ``from pkg import submodule`` points at the submodule, else at ``pkg``
                found.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else _target(mod, mods))
    return {m for m in found if m and m != name}


def graph(root: Path) -> dict[str, set[str]]:
    mods = modules(root)
    return {name: imports_of(name, path, mods) for name, path in mods.items()}


def layer_of(name: str, layers=LAYERS) -> list[str]:
    """The layers that place ``name``: the one naming it exactly, else every one with a matching pattern."""
    exact = [layer for layer, pats in layers if name in pats]
    return exact or [layer for layer, pats in layers if any("*" in p and fnmatchcase(name, p) for p in pats)]


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def problems(edges: dict[str, set[str]], layers=LAYERS, upward=KNOWN_UPWARD, known_circles=KNOWN_CIRCLES) -> list[str]:
    """Every breach of the layering in ``edges``, one line each (empty: none)."""
    out = []
    rank = {layer: i for i, (layer, _) in enumerate(layers)}
    placed = {}
    for name in sorted(edges):
        where = layer_of(name, layers)
        if len(where) != 1:
            out.append(f"{name}: placed in {len(where)} layers {where}: put it in exactly one of LAYERS")
        else:
            placed[name] = where[0]
    used = set()
    for name in sorted(placed):
        for dep in sorted(edges[name]):
            if dep not in placed or rank[placed[dep]] <= rank[placed[name]]:
                continue
            allowed = [k for k in upward if k[0] == name and fnmatchcase(dep, k[1])]
            used |= set(allowed)
            if not allowed:
                out.append(f"{name} ({placed[name]}) imports {dep} ({placed[dep]}): a lower layer imports a higher one")
    out += [f"KNOWN_UPWARD {k}: no such arrow any more: delete the entry" for k in upward if k not in used]
    found = circles(edges)
    out += [f"import circle: {' <-> '.join(sorted(c))}" for c in found if c not in known_circles]
    out += [f"KNOWN_CIRCLES {sorted(c)}: no such circle any more: delete the entry" for c in known_circles
            if c not in found]
    return out


# --- kvdiag itself ------------------------------------------------------------------------------------------------

def test_every_module_in_one_layer_no_arrow_up_no_circle():
    edges = graph(PKG)
    assert len(edges) > 80, sorted(edges)  # the walk found the package
    found = problems(edges)
    assert not found, "\n".join(found)


def test_the_named_circles_are_gone():
    """The three circles issue 26 names stay broken (each would also fail the test above)."""
    found = circles(graph(PKG))
    for pair in ({"kvdiag.cli", "kvdiag.commands.diff"}, {"kvdiag.cli", "kvdiag.__main__"},
                 {"kvdiag.report.diff_render", "kvdiag.report.diff_html"},
                 {"kvdiag.commands.simulate", "kvdiag.simulate.html"}):
        assert not any(pair <= c for c in found), (pair, found)


def test_renderers_and_the_simulator_import_no_command():
    edges = graph(PKG)
    for name, deps in edges.items():
        if name.startswith(("kvdiag.report", "kvdiag.simulate")):
            bad = sorted(d for d in deps if layer_of(d) == ["commands"])
            assert not bad, f"{name} imports {bad}"


def test_one_module_per_verb():
    """Every verb ``kvdiag --help`` lists is a module of kvdiag/commands/ holding its click command."""
    from kvdiag.cli import cli

    for verb, command in cli.commands.items():
        assert command.callback.__module__ == f"kvdiag.commands.{verb}", (verb, command.callback.__module__)


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_no_module_over_800_lines(path):
    rel = str(path.relative_to(PKG))
    lines = len(path.read_text(encoding="utf-8").splitlines())
    if rel in LONG_MODULES:
        assert lines > MAX_LINES, f"{rel}: {lines} lines now: delete its LONG_MODULES entry"
    else:
        assert lines <= MAX_LINES, f"{rel}: {lines} lines, more than {MAX_LINES}: split it"


def test_long_module_exceptions_exist():
    missing = [rel for rel in LONG_MODULES if not (PKG / rel).is_file()]
    assert not missing, f"LONG_MODULES names files that are gone: {missing}: delete their entries"


# --- the checker can fail -----------------------------------------------------------------------------------------

def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "kvdiag"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_the_checker_sees_a_circle_through_a_function_level_import(tmp_path):
    root = _package(tmp_path, {"errors.py": "from .redaction import redact\n",
                               "redaction.py": "def redact():\n    from .errors import X\n"})
    found = problems(graph(root), upward={}, known_circles={})
    assert found == ["import circle: kvdiag.errors <-> kvdiag.redaction"], found


def test_the_checker_sees_an_arrow_up_and_an_unplaced_module(tmp_path):
    root = _package(tmp_path, {"collect/__init__.py": "", "collect/logs.py": "from ..report import render\n",
                               "report/__init__.py": "", "report/render.py": "from kvdiag.collect import logs\n",
                               "newthing.py": "from . import errors\n", "errors.py": ""})
    found = problems(graph(root), upward={}, known_circles={})
    assert "kvdiag.collect.logs (collect) imports kvdiag.report.render (report): a lower layer imports a higher one" \
        in found, found
    assert any(f.startswith("kvdiag.newthing: placed in 0 layers") for f in found), found
    assert "import circle: kvdiag.collect.logs <-> kvdiag.report.render" in found, found


def test_a_stale_exception_fails(tmp_path):
    root = _package(tmp_path, {"errors.py": ""})
    found = problems(graph(root), upward={("kvdiag.errors", "kvdiag.cli"): "gone"},
                     known_circles={frozenset({"kvdiag.a", "kvdiag.b"}): "gone"})
    assert len(found) == 2 and all("delete the entry" in f for f in found), found


def test_every_package_is_shipped():
    """A new package of kvdiag/ (commands/, derive/) is listed in pyproject's packages, or the wheel lacks it."""
    import re

    line = re.search(r"^packages = \[(.*)\]$", (PKG.parent / "pyproject.toml").read_text(), flags=re.M)
    listed = set(re.findall(r'"([^"]+)"', line.group(1)))  # (tomllib is Python 3.11+; kvdiag runs on 3.10)
    found = {name for name, path in modules(PKG).items() if path.name == "__init__.py"}
    assert found <= listed, sorted(found - listed)
