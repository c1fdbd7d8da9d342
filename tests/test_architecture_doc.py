"""docs/architecture.md names one file per step of a metric's way (issue 26): every path it names exists, and every
``function`` it names beside a module is defined there — a moved file makes this fail, not a newcomer."""

from __future__ import annotations

import re

from conftest import ROOT

DOC = (ROOT / "docs" / "architecture.md").read_text()


def test_every_path_named_exists():
    paths = set(re.findall(r"`((?:kvdiag|rules|tools|docs|tests)/[A-Za-z0-9_./<>-]+?)`", DOC))
    paths |= {"kvdiag/" + p for p in re.findall(r"`((?:derive|collect|report|engine|commands|inputs|capacity|catalog|"
                                                 r"simulate)/[A-Za-z0-9_.-]+)`", DOC)}
    checked = 0
    for p in sorted(paths):
        if "<" in p:
            continue
        assert (ROOT / p).exists(), f"docs/architecture.md names {p}, which does not exist"
        checked += 1
    assert checked >= 15, checked


def test_functions_named_are_in_their_modules():
    pairs = re.findall(r"`(kvdiag/[A-Za-z0-9_/]+\.py)`,\s+`([a-z_]+)`", DOC)
    assert len(pairs) >= 3, pairs
    for path, func in pairs:
        assert re.search(rf"^def {func}\(", (ROOT / path).read_text(), re.M), f"{func} not defined in {path}"
