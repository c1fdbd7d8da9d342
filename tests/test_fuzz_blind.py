"""Issue 29: a fast, seeded sample of the blind fuzz campaign (``benchmarks/fuzzgen_blind.py``, written without
reading kvdiag's input layer): 168 generated inputs (8 per family) over every command and input kind, through the real CLI
entry point, each judged by the campaign's oracles (no traceback, no "internal error", a documented exit code, no
planted secret in any output or written file, inputs never overwritten, Go template text never exported verbatim, no
script in HTML, bounded time). Any violation fails, with the family, the input's seed and the finding; replay one
with ``python benchmarks/fuzzgen_blind.py show FAMILY SEED``.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import fuzzgen_blind as blind  # noqa: E402

SEED = "29"
TOTAL = 168  # 8 per family: under a minute on a shared 2-core machine
PER_FAMILY = -(-TOTAL // len(blind.FAMILIES))


@pytest.fixture(scope="module")
def scratch():
    tmp = blind.scratch_dir()
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


def test_the_sample_covers_every_command_and_plants_60_secrets():
    commands = set()
    for family, (gen, _run) in blind.FAMILIES.items():
        for i in range(PER_FAMILY):
            argv = [a for a in json.loads(gen(random.Random(f"{SEED}:{family}:{i}")))["argv"] if a != "--debug"]
            commands.add(argv[0] if argv[0] != "rules" else f"rules {argv[1]}")
    assert {"analyze", "check", "diff", "simulate", "estimate", "record", "rules list", "rules explain",
            "rules test", "rules export"} <= commands
    assert len(set(blind.NEEDLES)) >= 60 and len({s[0] for s in blind.SECRETS}) >= 10


@pytest.mark.parametrize("family", list(blind.FAMILIES))
def test_blind_fuzz_sample(family, scratch):
    gen, run = blind.FAMILIES[family]
    found = []
    for i in range(PER_FAMILY):
        key = f"{SEED}:{family}:{i}"
        outcome = run(gen(random.Random(key)), scratch)
        if outcome not in blind.OK_OUTCOMES:
            found.append(f"{key} {outcome}: {blind.LAST_FINDING[:400]}")
    assert not found, f"{len(found)} of {PER_FAMILY} inputs broke an oracle:\n" + "\n".join(found)
