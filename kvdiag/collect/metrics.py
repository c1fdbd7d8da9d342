"""Read vLLM ``/metrics`` pages (saved files, recordings or live endpoints) into a :class:`~kvdiag.bundle.Bundle`.

Pages are parsed with prometheus-client's parsers: text format 0.0.4, or OpenMetrics when the
Content-Type says ``application/openmetrics-text`` or the page ends with ``# EOF``. Names are
mapped to signals by :func:`kvdiag.signals.classify_metric`, so the V0 and V1 names, the renames
(``gpu_cache_usage_perc`` → ``kv_cache_usage_perc``, ``gpu_prefix_cache_*`` → ``prefix_cache_*``),
the ``vllm_`` spelling and the ``ray_vllm:`` prefix all land on the same signal; when a page has
both the old and the new name of one quantity (V1 0.9–0.10), only the new one is read
(:data:`kvdiag.signals.METRIC_ALIASES`). Series of several data-parallel engines (label ``engine``),
served model names (``model_name``) or API-server processes (``pid``) are combined per instant:
usage ratios by ``max`` (a gauge split across API-server processes shows the real value on one
series only, vLLM issue 28792), request counts, counters and histogram buckets by ``sum``.

A recording (:mod:`kvdiag.record`) is OpenMetrics with a timestamp on every sample; it is read
instant by instant, so a replay sees the same series a live scrape saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus
import math
import re
import signal
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as text_parse
import requests
from requests.adapters import HTTPAdapter
import urllib3
from urllib3.util.retry import Retry

from ..bundle import Bundle, InputInfo, iso
from ..errors import InputError, ScrapeError
from ..numbers import finite_float, unix_seconds
from ..redaction import redact
from .logread import MAGIC_GZIP, MAGIC_ZSTD, open_log
from ..inputs.http import (ACCEPT, MAX_BODY_BYTES, MAX_REDIRECTS, http_get, run_with_deadline,  # noqa: F401
                           safe_url)
from ..signals import CACHE_CONFIG_LABELS, METRIC_ALIASES, SIGNALS, VLLM_PREFIXES, classify_metric, metric_base
from ..vllm_defaults import MAX_BLOCK_SIZE
from .. import vllm_metrics as vm

_MAX_SIGNALS = vm.across_series_max() - {"process_start_time"}
_ALIAS_RANK = {name: rank for names in METRIC_ALIASES.values() for rank, name in enumerate(names)}
_LABEL_FILTERS = vm.label_filters()  # e.g. num_requests_waiting_by_reason: only reason="capacity"
_BLOCK_COUNTED = vm.block_counted_names()  # gpu_prefix_cache_{queries,hits}: blocks in V1 0.7-0.8
_NEW_USAGE = vm.names("kv_cache_usage")[0]
_PROCESS_START = vm.names("process_start_time")[0]



# label values a refused page line may show (they locate the error and hold no secret); every other one is ***
_SHOWN_LABELS = {"le", "quantile", "engine", "model_name", "reason", "finished_reason", "pid"}
_LABEL = re.compile(r'\b([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\\n]|\\.)*)"')


def quote_line(line: str, limit: int = 80) -> str:
    """A line of an input, redacted (:func:`kvdiag.redaction.redact`), its label values but ``_SHOWN_LABELS``
    replaced by ``***`` (a recording's label may hold a token under any name), cut to ``limit`` characters, quoted."""
    text = _LABEL.sub(lambda m: m.group(0) if m.group(1) in _SHOWN_LABELS else f'{m.group(1)}="***"',
                      redact(line.strip()))
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _fmt_labels(labels: dict) -> str:
    if not labels:
        return ""
    # label values escaped as the exposition format does (backslash, quote, newline), so a source stays unambiguous
    esc = {ord("\\"): "\\\\", ord('"'): '\\"', ord("\n"): "\\n"}
    return "{" + ",".join(f'{k}="{str(v).translate(esc)}"' for k, v in sorted(labels.items())) + "}"


_COUNTER_TYPE = re.compile(r"^#\s*TYPE\s+(\S+)\s+counter\s*$", re.M)
_SAMPLE_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^\n]*\})?[ \t]+(\S+)")


def _without_bad_counters(text: str) -> tuple[str, dict]:
    """``text`` without the counter samples OpenMetrics forbids (NaN or negative: the parser then refuses the whole
    page), and ``{"NAME: counter NaN or negative": count}`` of what was left out."""
    counters = set(_COUNTER_TYPE.findall(text))
    if not counters:
        return text, {}
    names = {c + sfx for c in counters for sfx in ("", "_total")}
    dropped: dict = {}
    keep = []
    for line in text.splitlines(keepends=True):
        m = _SAMPLE_LINE.match(line)
        if m and m.group(1) in names:
            try:
                v = float(m.group(3))
            except ValueError:
                v = 0.0
            if v != v or v < 0:
                key = f"{m.group(1)}: counter NaN or negative"
                dropped[key] = dropped.get(key, 0) + 1
                continue
        keep.append(line)
    return "".join(keep), dropped


def parse_page(text: str, origin: str, openmetrics: bool = False, dropped: dict | None = None) -> list:
    """Parse one exposition page into prometheus-client metric families.

    An OpenMetrics page whose only fault is counter samples of NaN or below zero (which the parser refuses, page and
    all) is read without them; they are counted into ``dropped`` (``"name: why" -> count``, the page notes' form).

    Raises:
        InputError: the text is not Prometheus text format / OpenMetrics (message names ``origin``).
    """
    if not text.strip():
        raise InputError(f"{origin}: empty, expected a Prometheus /metrics page")
    if "\x00" in text:
        raise InputError(f"{origin}: binary data, expected a Prometheus /metrics page")
    stripped = text.lstrip().lower()
    if stripped.startswith("<!doctype") or stripped.startswith("<html"):
        raise InputError(f"{origin}: HTML, expected a Prometheus /metrics page")
    use_om = openmetrics or text.rstrip().endswith("# EOF")
    try:
        return list((om_parse if use_om else text_parse)(text))
    except Exception:  # the parsers raise ValueError, TypeError or IndexError on bad lines
        if use_om:
            clean, bad = _without_bad_counters(text)
            if bad:
                try:
                    families = list(om_parse(clean))
                except Exception:  # noqa: BLE001 - another fault: reported below on the original text
                    families = None
                if families is not None:
                    if dropped is not None:
                        for k, n in bad.items():
                            dropped[k] = dropped.get(k, 0) + n
                    return families
        fmt = "OpenMetrics" if use_om else "text format"
        lineno, line = _bad_page_line(text, use_om)
        clash = type_clash(text) if use_om and not lineno else None
        if clash:
            raise InputError(f"{origin}:{clash[0]}: {clash[1]}") from None
        where = f"{origin}:{lineno}" if lineno else origin
        got = f", got {quote_line(line)}" if line is not None else ""
        raise InputError(f"{where}: not Prometheus {fmt}: expected '# HELP/# TYPE' or 'name{{labels}} value'{got}") from None


def _bad_page_line(text: str, openmetrics: bool) -> tuple[int, str | None]:
    """The first line of ``text`` the parser rejects on its own, as ``(line number, line)``; ``(0, None)``
    when each line parses alone (the fault spans lines)."""
    parse = om_parse if openmetrics else text_parse
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            list(parse(line + ("\n# EOF\n" if openmetrics else "\n")))
        except Exception:  # noqa: BLE001 - any parser complaint marks the line
            return n, line
    return 0, None


def type_clash(text: str) -> tuple[int, str] | None:
    """The first ``# TYPE`` line of an OpenMetrics text that gives a family a second type, or the same type again
    (OpenMetrics gives each family's metadata once), as ``(line number, what)``; ``None`` when there is none.
    The parser's own complaint names neither the line nor the first TYPE."""
    first: dict[str, tuple[str, int]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.startswith("# TYPE "):
            if line.startswith("# EOF"):
                break
            continue
        parts = line.split()
        if len(parts) < 4:
            continue
        name, kind = parts[2], parts[3]
        if name in first:
            kind0, n0 = first[name]
            shown = quote_line(name, 80)[1:-1]
            if kind != kind0:
                return n, (f"# TYPE {shown} {quote_line(kind, 20)[1:-1]} conflicts with its # TYPE "
                           f"{quote_line(kind0, 20)[1:-1]} at line {n0}: a family has one type")
            return n, f"# TYPE {shown} given again (first at line {n0}): OpenMetrics gives a family's TYPE once"
        first[name] = (kind, n)
    return None


def cut_last_line(text: str, origin: str) -> str:
    """A note when ``text`` ends inside a sample line: the text format ends every line with a line feed
    (OpenMetrics ends at ``# EOF``), so a page without one after its last sample was likely cut mid-value
    (``… 12`` cut to ``… 1`` still parses). ``""`` when the page ends with a line feed or a comment line."""
    if not text or text.endswith("\n"):
        return ""
    lines = text.split("\n")
    last = lines[-1].rstrip("\r")
    if not last.strip() or last.lstrip().startswith("#"):
        return ""
    return (f"{origin}:{len(lines)}: the page ended mid-line (no line feed after its last line, {quote_line(last)}): "
            "its last sample may be cut short; read as it stands")


@dataclass
class PageInfo:
    """What the pages of one server said about themselves (for the report's input notes)."""

    engines: set = field(default_factory=set)
    models: set = field(default_factory=set)
    prefix_unit_blocks: bool = False
    prefix_unscaled: bool = False  # block counters left in blocks: no usable block_size on the page
    dropped: dict = field(default_factory=dict)  # "signal: why" -> count of values out of the signal's domain
    duplicates: int = 0  # samples repeating a series (same name and labels) of the same instant
    cut: list = field(default_factory=list)  # notes of pages that ended mid-line (:func:`cut_last_line`)

    def notes(self) -> list[str]:
        out = []
        if self.cut:
            out.append(self.cut[0] if len(self.cut) == 1 else
                       f"{len(self.cut)} pages ended mid-line; the first: {self.cut[0]}")
        if self.dropped:
            out.append(f"{sum(self.dropped.values())} value(s) out of their domain skipped ("
                       + "; ".join(f"{k} ×{v}" for k, v in sorted(self.dropped.items())) + ")")
        if self.duplicates:
            out.append(f"{self.duplicates} duplicate sample(s) (a series repeated with the same name and labels) "
                       "skipped: the first one of each instant was kept")
        if len(self.engines) > 1:
            out.append(f"{len(self.engines)} data-parallel engines ({', '.join(sorted(self.engines))}): "
                       "usage by max, counts by sum")
        if len(self.models) > 1:
            out.append(f"{len(self.models)} model names ({', '.join(sorted(self.models))}) combined")
        if self.prefix_unit_blocks and not self.prefix_unscaled:
            out.append("prefix-cache counters counted blocks (vLLM V1 0.7-0.8): scaled by block_size to tokens")
        elif self.prefix_unit_blocks:
            out.append("prefix-cache counters counted blocks (vLLM V1 0.7-0.8) and the page has no usable "
                       "block_size: left in blocks (hit rates are still right)")
        return out


def le_bound(raw: str) -> str | None:
    """A bucket's ``le`` label as the bundle's text (``repr`` of the bound, ``inf``), ``None`` when it is no number."""
    if raw in ("+Inf", "Inf", "inf"):
        return "inf"
    bound = finite_float(raw)
    return None if bound is None else repr(bound)


def _sample_value(value) -> float:
    """A sample's value as a float; an OpenMetrics integer too large for a float becomes ±Inf (then skipped as out
    of its domain), never an OverflowError."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    except (TypeError, ValueError):
        return math.nan


def _sample_time(sample, t: float | None) -> tuple[bool, float | None]:
    """``(ok, seconds)``: the sample's own timestamp when it is Unix seconds 1970..2200 (a date that can be printed),
    else the page's ``t``; ``ok`` is False for a timestamp outside that range (1e20, NaN, -1e17)."""
    if sample.timestamp is None:
        return True, t
    try:
        raw = float(sample.timestamp)
    except (TypeError, ValueError, OverflowError):
        return False, None
    ts = unix_seconds(raw)
    return ts is not None, ts


def out_of_domain(signal: str, value: float) -> str:
    """Why ``value`` cannot be a value of ``signal`` ('' when it can): NaN/±Inf, negative, a ratio above 1."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value < 0:
        return "negative"
    if value > 1e18:  # more tokens than any server will see in years, more bytes than any GPU: not a reading
        return "absurdly large"
    spec = SIGNALS.get(signal)
    if spec is not None and spec.unit == "ratio" and value > 1 + 1e-9:
        return "ratio above 1"
    return ""


KEY_SIGNALS = ("kv_cache_usage", "num_requests_waiting", "num_preemptions", "num_requests_running")
"""Runtime signals whose loss (every value out of domain) forbids a ``healthy`` verdict."""


def add_page(bundle: Bundle, families: list, origin: str, t: float | None, info: PageInfo | None = None) -> int:
    """Add the vLLM samples of one parsed page to ``bundle``; return how many observations it added.

    ``t`` is the scrape time (Unix seconds) or ``None`` for a saved page without timestamps; a
    sample's own timestamp wins over ``t``. Samples are combined per (signal, ``le``, instant).
    V1 0.7–0.8 prefix-cache counters (``gpu_prefix_cache_*`` on a page without
    ``kv_cache_usage_perc``) count blocks; they are scaled by the page's ``block_size`` to tokens.
    Values out of a signal's domain (NaN, ±Inf, negative, a ratio above 1) are skipped and counted
    in ``info.dropped`` (and ``bundle.dropped_values``); a series repeated on one page (same name
    and labels) counts once, the repeats in ``info.duplicates``.
    """
    before = len(bundle)
    info = info if info is not None else PageInfo()
    # (signal, text, ts) -> [value, source, alias_rank]
    combined: dict[tuple, list] = {}
    has_new_usage = False
    page_block_size = None
    seen: set = set()
    usage_by_pid: dict = {}  # ts -> {pid: value} of the usage gauge (vLLM issue 28792)
    dropped_values = bundle.__dict__.setdefault("dropped_values", {})
    for fam in families:
        for s in fam.samples:
            name = s.name
            if name != _PROCESS_START and not name.startswith(VLLM_PREFIXES):
                continue
            ok, ts = _sample_time(s, t)
            if not ok:
                key = "sample timestamp: not Unix seconds between 1970 and 2200"
                info.dropped[key] = info.dropped.get(key, 0) + 1
                continue
            if name == _PROCESS_START:  # restart evidence (kvdiag check --state)
                start = unix_seconds(_sample_value(s.value))
                if start is not None:
                    bundle.add("process_start_time", start, f"metric:{name} in {origin}", t=ts)
                continue
            at = f"@{iso(ts)}" if ts is not None else f" in {origin}"
            how, what = classify_metric(name)
            if how == "facts":
                cache_config_facts(bundle, s.labels, f"metric:{name}{at}", ts, info)
                bs = s.labels.get("block_size")
                if bs not in (None, "None", ""):
                    try:
                        if _plausible_fact("block_size", float(bs)):
                            page_block_size = float(bs)
                    except ValueError:
                        pass
                continue
            if how not in ("signal", "histogram"):
                continue
            if "engine" in s.labels:
                info.engines.add(s.labels["engine"])
            if "model_name" in s.labels and s.labels["model_name"] not in info.models:
                info.models.add(s.labels["model_name"])  # the served model as a fact too (diff compares it)
                bundle.add("model_name", None, f"label model_name of metric:{name}{at}", t=ts,
                           text=redact(s.labels["model_name"][:300]))
            base = metric_base(name)
            text = ""
            if how == "histogram":
                suffix = name.rsplit("_", 1)[-1]
                if suffix not in ("bucket", "sum", "count"):
                    continue
                signal = f"{what}_{suffix}"
                if suffix == "bucket":
                    text = le_bound(s.labels.get("le", "+Inf"))
                    if text is None:
                        key = f"{signal}: le label not a number"
                        info.dropped[key] = info.dropped.get(key, 0) + 1
                        continue
            else:
                signal = what
                if any(s.labels.get(k) != v for k, v in _LABEL_FILTERS.get(base, {}).items()):
                    continue
            if base == _NEW_USAGE:
                has_new_usage = True
            value = _sample_value(s.value)
            if signal == "prefix_cache_hit_rate_cumulative" and value == -1:
                continue  # V0: -1 means prefix caching is off
            series_key = (name, tuple(sorted(s.labels.items())), ts)
            if series_key in seen:
                info.duplicates += 1
                continue
            seen.add(series_key)
            why = out_of_domain(signal, value)
            if why:
                key = f"{signal}: {why}"
                info.dropped[key] = info.dropped.get(key, 0) + 1
                dropped_values[signal] = dropped_values.get(signal, 0) + 1
                continue
            rank = _ALIAS_RANK.get(base, 0)
            src = f"metric:{name}{_fmt_labels(s.labels)}{at}"
            if signal == "kv_cache_usage":
                usage_by_pid.setdefault((base, s.labels.get("engine", ""), ts), {})[s.labels.get("pid", "")] = value
            key = (signal, text, ts)
            old = combined.get(key)
            if old is None or rank < old[2]:
                combined[key] = [value, src, rank, base]
            elif rank > old[2]:
                continue  # an older alias of a quantity this page already gives under its new name
            elif signal in _MAX_SIGNALS:
                if value > old[0]:
                    combined[key] = [value, src, rank, base]
            else:
                old[0] += value
                if "summed" not in old[1]:
                    old[1] += " (+ other series, summed)"
    for (signal, text, ts), (value, src, _rank, base) in combined.items():
        # V1 0.7-0.8's gpu_prefix_cache_{queries,hits} counters count blocks; V0's gpu_prefix_cache_hit_rate gauge is
        # a ratio (hits / queries) and is never scaled
        if base in _BLOCK_COUNTED and not has_new_usage:
            info.prefix_unit_blocks = True
            info.prefix_unscaled = info.prefix_unscaled or not page_block_size
            if page_block_size:
                value *= page_block_size
                src += f" × block_size {page_block_size:.0f} (blocks in vLLM 0.7-0.8)"
        bundle.add(signal, value, src, t=ts, text=text)
    done: set = set()
    for (base, engine, ts), per_pid in usage_by_pid.items():
        if _ALIAS_RANK.get(base, 0) > 0 and any(k[1:] == (engine, ts) for k in usage_by_pid if k[0] != base):
            continue  # the old name beside the new one: only the new one is read
        if (engine, ts) in done:
            continue
        done.add((engine, ts))
        vals = list(per_pid.values())
        at = f"@{iso(ts)}" if ts is not None else f" in {origin}"
        labels = {"engine": engine} if engine else {}
        if len(vals) < 2:
            bundle.add("kv_cache_usage_series", 1.0, f"metric:{VLLM_PREFIXES[1]}{base}{_fmt_labels(labels)}{at} "
                                                     "(one series)", t=ts)
            continue
        shown = [p if len(p) <= 24 else p[:24] + "…" for p in sorted(per_pid)[:8]]
        labels["pid"] = " ".join(shown) + (f" … ({len(per_pid)} pids)" if len(per_pid) > 8 else "")
        src = f"metric:{VLLM_PREFIXES[1]}{base}{_fmt_labels(labels)}{at}"
        zero = sum(1 for v in vals if v == 0)
        bundle.add("kv_cache_usage_series", float(len(vals)), src, t=ts, text=f"{zero} of {len(vals)} read 0")
        bundle.add("kv_cache_usage_split_mean", sum(vals) / len(vals), src + " (mean over the pid series)", t=ts)
    return len(bundle) - before


def cache_config_facts(bundle: Bundle, labels: dict, src: str, t: float | None, info: PageInfo | None = None) -> None:
    """``vllm:cache_config_info`` labels → facts (label values are Python ``str()``; ``"None"`` = unset)."""
    for label, signal in CACHE_CONFIG_LABELS.items():
        raw = labels.get(label)
        if raw is None or raw in ("None", ""):
            continue
        if SIGNALS[signal].unit == "text":
            bundle.add(signal, None, src, t=t, text=raw)
        elif SIGNALS[signal].unit == "bool":
            bundle.add(signal, 1.0 if raw == "True" else 0.0, src, t=t)
        else:
            try:
                value = float(raw)
            except ValueError:
                continue
            if not _plausible_fact(signal, value):
                dropped = bundle.__dict__.setdefault("dropped_values", {})
                dropped[signal] = dropped.get(signal, 0) + 1
                if info is not None:
                    key = f"{vm.INFO_NAME} {label}={raw[:20]!r}: not a possible {signal}"
                    info.dropped[key] = info.dropped.get(key, 0) + 1
                continue
            bundle.add(signal, value, src, t=t)


def _plausible_fact(signal: str, value: float) -> bool:
    """Can a ``cache_config_info`` label value be this fact? Finite; block_size a whole number 1..2^20; counts whole
    and not negative; gpu_memory_utilization in (0, 1]; everything else not negative."""
    if not math.isfinite(value):
        return False
    if signal == "block_size":
        return value == int(value) and 1 <= value <= MAX_BLOCK_SIZE
    if signal in ("num_gpu_blocks", "num_cpu_blocks"):
        return value == int(value) and value >= 0
    if signal == "gpu_memory_utilization":
        return 0 < value <= 1
    return value >= 0


_SAMPLE = re.compile(r"^(?P<series>[^\s{]+(?:\{.*\})?)\s+(?P<value>\S+)(?:\s+(?P<ts>\S+))?\s*$")


def split_by_time(text: str) -> list[tuple[float, str]] | None:
    """Split an OpenMetrics recording into one page per timestamp, in time order.

    prometheus-client's OpenMetrics parser checks histograms per sample and rejects several
    points of one histogram in one family, which a recording has; so each instant becomes its
    own page (family headers repeated), parsed by the library as usual. Returns ``None`` when
    the text has no sample timestamps (then it is one instant).
    """
    headers: list[str] = []
    family = None
    pages: dict[float, list[str]] = {}
    family_lines: dict[float, list[str]] = {}
    seen_ts = False
    clash = type_clash(text)
    if clash:
        raise InputError(clash[1], lineno=clash[0])

    def flush():
        for ts, lines in family_lines.items():
            pages.setdefault(ts, []).extend(headers + lines)
        family_lines.clear()

    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            if line.startswith("# EOF"):
                break
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP", "UNIT"):
                if parts[2] != family:
                    flush()
                    headers, family = [], parts[2]
                headers.append(line)
            continue
        body = line.split(" # ", 1)[0]  # drop an exemplar
        m = _SAMPLE.match(body)
        if m is None or m.group("ts") is None:
            return None if not seen_ts else _bad_line(line)
        seen_ts = True
        try:
            ts = float(m.group("ts"))
        except ValueError:
            return None
        if unix_seconds(ts) is None:  # OpenMetrics timestamps are Unix seconds, in the one range of every input
            raise InputError(f"sample timestamp {quote_line(m.group('ts'), 40)[1:-1]} is not Unix seconds between "
                             f"1970 and 2200{' (milliseconds?)' if MAX_UNIX_SECONDS <= ts < MAX_UNIX_SECONDS * 1000 else ''}"
                             f": {quote_line(line, 120)}", lineno=n)
        family_lines.setdefault(ts, []).append(line)
    flush()
    if not seen_ts:
        return None
    return [(ts, "\n".join(lines) + "\n# EOF\n") for ts, lines in sorted(pages.items())]


def _recording_ends(text: str) -> tuple[str, list[str]]:
    """Where an OpenMetrics recording really ends: ``(text to read, notes)``.

    OpenMetrics ends at ``# EOF``: lines after it are skipped (a note counts them). A recording *without* ``# EOF``
    whose samples carry Unix-second timestamps (the text format's are milliseconds) was cut — a recorder killed or
    still writing, a copy cut short: it is read as the recording it is, not as one page of 1970 instants, ending at
    its last whole family (a family cut mid-way, whose histograms would lack buckets, is dropped, named in a note).
    Any other text comes back unchanged (a page, or one that fails later with its line)."""
    notes: list[str] = []
    eof = re.search(r"(?m)^# EOF[ \t]*(?:\r?\n|$)", text)
    if eof is not None:
        rest = text[eof.end():]
        extra = sum(1 for ln in rest.splitlines() if ln.strip())
        if extra:
            notes.append(f"{extra:,} line(s) after '# EOF' skipped (an OpenMetrics recording ends at '# EOF')")
            return text[:eof.end()], notes
        return text, notes
    if "\x00" in text:
        return text, notes
    whole = text if text.endswith("\n") else text[:text.rfind("\n") + 1]
    lines = whole.splitlines()
    cut_family = None
    if whole != text:  # cut inside a line: the family it cut is dropped whole (its last instant is incomplete)
        headers = [i for i, ln in enumerate(lines) if ln.startswith(("# TYPE ", "# HELP ", "# UNIT "))]
        if headers:
            first = headers[-1]
            while first - 1 in headers and lines[first - 1].split(None, 3)[2:3] == lines[first].split(None, 3)[2:3]:
                first -= 1
            parts = lines[first].split(None, 3)
            cut_family = parts[2] if len(parts) > 2 else "?"
            lines = lines[:first]
    candidate = "\n".join(lines) + "\n# EOF\n"
    try:
        if not split_by_time(candidate):
            return text, notes
    except InputError:
        return text, notes
    notes.append("no '# EOF' at the end: the recording was cut (a recorder killed or still writing); "
                 + (f"read up to the family it cut inside, {cut_family}, which is dropped" if cut_family
                    else "read to its last line"))
    return candidate, notes


#: 1e10 Unix seconds is the year 2286: a larger OpenMetrics timestamp is likely milliseconds (the range itself is
#: :data:`kvdiag.numbers.MAX_UNIX_S`, 2200, as for every input)
MAX_UNIX_SECONDS = 1e10


def _bad_line(line: str):
    raise InputError(f"recording has a sample without a timestamp among timestamped ones: {quote_line(line, 120)}")


MAX_METRICS_FILE_BYTES = 512 * 1024 * 1024
"""Largest saved page or recording read (a 10-minute recording at 5 s is tens of MiB): :mod:`kvdiag.inputs.pages`."""


def read_metrics_file(bundle: Bundle, path: str, info: PageInfo | None = None, at: float | None = None,
                      at_source: str = "") -> InputInfo:
    """Read a saved ``/metrics`` page (one instant) or a recording (OpenMetrics, a timestamp on every
    sample, ``# EOF``; several instants) into ``bundle``. ``at`` is the scrape time of a page without timestamps
    (from a saved series' times.csv, ``at_source``; :mod:`kvdiag.pages`).

    Raises:
        InputError: missing, a directory, empty, binary, or not Prometheus text / OpenMetrics (gzip and zstandard
            files are decompressed first, bounded as plain ones).
    """
    from ..inputs.pages import read_text

    text = read_text(path)  # bounded; a recording kept compressed (record … | gzip, fixtures/lab/) decompressed
    page_info = info if info is not None else PageInfo()
    text, early = _recording_ends(text)
    if text.rstrip().endswith("# EOF") and "\x00" not in text:
        try:
            instants = split_by_time(text)
        except InputError as exc:  # the line in the file, when split_by_time knows it
            where = f"{path}:{exc.lineno}" if getattr(exc, "lineno", 0) else path
            raise InputError(f"{where}: {exc}") from None
    else:
        instants = None
    if instants:
        res = InputInfo(kind="metrics-file", name=path, records=len(instants))
        for ts, page in instants:
            res.observations += add_page(bundle, parse_page(page, f"{path} @ {ts:.3f}", openmetrics=True,
                                                            dropped=page_info.dropped), path, ts, page_info)
        res.notes.append(f"recording: {len(instants)} instant(s) {iso(instants[0][0])} .. {iso(instants[-1][0])}")
        res.notes += early
    else:
        families = parse_page(text, path, dropped=page_info.dropped)
        cut = cut_last_line(text, path) if not text.rstrip().endswith("# EOF") else ""
        if cut:
            page_info.cut.append(cut)
        res = InputInfo(kind="metrics-file", name=path, records=1)
        res.observations = add_page(bundle, families, path, at, page_info)
        if at is not None:
            res.notes.append(f"scraped at {iso(at)} ({at_source or 'times.csv'})")
    if res.observations == 0:
        res.notes.append("no vllm: series on this page")
    if info is None:
        res.notes += page_info.notes()
    bundle.inputs.append(res)
    return res


# --- HTTP -----------------------------------------------------------------------------------------
@dataclass
class HttpOptions:
    """How kvdiag talks HTTP to /metrics endpoints and Prometheus servers.

    Attributes:
        timeout: seconds one request may take in all (connect, headers and body); never exceeded by
            more than one read's worth.
        retries: retries of refused connections and HTTP 502/503/504, with exponential back-off.
        backoff: urllib3 ``backoff_factor`` (seconds).
        headers: extra request headers (``--header 'Name: value'``, ``--bearer-token-file``).
        verify: TLS verification: ``True`` (system CAs), a CA bundle path (``--ca-cert``) or ``False``
            (``--insecure``).
    """

    timeout: float = 5.0
    retries: int = 2
    backoff: float = 0.2
    headers: dict = field(default_factory=dict)
    verify: bool | str = True


def make_session(retries: int = 2, backoff: float = 0.2, opts: HttpOptions | None = None) -> requests.Session:
    """A requests session with urllib3 retries (refused connections, 502/503/504), exponential back-off,
    the extra headers and the TLS setting of ``opts``."""
    if opts is not None:
        retries, backoff = opts.retries, opts.backoff
    session = requests.Session()
    retry = Retry(total=retries, connect=retries, read=0, status=retries, backoff_factor=backoff,
                  status_forcelist=(502, 503, 504), allowed_methods=("GET", "POST"), raise_on_status=False)
    session.mount("http://", HTTPAdapter(max_retries=retry))
    session.mount("https://", HTTPAdapter(max_retries=retry))
    if opts is not None:
        session.headers.update(opts.headers)
        session.verify = opts.verify
        if opts.verify is False:  # the operator asked for it (--insecure): no warning per request
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    return session



def scrape_once(session: requests.Session, url: str, timeout: float = 5.0,
                page: PageInfo | None = None) -> tuple[list, float]:
    """GET ``url`` once and parse it. Returns ``(families, unix_time)``; a page that ended mid-line is noted in
    ``page.cut`` (:func:`cut_last_line`).

    Raises:
        ScrapeError: refused, timed out, HTTP error status, body too large or cut off, or not a /metrics page.
    """
    t = time.time()
    shown = safe_url(url)
    body, ctype, status = http_get(session, url, timeout)
    if status >= 400:
        reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        hint = " (give credentials with --header or --bearer-token-file)" if status in (401, 403) else ""
        raise ScrapeError(f"{shown}: HTTP {status} {reason}, expected 200 with a /metrics page{hint}")
    text = body.decode("utf-8", errors="replace")
    try:
        families = parse_page(text, shown, openmetrics="openmetrics" in ctype.lower())
    except InputError as exc:
        raise ScrapeError(f"{exc} (Content-Type: {ctype or 'none'})") from None
    if page is not None and not text.rstrip().endswith("# EOF"):
        cut = cut_last_line(text, shown)
        if cut and len(page.cut) < 1000:
            page.cut.append(cut)
    return families, t


STOPPED_ANSWERING = "the endpoint stopped answering"
"""The start of the input note :func:`scrape_targets` writes when a window's last scrapes failed (a report lifts it
to its top notes: a server that died mid-window is the first thing to know)."""


@dataclass
class Target:
    """One /metrics endpoint being scraped: its bundle, what was read, and why it failed (if it did).

    ``url`` is the shown form (:func:`safe_url`: no credentials), ``fetch_url`` the one requested.
    ``last_usage`` / ``peak_usage`` are the KV usage (ratio 0-1, max over engines) of the last scrape and the
    highest so far, for the progress line. Once ``closed`` (under ``lock``), a page still in flight is dropped:
    the window is over and its bundle is being judged."""

    url: str
    bundle: Bundle
    info: InputInfo
    page: PageInfo = field(default_factory=PageInfo)
    error: str | None = None
    last_usage: float | None = None
    peak_usage: float | None = None
    fetch_url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    closed: bool = False
    failing: int = 0  # scrapes failed in a row since the last good one
    last_good: float | None = None  # when the last good scrape was taken (Unix seconds)


class WindowInterrupt:
    """SIGINT / SIGTERM during a live window: the first ends the window early, a second aborts at once.

    Use as a ``with`` block around the scrapes and pass it to :func:`scrape_targets`. While the block runs (in
    the main thread; elsewhere it installs nothing), the first signal sets :attr:`stop`, so the scrape loops end
    and what was scraped is judged; :func:`scrape_targets` then sets :attr:`note` ("window cut short at 7 s of
    60 s by an interrupt (SIGINT); …"), or raises ``KeyboardInterrupt`` (exit 130) when no scrape had
    succeeded. A second signal raises ``KeyboardInterrupt`` at once. The previous handlers are restored when the
    block ends, so an interrupt before or after the window (while judging) behaves as it always did.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.signal_name: str | None = None
        self.at: float | None = None  # time.monotonic() of the first signal
        self.note = ""
        self._old: dict = {}

    @property
    def interrupted(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        if self.stop.is_set():
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        self.at = time.monotonic()
        self.stop.set()

    def __enter__(self) -> "WindowInterrupt":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> bool:
        for sig, handler in self._old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._old = {}
        return False


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def _scrape_loop(target: Target, session: requests.Session, duration: float, interval: float, timeout: float,
                 start: float, stop: threading.Event, on_page=None) -> None:
    n = 0
    while not stop.is_set():
        try:
            families, t = scrape_once(session, target.fetch_url or target.url, timeout, target.page)
            with target.lock:
                if target.closed:
                    return
                target.info.observations += add_page(target.bundle, families, target.url, t, target.page)
                target.info.records += 1
                target.failing, target.last_good = 0, t
                if on_page is not None:
                    on_page(families, t)
                u = target.bundle.signal("kv_cache_usage") if target.bundle.has("kv_cache_usage") else None
                if u is not None and not u.empty:
                    at_last = u["value"][u["t"] == u["t"].iloc[-1]]  # every engine of the last scrape
                    target.last_usage = float(at_last.max() if len(at_last) else u["value"].iloc[-1])
                    target.peak_usage = float(u["value"].max())
        except Exception as exc:  # noqa: BLE001 - nothing may escape the thread: a traceback and a silent gap
            if not isinstance(exc, ScrapeError):
                exc = ScrapeError(f"{target.url}: scrape failed ({exc.__class__.__name__})")
            with target.lock:
                if target.closed:
                    return
                if target.info.records == 0 and n == 0:
                    target.error = str(exc)
                    return
                target.info.skipped += 1
                target.failing += 1
                if len(target.info.notes) < 5:
                    target.info.notes.append(f"scrape failed: {exc}")
        n += 1
        elapsed = time.monotonic() - start
        if elapsed + interval > duration + 1e-9:
            return
        stop.wait(max(0.0, start + n * interval - time.monotonic()))


def progress_line(targets: list[Target], elapsed: float, duration: float) -> str:
    """The live progress line: servers, scrapes, time, and the KV usage peak so far and the last reading, both
    named ("KV usage peak 99.0%, last 97.6%"; with several servers, the highest peak and the highest last
    reading)."""
    done = sum(tg.info.records for tg in targets)
    failed = sum(1 for tg in targets if tg.error)
    peaks = [tg.peak_usage for tg in targets if tg.peak_usage is not None]
    lasts = [tg.last_usage for tg in targets if tg.last_usage is not None]
    return (f"kvdiag: {len(targets)} server(s), {done} scrape(s), {elapsed:.0f}/{duration:.0f}s"
            + (f", KV usage peak {max(peaks):.1%}, last {max(lasts):.1%}" if peaks and lasts else "")
            + (f", {failed} failed" if failed else ""))


def scrape_targets(urls: list[str], duration: float, interval: float, opts: HttpOptions | None = None,
                   progress: bool | None = None, on_page=None, interrupt: WindowInterrupt | None = None
                   ) -> list[Target]:
    """Scrape every URL every ``interval`` seconds for ``duration`` seconds (at least once), all at once.

    One thread per URL; each has its own bundle. A URL whose first scrape fails stops there with
    ``error`` set (the others go on); later failures are counted in ``info.skipped`` with the
    reason in ``info.notes``. While the window runs, a progress line on stderr (when it is a
    terminal, or ``progress=True``) shows the scrapes done, the time left and the KV usage (peak so far
    and last reading, :func:`progress_line`).
    ``on_page(families, t)`` is called for every page of a single URL (used by ``kvdiag record``).

    ``interrupt`` (a :class:`WindowInterrupt`, entered by the caller) ends the window early on SIGINT/SIGTERM:
    the scrapes stop (a page still in flight after a second's grace is dropped), ``interrupt.note`` says when,
    and the targets are returned to be judged.

    Raises:
        KeyboardInterrupt: interrupted before any scrape succeeded, or a second signal.
    """
    opts = opts or HttpOptions()
    targets = [Target(url=safe_url(u), bundle=Bundle(), info=InputInfo(kind="metrics-url", name=safe_url(u)),
                      fetch_url=u) for u in urls]
    show = sys.stderr.isatty() if progress is None else progress
    stop = interrupt.stop if interrupt is not None else threading.Event()
    start = time.monotonic()
    threads = [threading.Thread(target=_scrape_loop, daemon=True,
                                args=(tg, make_session(opts=opts), duration, interval, opts.timeout, start, stop,
                                      on_page if len(urls) == 1 else None))
               for tg in targets]
    for th in threads:
        th.start()
    grace_until = None
    try:
        while any(th.is_alive() for th in threads):
            for th in threads:
                th.join(timeout=0.5)
                if th.is_alive():
                    break
            if stop.is_set():  # interrupted: a scrape in flight gets a second to land, then the window is over
                grace_until = grace_until or time.monotonic() + 1.0
                if time.monotonic() >= grace_until:
                    break
            if show:
                sys.stderr.write("\r" + progress_line(targets, min(time.monotonic() - start, duration), duration)
                                 + " ")
                sys.stderr.flush()
    except KeyboardInterrupt:
        stop.set()
        if show:
            sys.stderr.write("\n")
        raise
    finally:
        for tg in targets:
            with tg.lock:
                tg.closed = True
    if show:
        sys.stderr.write("\n")
        sys.stderr.flush()
    if interrupt is not None and interrupt.interrupted:
        scrapes = sum(tg.info.records for tg in targets)
        if not scrapes:
            raise KeyboardInterrupt
        cut = min(max(0.0, (interrupt.at or start) - start), duration)
        interrupt.note = (f"window cut short at {_fmt_s(cut)} of {_fmt_s(duration)} by an interrupt "
                          f"({interrupt.signal_name}); judged on the {scrapes} scrape(s) taken")
    for tg in targets:
        if tg.info.records == 0 and not tg.error and interrupt is not None and interrupt.interrupted:
            tg.info.notes.append("no scrape finished before the interrupt")
        elif tg.info.observations == 0 and not tg.error:
            tg.info.notes.append("no vllm: series on this endpoint")
        if tg.failing >= 2 and tg.last_good is not None and not tg.error:
            tg.info.notes.insert(0, f"{STOPPED_ANSWERING} after its last good scrape at {iso(tg.last_good)}: the "
                                    f"last {tg.failing} scrape(s) of the window failed (server down or restarting?); "
                                    "judged on what came before")
        tg.info.notes += tg.page.notes()
        tg.bundle.inputs.append(tg.info)
    return targets


def merge_target(bundle: Bundle, target: Target) -> InputInfo:
    """Copy one scraped target's observations, dropped-value counts and input info into ``bundle``.

    Raises:
        ScrapeError: the target's first scrape failed.
    """
    if target.error:
        raise ScrapeError(target.error)
    frame = target.bundle.frame()
    for sig, n in getattr(target.bundle, "dropped_values", {}).items():
        dv = bundle.__dict__.setdefault("dropped_values", {})
        dv[sig] = dv.get(sig, 0) + n
    for row in frame.itertuples(index=False):
        bundle.add(row.signal, None if math.isnan(row.value) else row.value, row.source,
                   t=None if math.isnan(row.t) else row.t, text=row.text, segment=row.segment)
    bundle.inputs.append(target.info)
    return target.info


def scrape(bundle: Bundle, url: str, duration: float, interval: float, timeout: float = 5.0,
           progress: bool | None = None, opts: HttpOptions | None = None,
           interrupt: WindowInterrupt | None = None) -> InputInfo:
    """Scrape one ``url`` into ``bundle`` every ``interval`` seconds for ``duration`` seconds (at least once).

    Raises:
        ScrapeError: the first scrape failed (refused, timeout, HTTP error, not a /metrics page).
        KeyboardInterrupt: see :func:`scrape_targets` (``interrupt``).
    """
    if opts is None:
        opts = HttpOptions(timeout=timeout)
    (target,) = scrape_targets([url], duration, interval, opts, progress, interrupt=interrupt)
    return merge_target(bundle, target)
