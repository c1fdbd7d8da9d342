"""Secrets out of every text kvdiag shows: one function, :func:`redact`, used by the collectors on what they store and
by the renderers on what they write (a module of its own so that neither side imports the other)."""

from __future__ import annotations

import re

_SECRET_KEY = r"(?:api[-_]?key|hf[-_]?token|token|passw(?:or)?d|secret|authorization|credentials?)"
# a value after a key: a [list] of items, a quoted string (spaces, commas and backslash-escaped quotes inside), or a
# bare word (commas inside, a trailing comma belongs to the enclosing Namespace/dict)
# (a bare word never starts with '(' or '|': "--api-key (default)" and a Markdown table's cell separator after a
# flag are not values)
_SECRET_VALUE = r"""(\[[^\]\n]*\]|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|(?:Bearer\s+|Basic\s+)?(?![(|])[^\s'",)\]}]+(?:,[^\s'",)\]}]+)*)"""
_SECRET_PATTERNS = [
    # --api-key VALUE / --api-key=VALUE / --hf-token ... (CLI flags echoed in 'args: ...' lines), and the argv-list
    # form ['--api-key', 'VALUE'] of a launcher's command line
    re.compile(r"(?i)(--" + _SECRET_KEY + r"(?:['\"]?\s*,\s*|[ =]+))" + _SECRET_VALUE),
    # api_key='x', "api_key": "x", 'api_key': ['x', 'y'], HF_TOKEN=x, hf_token: x, password=..., Authorization: x
    re.compile(r"(?i)(\b[\w-]*" + _SECRET_KEY + r"['\"]?\s*[:=]\s*)" + _SECRET_VALUE),
    re.compile(r"(?i)(\bBearer\s+)([A-Za-z0-9._~+/=-]+)"),
    # the password of URL userinfo: scheme://user:PASSWORD@host (up to the last '@': a password may hold / ? # @)
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s/:@'\"]*:)([^\s'\"]+)(?=@)"),
    # names with a SECRET / PASSWORD / KEY / CREDENTIAL word in them (AWS_SECRET_ACCESS_KEY=, AWS_ACCESS_KEY_ID=,
    # SECRET_KEY=, OPENAI_API_KEY=, db_password_file: …): whole underscore-separated words only, so settings such as
    # max_num_batched_tokens or monkey_patch stay
    re.compile(r"(?i)(\b(?:[a-z0-9]+_)*(?:secret|passw(?:or)?d|key(?!_value_)|credentials?)(?:_[a-z0-9]+)*['\"]?\s*[:=]\s*)"
               + _SECRET_VALUE),
    # pre-signed S3 URLs: X-Amz-Signature=…&X-Amz-Credential=…&X-Amz-Security-Token=…
    re.compile(r"(?i)(\bX-Amz-(?:Signature|Credential|Security-Token)=)([^&\s'\"]+)"),
    # an AWS access key id as the user of a userinfo: AKIA…:SECRET@host (with or without a scheme)
    re.compile(r"(\b(?:AKIA|ASIA)[0-9A-Z]{16}:)([^\s@'\"]+)(?=@)"),
    # bare well-known token shapes (last: the patterns above keep the key name before the value they hide)
    re.compile(r"()\b(hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_-]{16,}|ghp_[A-Za-z0-9]{20,}|xox[bap]-[A-Za-z0-9-]{10,}|"
               r"(?:AKIA|ASIA)[0-9A-Z]{16})\b"),
]
# patterns whose whole value becomes *** (no quotes or list kept): Bearer, URL/AKIA userinfo, X-Amz, bare shapes
_WHOLE = {2, 3, 5, 6, 7}
# C0 control characters but tab, newline and carriage return, DEL, and the bidirectional embedding / override /
# isolate controls (U+202A-202E, U+2066-2069: they reorder what a terminal or a page shows): '?' in a report
# a URL's query (every value hidden, whatever its name: ?jwt=…, ?x=…; a URL in a message shows its names only)
_URL_QUERY = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s?#'\"<>]*\?)([^\s#'\"<>]*)")
_QUERY_VALUE = re.compile(r"=[^&;]*")
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202a-\u202e\u2066-\u2069]")
_NONE_VALUES = {"none", "null", "false", "true", "''", '""', "[]"}
_QUOTED_ITEM = re.compile(r"""'[^'\n]*'|"[^"\n]*"|[^\s,'"\[\]]+""")


def _hide(value: str) -> str:
    """``***`` in place of one secret value, keeping its quotes or list brackets (``['***', '***']``)."""
    if value.lower() in _NONE_VALUES or value.strip("'\"").lower() in _NONE_VALUES - {"''", '""', "[]"}:
        return value
    if value.startswith("["):
        return _QUOTED_ITEM.sub(lambda m: _hide(m.group(0)), value)
    if value[:1] in "'\"" and len(value) >= 2:
        return value[0] + "***" + value[-1]
    for prefix in ("Bearer ", "Basic ", "bearer ", "basic "):
        if value.startswith(prefix):
            return prefix + "***"
    return "***"


def redact(text: str, controls: bool = True) -> str:
    """Replace secret values in ``text`` by ``***``.

    Covers ``--api-key VALUE`` and similar flags (also the argv-list form ``['--api-key', 'VALUE']``),
    ``api_key='…'`` (spaces and commas inside quotes) / ``"api_key": "…"`` / ``'api_key': ['…', '…']`` (every
    item) / ``HF_TOKEN=…`` / ``password=…`` / ``Authorization: Bearer …`` assignments as vLLM's ``args:`` and
    ``non-default args:`` lines print them, URL userinfo passwords (``https://user:…@host``), and bare
    ``hf_…`` / ``sk-…`` / ``ghp_…`` tokens. Values ``None``/``True``/``False`` stay (they are settings, not secrets).
    Also names holding a SECRET / PASSWORD / KEY / CREDENTIAL word (``AWS_SECRET_ACCESS_KEY=…``,
    ``AWS_ACCESS_KEY_ID=…``, ``OPENAI_API_KEY=…``), AWS key ids (``AKIA…`` / ``ASIA…``, also as a userinfo user:
    ``AKIA…:…@host``) and ``X-Amz-Signature=`` / ``X-Amz-Credential=`` / ``X-Amz-Security-Token=`` query values,
    and every query value of a ``scheme://…?…`` URL whatever its name (``?jwt=***&page=***``).

    ``controls``: also replace C0 control characters (but tab, newline, CR) and DEL by ``?`` (a NUL or an escape
    sequence from a log line never reaches a terminal or a ticket); ``False`` for text that carries its own
    terminal colours.
    """
    if not text:
        return text

    for k, pattern in enumerate(_SECRET_PATTERNS):
        if k in _WHOLE:
            text = pattern.sub(lambda m: m.group(1) + "***", text)
        else:
            text = pattern.sub(lambda m: m.group(1) + _hide(m.group(2)), text)
    if "://" in text:
        text = _URL_QUERY.sub(lambda m: m.group(1) + _QUERY_VALUE.sub("=***", m.group(2)), text)
    return _CONTROLS.sub("?", text) if controls else text
