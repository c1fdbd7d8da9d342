"""Rule templates with optional clauses (``rules/README.md``, "Templates").

A template is text with fields (``{signal.agg:spec}``, ``{param}``, ``{signal.text}``) and clauses:

* ``[[ … ]]`` — an optional clause, shown only when every field directly inside it has data; otherwise it drops
  out with its text (as a Prometheus alert template's ``{{ if }} … {{ end }}`` does). Clauses nest: a nested
  clause drops out on its own, and its fields do not decide whether the outer one is shown.
* ``[[ … || … ]]`` — a clause with branches: the first branch whose fields all have data is shown; when none has,
  nothing (a last branch without fields is an "else" and always shows).
* A branch, or a whole variant, may start with conditions on numbers it does not print, ending with ``:``: ``?signal.agg`` (shown only
  when that number has data), ``!signal.agg`` (only when it has none), several separated by spaces; one space after the
  ``:`` is not part of the text: ``[[!num_preemptions.increase:  and {num_requests_swapped.max:.0f} swapped]]`` (two
  spaces: the text starts with one), ``[[?kv_block_reuse_gap_p50.last: a median||only a median]]``.

This module parses (cached) and lists clauses; :func:`kvdiag.engine.evaluate.render` fills them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
import re

# a template field: {param}, {param:spec}, {signal.agg}, {signal.agg:spec}, {signal.text}
FIELD = re.compile(r"\{([a-z_][a-z0-9_]*)(?:\.([a-z0-9]+))?(?::([^{}]*))?\}")
_CONDS = re.compile(r"((?:[?!][a-z_][a-z0-9_]*\.[a-z0-9]+ ?)+):")
_COND = re.compile(r"([?!])([a-z_][a-z0-9_]*)\.([a-z0-9]+)")


@dataclass(frozen=True)
class Field:
    """``{name.agg:spec}`` (``agg`` None for a param); ``raw`` is the field as written."""

    name: str
    agg: str | None
    spec: str
    raw: str


@dataclass(frozen=True)
class Branch:
    """One branch of a clause: its conditions (``(wanted, signal, agg)``, ``wanted`` False for ``!``) and pieces."""

    conds: tuple[tuple[bool, str, str], ...]
    pieces: tuple


@dataclass(frozen=True)
class Clause:
    """``[[ branch || branch … ]]``; ``path`` numbers it in the template (``"0"``, ``"0.1"`` for nested ones)."""

    path: str
    branches: tuple[Branch, ...]


class TemplateSyntaxError(ValueError):
    """An unbalanced ``[[``/``]]``, a ``||`` outside a clause, or a clause that names no number."""


def leading_conditions(template: str) -> tuple[tuple[tuple[bool, str, str], ...], str]:
    """The conditions a whole variant starts with (``?gpu_total_bytes.max: Leave headroom…``), and the rest: a variant
    whose conditions do not hold is skipped like one with a missing number (so a remedy whose clauses could all drop
    out is dropped instead of saying nothing)."""
    m = _CONDS.match(template)
    if not m:
        return (), template
    rest = template[m.end():]
    return (tuple((c.group(1) == "?", c.group(2), c.group(3)) for c in _COND.finditer(m.group(1))),
            rest[1:] if rest.startswith(" ") else rest)  # "?a.max: Text": the space after the colon is not text


@lru_cache(maxsize=4096)
def parse(template: str) -> tuple:
    """The template as pieces: ``str`` text, :class:`Field` and :class:`Clause`.

    Raises:
        TemplateSyntaxError: ``[[`` without ``]]`` (or the reverse), ``||`` outside a clause, a clause with no field
            or condition in a branch other than the last of several (it would always show, or hide the others).
    """
    pos = 0
    counter = [0]

    def pieces(depth: int, prefix: str, stop: tuple[str, ...]) -> tuple[tuple, str]:
        nonlocal pos
        out: list = []
        text: list[str] = []
        n_clause = 0

        def flush():
            if text:
                out.append("".join(text))
                text.clear()

        while pos < len(template):
            if template.startswith("[[", pos):
                flush()
                pos += 2
                branches = []
                path = f"{prefix}{n_clause}"
                n_clause += 1
                while True:
                    m = _CONDS.match(template, pos)
                    conds: tuple = ()
                    if m:
                        conds = tuple((c.group(1) == "?", c.group(2), c.group(3))
                                      for c in _COND.finditer(m.group(1)))
                        pos = m.end() + (1 if template.startswith(" ", m.end()) else 0)  # ": text": not the space
                    body, end = pieces(depth + 1, f"{path}.{len(branches)}.", ("||", "]]"))
                    branches.append(Branch(conds, body))
                    if end == "]]":
                        break
                    if end == "":
                        raise TemplateSyntaxError(f"'[[' at clause {path} has no closing ']]'")
                for i, b in enumerate(branches):
                    last_of_several = len(branches) > 1 and i == len(branches) - 1
                    if not b.conds and not _names_number(b.pieces) and not last_of_several:
                        raise TemplateSyntaxError(
                            f"clause [[{_plain(b.pieces)[:40]}…]] names no number, so it would always show (a clause "
                            "drops out when a number it names is missing)")
                out.append(Clause(path, tuple(branches)))
                continue
            if depth and (template.startswith("||", pos) or template.startswith("]]", pos)):
                end = template[pos:pos + 2]
                pos += 2
                flush()
                return tuple(out), end
            if template.startswith("]]", pos):
                raise TemplateSyntaxError("']]' without an opening '[['")
            if template.startswith("||", pos):
                raise TemplateSyntaxError("'||' outside a [[ … ]] clause")
            if template[pos] == "{":
                m = FIELD.match(template, pos)
                if m:
                    flush()
                    out.append(Field(m.group(1), m.group(2), m.group(3) or "", m.group(0)))
                    pos = m.end()
                    continue
            text.append(template[pos])
            pos += 1
        flush()
        return tuple(out), ""

    body, _ = pieces(0, "", ())
    return body


def _names_number(pieces: tuple) -> bool:
    return any(isinstance(p, Field) for p in pieces)


def _plain(pieces: tuple) -> str:
    return "".join(p if isinstance(p, str) else p.raw if isinstance(p, Field) else "[[…]]" for p in pieces)


def walk(pieces: tuple):
    """Every :class:`Field` and :class:`Clause` of a parsed template, nested ones included."""
    for p in pieces:
        if isinstance(p, Field):
            yield p
        elif isinstance(p, Clause):
            yield p
            for b in p.branches:
                yield from walk(b.pieces)


def branch_ids(template: str) -> list[str]:
    """The id of every clause branch of ``template`` (``"0.1"``: clause 0, branch 1), in the order written."""
    return [f"{c.path}/{i}" for c in walk(parse(leading_conditions(template)[1])) if isinstance(c, Clause)
            for i in range(len(c.branches))]


def texts_of(pieces: tuple) -> str:
    """The literal text of a template with every clause branch in (for word checks over all a rule can say)."""
    out = []
    for p in pieces:
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, Field):
            out.append(p.raw)
        else:
            out.append(" ".join(texts_of(b.pieces) for b in p.branches))
    return "".join(out)
