"""Every command's ``--help`` lists its exit codes, and option metavars are one vocabulary across commands
(issue 11): the same option shows the same metavar everywhere, durations are ``DURATION``, GiB amounts ``GiB``, and
no option falls back to click's type names (TEXT, NUMBER, INTEGER RANGE, FLOAT)."""

from __future__ import annotations

import re

import click
import pytest

from conftest import run_kvdiag
from kvdiag.cli import cli

COMMANDS = {  # command path → the exit codes its help must list
    (): {"0", "1", "2", "3", "130"},
    ("analyze",): {"0", "1", "2", "3", "130"},
    ("check",): {"0", "1", "2", "3", "130"},
    ("record",): {"0", "3", "130"},
    ("estimate",): {"0", "2", "3"},  # 2: vLLM would refuse to start (issue 25)
    ("diff",): {"0", "1", "3", "130"},  # issue 25: 0 a comparison made, 1 a regression, 3 could not compare
    ("simulate",): {"0", "3"},
    ("rules",): {"0", "1", "3"},
    ("rules", "list"): {"0", "3"},
    ("rules", "explain"): {"0", "3"},
    ("rules", "test"): {"0", "1", "3"},
    ("rules", "export"): {"0", "3"},
    ("watch",): {"0", "3"},
    ("dashboards",): {"0", "3"},
    ("dashboards", "export"): {"0", "3"},
}


def _walk(cmd: click.Command, path: tuple = ()):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _walk(sub, path + (name,))


def test_every_command_is_covered():
    assert {path for path, _ in _walk(cli)} == set(COMMANDS)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "kvdiag")
def test_help_lists_the_exit_codes(path):
    res = run_kvdiag(*path, "--help")
    assert res.code == 0 and res.err == ""
    parts = re.split(r"^\s*Exit codes:\n", res.out, maxsplit=1, flags=re.M)
    assert len(parts) == 2, res.out
    rows = parts[1].splitlines()
    codes = [m.group(1) for m in (re.match(r"\s*(\d+)\s{2,}\S", row) for row in rows) if m]
    assert set(codes) == COMMANDS[path], rows
    assert len(codes) == len(set(codes)), rows
    assert max(len(line) for line in res.out.splitlines()) <= 100


def _metavars():
    """(command path, option name, metavar, param) for every option that takes a value."""
    for path, cmd in _walk(cli):
        ctx = click.Context(cmd, info_name=" ".join(("kvdiag",) + path))
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.is_flag and not p.hidden:
                yield path, max(p.opts, key=len), p.make_metavar(ctx), p


def test_one_metavar_per_option_and_no_type_names():
    seen: dict[str, set] = {}
    for path, name, metavar, p in _metavars():
        assert metavar.split()[0] not in ("TEXT", "NUMBER", "INTEGER", "FLOAT", "FILENAME", "PATH"), (path, name,
                                                                                                   metavar)
        if not isinstance(p.type, click.Choice):  # --format's choices differ per command, legitimately
            seen.setdefault(name, set()).add(metavar)
    mixed = {name: m for name, m in seen.items() if len(m) > 1}
    assert not mixed, mixed
    assert seen["--gpu-memory"] == {"GiB"} and seen["--kv-cache-memory"] == {"GiB"}
    for name in ("--duration", "--interval", "--timeout", "--step", "--window", "--for"):
        assert seen[name] == {"DURATION"}, (name, seen[name])
    assert seen["--gpu-memory-utilization"] == {"RATIO"} and seen["--tensor-parallel-size"] == {"N"}
