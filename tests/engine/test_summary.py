"""Issue 26, "verdict summaries as data": kvdiag/engine/summary.py's Summary holds the parts the verdict is made of,
each format renders them (text, Markdown, HTML, ``kvdiag check``'s sentences), and ``check`` reads its fields."""

from __future__ import annotations

from dataclasses import replace
import re

from kvdiag.check import status_output
from kvdiag.engine.evaluate import Finding, Verdict, require_keeping_up, verdict
from kvdiag.engine.model import load_rules
from kvdiag.engine.summary import Summary

# what check.py split a concatenated summary with before issue 26 (kept here as the reference for the sentences)
_OLD_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


def _finding(rule_id, cls, status, severity, message, priority=50):
    return Finding(rule_id=rule_id, cls=cls, status=status, severity=severity, message=message, priority=priority)


def test_fired_verdict_keeps_its_parts():
    fs = [_finding("CAP001", "capacity_pressure", "fires", "critical", "The pool is full.", 60),
          _finding("QUE001", "queueing", "fires", "warning", "The queue grows.")]
    v = verdict(fs)
    assert v.parts == Summary("The pool is full.", also_firing=("queueing",))
    assert v.summary == "The pool is full. (also firing: queueing)"
    assert v.parts.sentences() == ["The pool is full.", "(also firing: queueing)"]


def test_healthy_verdict_counts_and_notes_are_fields():
    fs = [_finding("CAP001", "capacity_pressure", "quiet", "critical", "KV usage peaked at 40.0%."),
          _finding("OK001", "healthy", "fires", "ok", "The KV-size line is not the pool. Read the blocks line.")]
    v = verdict(fs)
    assert v.parts.lead == "No KV-cache or GPU-memory problem found"
    assert v.parts.reasons == ("1 rule(s) judged quiet",)
    assert v.parts.notes == ("The KV-size line is not the pool. Read the blocks line.",)
    assert v.parts.sentences() == ["No KV-cache or GPU-memory problem found: 1 rule(s) judged quiet.",
                                   "Note: The KV-size line is not the pool.", "Read the blocks line."]


def test_a_part_that_ends_no_sentence_does_not_start_one():
    s = Summary("The pool is full at 98%", also_firing=("queueing",), after=("then more",))
    assert s.sentences() == ["The pool is full at 98% (also firing: queueing) then more"]


def test_sentences_are_what_the_old_regex_split_gave_for_every_shipped_message():
    """For each shipped rule's message and quiet texts (as written, fields unfilled) in each summary shape, the
    sentences equal the old split of the concatenated text: check's bytes do not change."""
    texts = [t for r in load_rules() for t in r.message + r.quiet]
    for t in texts:
        for s in (Summary(t), Summary(t, also_firing=("queueing", "prefix_cache_eviction")),
                  Summary("No KV-cache or GPU-memory problem found", ("3 rule(s) judged quiet",), notes=(t, t)),
                  Summary("Not judged healthy", ("a", t), after=("The window 30 s too short.",)),
                  Summary(t).plus("Some input values were out of their domain and skipped (see the input notes).")):
            assert s.sentences() == [x for x in _OLD_SENTENCE.split(" ".join(s.text().split())) if x], t


LONG = ("The window 60 s too short to judge prefix_cache_eviction (a hit-rate trend needs at least 3 min): not ruled "
        "out; a window of at least 3 min judges them.")


def test_check_reads_the_fields_and_html_markdown_render_the_same_text():
    from kvdiag.report.htmlpage import _e
    from kvdiag.report.markdown import _text

    s = Summary("Not judged healthy", ("2 preemption(s) in the window", "the waiting queue grew 0 → 5 (rose)"),
                after=(LONG,))
    v = Verdict("inconclusive", "ok", "low", s)
    assert v.summary == ("Not judged healthy: 2 preemption(s) in the window; the waiting queue grew 0 → 5 (rose). "
                         + LONG)
    assert v.parts.html(_e) == _e(v.summary) and v.parts.markdown(_text) == _text(v.summary)

    class R:
        verdict = v
        findings: list = []

    out = status_output(3, R(), "", [])
    assert out.split("\n") == ["KVDIAG UNKNOWN - inconclusive: Not judged healthy: 2 preemption(s) in the window; the "
                               "waiting queue grew 0 → 5 (rose).",
                               LONG]
    # a Verdict given a plain sentence (callers outside the engine) has it as its lead; replace() keeps the parts
    p = Verdict("inconclusive", "ok", "low", "Not judged: no answer")
    assert p.parts == Summary("Not judged: no answer")
    assert replace(v, confidence="medium").parts == s


def test_require_keeping_up_gives_reasons_as_fields():
    from kvdiag.bundle import Bundle

    b = Bundle()
    for i, (w, u) in enumerate([(0, 0.3), (2, 0.3), (5, 0.3), (9, 0.3)]):
        b.add("num_requests_waiting", w, f"p{i}", t=float(i * 15))
        b.add("kv_cache_usage", u, f"p{i}", t=float(i * 15))
    b.add("queue_grows", 1.0, "derived", text="rose on the last two samples")
    v = require_keeping_up(Verdict("healthy", "ok", "high", "No KV-cache or GPU-memory problem found."), b,
                           "window 45 s too short")
    assert v.primary == "inconclusive" and v.parts.lead == "Not judged healthy"
    assert v.parts.reasons and v.parts.after == ("The window 45 s too short.",)
    assert v.summary == "Not judged healthy: " + "; ".join(v.parts.reasons) + ". The window 45 s too short."
