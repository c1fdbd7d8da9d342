"""A verdict's summary as data (issue 26): its parts, rendered once per format.

The verdict (:func:`kvdiag.engine.evaluate.verdict`, ``require_keeping_up``, ``kvdiag/analyze.py``'s guards) fills the
fields; the text, Markdown and HTML reports and ``kvdiag check``'s Nagios lines render them, so no format splits a
concatenated string back apart::

    <lead>[: <reason>; <reason>.][ (also firing: <class>, <class>)][ Note: <note>]…[ <after>]…
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import re

# where one free-text part (a rule's message, a note) holds several sentences: after . ! ? before a capital or "("
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
_ENDS = (".", "!", "?")
_STARTS = re.compile(r"[A-Z(]")


@dataclass(frozen=True)
class Summary:
    """The parts of a verdict's one-paragraph summary.

    Attributes:
        lead: the primary finding's message, or the verdict's own sentence ("No KV-cache … problem found: …").
        reasons: why (``lead: reason; reason.``), e.g. why a window does not show the server keeping up.
        also_firing: the other classes that fired.
        notes: the messages of firing ``healthy`` notes (each shown as ``Note: …``).
        after: further whole sentences (the short-window note, the input-domain notes of ``analyze``).
    """

    lead: str
    reasons: tuple[str, ...] = ()
    also_firing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    after: tuple[str, ...] = ()

    def plus(self, sentence: str) -> "Summary":
        """This summary with one more sentence at the end."""
        return replace(self, after=self.after + (sentence,))

    def _parts(self, esc=str) -> list[str]:
        """The parts in order, each already as it is written (``esc`` applied to the free text)."""
        first = esc(self.lead)
        if self.reasons:
            first += ": " + "; ".join(esc(r) for r in self.reasons) + "."
        out = [first]
        if self.also_firing:
            out.append(f"(also firing: {', '.join(esc(c) for c in self.also_firing)})")
        out += [f"Note: {esc(n)}" for n in self.notes]
        out += [esc(a) for a in self.after]
        return out

    def text(self, esc=str) -> str:
        """The plain-text paragraph (the JSON ``summary``, the text report, watch, diff); ``esc`` escapes each free-text
        part for a markup format (the glue between parts holds no markup)."""
        return " ".join(self._parts(esc))

    def markdown(self, esc) -> str:
        """The paragraph for Markdown, each free-text part through ``esc`` (``report/markdown.py``'s ``_text``)."""
        return self.text(esc)

    def html(self, esc) -> str:
        """The paragraph for HTML through ``esc`` (``report/htmlpage.py``'s ``_e``: redaction, which must see the
        whole paragraph, then escaping)."""
        return esc(self.text())

    def sentences(self) -> list[str]:
        """The paragraph as sentences, whitespace collapsed, for a status line that shows as many whole ones as fit
        (``kvdiag check``): each part starts a sentence when the one before ended one (``.``, ``!``, ``?``); a part's
        own free text (a rule's message of several sentences) is split at its sentence ends."""
        out: list[str] = []
        for part in self._parts():
            pieces = [s for s in _SENTENCE.split(" ".join(part.split())) if s]
            if not pieces:
                continue
            if out and not (out[-1].endswith(_ENDS) and _STARTS.match(pieces[0])):
                out[-1] = f"{out[-1]} {pieces[0]}"
                pieces = pieces[1:]
            out += pieces
        return out

    def __str__(self) -> str:
        return self.text()
