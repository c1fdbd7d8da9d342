"""Phrase matching: a message found by the fixed phrases of a catalogued template, in order, with its numbers read
by their labels — tolerant of what pasting and other vLLM versions do to the exact text (issue 24).

The exact matcher (:meth:`kvdiag.catalog.Catalog.match`) needs every literal character of a template. Real pastes
and unreleased wordings differ: one character changed or dropped (a nightly drops the ``(`` before a GiB figure),
``GB`` for ``GiB``, a reworded tail, the start or end cut away, words glued or split by a wrap. Here a message and
a template are both read as **tokens** (words, numbers; punctuation and blanks ignored) and aligned with a local
alignment (Smith-Waterman over tokens):

* a template word matches a message word when equal ignoring case, or one edit apart (words of 4+ characters; two
  edits from 9), or as units of the same size (``GB``/``GiB``, ``MB``/``MiB``);
* a number placeholder takes one number token, a free-text placeholder any run of tokens;
* a template word missing from the message, or a message word the template does not have, costs a little, so a
  reworded tail or an inserted word does not break the match; the ends of either may be missing (a cut).

A message is read as a template when the aligned stretch holds at least :data:`MIN_CHARS` characters of the
template's literal words and 80 % of the literal characters of the stretch of the template it spans, and either
covers 40 % of the template's literal text, matches :data:`MIN_LONG` characters (a long message cut short), or is a
cut (the stretch reaches the template's start and the message's end, or the template's end and the message's start)
of three words or more. A
number placeholder's value is kept only when the literal word before it (its label) matched — or, for a number
opening the template, the word after it.

Candidates are the entries sharing the most words of 4+ characters with the message (an inverted index), so only a
few alignments run per line, and only for lines the exact matcher and the parser's own events did not read.
"""

from __future__ import annotations

import re

#: word or number tokens of a message / template literal (identifiers keep their underscores: max_model_len)
_TOKEN = re.compile(r"[-+]?(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?%?|[A-Za-z_][A-Za-z0-9_]*")
_IS_NUM = re.compile(r"[-+]?(?:\d|\.\d)")
_UNIT = {"gb": "g", "gib": "g", "g": "g", "mb": "m", "mib": "m", "kb": "k", "kib": "k", "tb": "t", "tib": "t"}
MIN_CHARS = 16
MIN_PICK = 6          # shared word characters (a common word counts 1) that make an entry a candidate
MIN_LONG = 40
MAX_TOKENS = 160       # message tokens an alignment looks at (the first ones: the cost is tokens x template)
CANDIDATES = 10
SKIP_T = 1.5           # a template word the message lacks
SKIP_M = 1.0           # a message token the template lacks (outside a free-text placeholder)


_URL = re.compile(r"https?://\S+")


def tokens(text: str) -> list[str]:
    """Word and number tokens of ``text``; web addresses left out (a documentation link ends many messages: a
    pasted piece holding only the link names no message)."""
    return _TOKEN.findall(_URL.sub(" ", text) if "://" in text else text)


def _close(a: str, b: str) -> int:
    """Edit distance of ``a`` and ``b`` when at most 2, else 3 (the early-exit band of a Levenshtein)."""
    if a == b:
        return 0
    la, lb = len(a), len(b)
    if abs(la - lb) > 2:
        return 3
    prev = list(range(lb + 1))
    for i in range(1, la + 1):
        cur = [i] + [0] * lb
        ca = a[i - 1]
        best = cur[0]
        for j in range(1, lb + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != b[j - 1]))
            if cur[j] < best:
                best = cur[j]
        if best > 2:
            return 3
        prev = cur
    return min(prev[lb], 3)


def word_score(tw: str, mw: str) -> float:
    """Characters a template word ``tw`` (lower case) scores against a message token ``mw`` (lower case); 0 = no
    match."""
    if tw == mw:
        return float(len(tw))
    if tw in _UNIT and _UNIT.get(mw) == _UNIT[tw]:
        return float(len(tw))
    n = len(tw)
    if n < 4 or _IS_NUM.match(mw):
        return 0.0
    d = _close(tw, mw)
    if d == 1 or (d == 2 and n >= 9):
        return n - d - 0.5
    return 0.0


class Template:
    """A template as tokens: ``("w", word_lower)``, ``("n", placeholder index)``, ``("t", placeholder index)``."""

    __slots__ = ("toks", "chars", "words")

    def __init__(self, pieces: list, placeholders: list[dict]) -> None:
        toks: list[tuple[str, object]] = []
        for p in pieces:
            if isinstance(p, str):
                toks += [("w", w.lower()) for w in tokens(p)]
            elif placeholders[p].get("type") == "number":
                toks.append(("n", p))
            elif not toks or toks[-1][0] != "t":
                toks.append(("t", p))
        self.toks = toks
        self.chars = sum(len(v) for k, v in toks if k == "w")
        self.words = {v for k, v in toks if k == "w" and len(v) >= 3 and not v[0].isdigit()}


def align(t: Template, msg_toks: list[str]) -> tuple[float, float, float, dict[int, str], int] | None:
    """Local alignment of template ``t`` with the message tokens: ``(score, matched literal chars, literal chars of the
    template stretch spanned, {placeholder: number text}, matched words)`` of the best stretch, or None."""
    T = t.toks
    M = msg_toks
    low = [m.lower() for m in M]
    isnum = [bool(_IS_NUM.match(m)) for m in M]
    n, m = len(T), len(M)
    if not n or not m:
        return None
    # H[i][j]: best score of a stretch ending at template token i-1 and message token j-1; B: back pointers
    H = [[0.0] * (m + 1) for _ in range(n + 1)]
    B = [[0] * (m + 1) for _ in range(n + 1)]  # 0 stop, 1 diag, 2 up (skip template), 3 left (skip message)
    best, bi, bj = 0.0, 0, 0
    for i in range(1, n + 1):
        kind, val = T[i - 1]
        Hi, Hp, Bi = H[i], H[i - 1], B[i]
        for j in range(1, m + 1):
            if kind == "w":
                s = word_score(val, low[j - 1])
                d = Hp[j - 1] + s if s else -1.0
            elif kind == "n":
                d = Hp[j - 1] + 2.0 if isnum[j - 1] else -1.0
            else:
                d = Hp[j - 1]
            up = Hp[j] - (SKIP_T if kind == "w" else 0.0)
            left = Hi[j - 1] - (0.0 if kind == "t" else SKIP_M)
            h, b = 0.0, 0
            if d > h:
                h, b = d, 1
            if up > h:
                h, b = up, 2
            if left > h:
                h, b = left, 3
            Hi[j] = h
            Bi[j] = b
            if h > best:
                best, bi, bj = h, i, j
    if best <= 0:
        return None
    # trace back: matched template tokens, number values
    i, j = bi, bj
    matched: dict[int, int] = {}  # template token index -> message token index
    while i > 0 and j > 0 and B[i][j]:
        b = B[i][j]
        if b == 1:
            matched[i - 1] = j - 1
            i, j = i - 1, j - 1
        elif b == 2:
            i -= 1
        else:
            j -= 1
    lo, hi = i, bi  # template stretch [lo, hi)
    got = 0.0
    words = 0
    values: dict[int, str] = {}
    for k, (kind, val) in enumerate(T[lo:hi], start=lo):
        if kind == "w" and k in matched:
            s = word_score(val, low[matched[k]])
            if s:
                got += s
                words += 1
    span = sum(len(v) for kind, v in T[lo:hi] if kind == "w")
    for k, (kind, val) in enumerate(T[lo:hi], start=lo):
        if kind != "n" or k not in matched:
            continue
        label = next((q for q in range(k - 1, lo - 1, -1) if T[q][0] == "w"), None)
        if label is None:
            label = next((q for q in range(k + 1, hi) if T[q][0] == "w"), None)
        if label is not None and label in matched and word_score(T[label][1], low[matched[label]]):
            values[val] = M[matched[k]].rstrip("%")
    # a cut: the stretch reaches the template's start and the message's end (end cut away), or the template's end and
    # the message's start (start cut away)
    tail = all(T[q][0] != "w" for q in range(hi, n))
    head = all(T[q][0] != "w" for q in range(0, lo))
    first_m = min(matched.values()) if matched else 0
    last_m = max(matched.values()) if matched else 0
    cut = (head and last_m >= m - 2) or (tail and first_m <= 1)
    return best, got, span, values, words if not cut else -words


def accept(t: Template, got: float, span: float, words: int) -> bool:
    """Is an alignment that matched ``got`` literal characters of a template stretch holding ``span`` a reading?
    ``words`` < 0: the stretch is a cut (it reaches an end of both the template and the message)."""
    cut = words < 0
    words = abs(words)
    if words < 2 or got < MIN_CHARS or span <= 0:
        return False
    if got < 0.8 * span:
        return False
    return got >= 0.4 * t.chars or got >= MIN_LONG or (cut and words >= 3)
