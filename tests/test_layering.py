"""Module boundaries (issues 14 and 18): renderers take a finished report and import nothing from ``collect/``;
the text and Markdown renderers share ``report/common.py`` and never import each other; collectors import nothing
from ``engine/``. Read from the source with ``ast`` (an import inside a function counts too)."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "kvdiag"


def _imports(path: Path) -> set[str]:
    """Absolute module names ``path`` imports (relative imports resolved against the ``kvdiag`` package)."""
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    here = parts[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out


@pytest.mark.parametrize("path", sorted((PKG / "report").glob("*.py")), ids=lambda p: p.name)
def test_renderers_import_nothing_from_collect(path):
    bad = sorted(m for m in _imports(path) if m.startswith("kvdiag.collect"))
    assert not bad, f"{path.name} imports {bad}"


@pytest.mark.parametrize("path", sorted((PKG / "collect").glob("*.py")), ids=lambda p: p.name)
def test_collectors_import_nothing_from_engine(path):
    bad = sorted(m for m in _imports(path) if m.startswith("kvdiag.engine"))
    assert not bad, f"{path.name} imports {bad}"


def test_text_and_markdown_renderers_do_not_import_each_other():
    assert not any(m.startswith("kvdiag.report.markdown") for m in _imports(PKG / "report" / "render.py"))
    assert not any(m.startswith("kvdiag.report.render") for m in _imports(PKG / "report" / "markdown.py"))


def test_the_checker_sees_a_relative_import(tmp_path):
    """The check can fail: a module with ``from ..collect.logread import x`` is seen as importing collect."""
    fake = PKG / "report" / "_layering_probe.py"
    fake.write_text("def f():\n    from ..collect.logread import open_log\n", encoding="utf-8")
    try:
        assert "kvdiag.collect.logread" in _imports(fake)
    finally:
        fake.unlink()
