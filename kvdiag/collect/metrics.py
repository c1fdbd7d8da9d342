"""Read vLLM ``/metrics`` pages (saved files or a live endpoint) into a :class:`~kvdiag.bundle.Bundle`.

Pages are parsed with prometheus-client's parsers (text format 0.0.4; OpenMetrics when the
Content-Type or the ``# EOF`` line says so). Names are mapped to signals by
:func:`kvdiag.signals.metric_signal`, so the V0 and V1 names, the ``vllm_`` spelling and the
``ray_vllm:`` prefix all land on the same signal. Series of several data-parallel engines (label
``engine``) or API-server processes (label ``pid``) are combined per page: usage ratios by ``max``
(a gauge split across API-server processes shows the real value on one series only, vLLM issue
28792), request counts and counters by ``sum``.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as text_parse
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from ..bundle import Bundle, InputInfo, iso
from ..errors import InputError, ScrapeError
from ..signals import CACHE_CONFIG_LABELS, SIGNALS, VLLM_PREFIXES, metric_signal

MAX_BODY_BYTES = 64 * 1024 * 1024
_MAX_SIGNALS = {"kv_cache_usage", "cpu_cache_usage", "prefix_cache_hit_rate"}


def _fmt_labels(labels: dict) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def parse_page(text: str, origin: str, openmetrics: bool = False) -> list:
    """Parse one exposition page into prometheus-client metric families.

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
    except Exception as exc:  # the parsers raise ValueError, TypeError or IndexError on bad lines
        raise InputError(f"{origin}: not Prometheus {'OpenMetrics' if use_om else 'text'} format: {exc}") from None


def add_page(bundle: Bundle, families: list, origin: str, t: float | None) -> int:
    """Add the vLLM samples of one parsed page to ``bundle``; return how many observations it added.

    ``t`` is the scrape time (Unix seconds) or ``None`` for a saved page without timestamps; a
    sample's own timestamp wins over ``t``.
    """
    before = len(bundle)
    combined: dict[str, tuple[float, str, float | None]] = {}
    for fam in families:
        for s in fam.samples:
            name = s.name
            if name == "process_start_time_seconds":  # restart evidence (kvdiag check --state)
                bundle.add("process_start_time", float(s.value), f"metric:{name} in {origin}",
                           t=float(s.timestamp) if s.timestamp is not None else t)
                continue
            if not name.startswith(VLLM_PREFIXES):
                continue
            ts = float(s.timestamp) if s.timestamp is not None else t
            if name.endswith("cache_config_info") or fam.name.endswith("cache_config"):
                _cache_config(bundle, s.labels, f"metric:{name}" + (f"@{iso(ts)}" if ts is not None else f" in {origin}"),
                              ts)
                continue
            signal = metric_signal(name)
            if signal is None or math.isnan(s.value):
                continue
            value = float(s.value)
            if signal == "prefix_cache_hit_rate" and value < 0:
                continue  # V0: -1 means prefix caching is off
            at = f"@{iso(ts)}" if ts is not None else f" in {origin}"
            src = f"metric:{name}{_fmt_labels(s.labels)}{at}"
            if signal in combined:
                old_v, old_src, _ = combined[signal]
                if signal in _MAX_SIGNALS:
                    if value > old_v:
                        combined[signal] = (value, src, ts)
                else:
                    combined[signal] = (old_v + value, old_src + " (+ other series, summed)"
                                        if "summed" not in old_src else old_src, ts)
            else:
                combined[signal] = (value, src, ts)
    for signal, (value, src, ts) in combined.items():
        bundle.add(signal, value, src, t=ts)
    return len(bundle) - before


def _cache_config(bundle: Bundle, labels: dict, src: str, t: float | None) -> None:
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
                bundle.add(signal, float(raw), src, t=t)
            except ValueError:
                continue


def read_metrics_file(bundle: Bundle, path: str) -> InputInfo:
    """Read a saved ``/metrics`` page (one instant) into ``bundle``.

    Raises:
        InputError: missing, a directory, empty, binary, or not Prometheus text / OpenMetrics.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file")
    if p.is_dir():
        raise InputError(f"{path}: is a directory, expected a saved /metrics page")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    text = raw.decode("utf-8", errors="replace")
    families = parse_page(text, path)
    info = InputInfo(kind="metrics-file", name=path, records=1)
    info.observations = add_page(bundle, families, path, None)
    if info.observations == 0:
        info.notes.append("no vllm: series on this page")
    bundle.inputs.append(info)
    return info


def make_session(retries: int = 2, backoff: float = 0.2) -> requests.Session:
    """A requests session with urllib3 retries (connect errors, 502/503/504) and exponential back-off."""
    session = requests.Session()
    retry = Retry(total=retries, connect=retries, read=0, status=retries, backoff_factor=backoff,
                  status_forcelist=(502, 503, 504), allowed_methods=("GET",), raise_on_status=False)
    session.mount("http://", HTTPAdapter(max_retries=retry))
    session.mount("https://", HTTPAdapter(max_retries=retry))
    return session


def scrape_once(session: requests.Session, url: str, timeout: float = 5.0) -> tuple[list, float]:
    """GET ``url`` once and parse it. Returns ``(families, unix_time)``.

    Raises:
        ScrapeError: refused, timed out, HTTP error status, body too large, or not a /metrics page.
    """
    t = time.time()
    try:
        resp = session.get(url, timeout=timeout, stream=True,
                           headers={"Accept": "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"})
    except requests.exceptions.ConnectTimeout:
        raise ScrapeError(f"{url}: connection timed out after {timeout:g}s") from None
    except requests.exceptions.ReadTimeout:
        raise ScrapeError(f"{url}: no answer within {timeout:g}s") from None
    except requests.exceptions.ConnectionError as exc:
        reason = "connection refused" if "refused" in str(exc).lower() else "cannot connect"
        raise ScrapeError(f"{url}: {reason}") from None
    except requests.exceptions.RequestException as exc:
        raise ScrapeError(f"{url}: {exc.__class__.__name__}: {exc}") from None
    with resp:
        if resp.status_code >= 400:
            raise ScrapeError(f"{url}: HTTP {resp.status_code} {resp.reason}, expected 200 with a /metrics page")
        chunks, size = [], 0
        try:
            for chunk in resp.iter_content(65536):
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise ScrapeError(f"{url}: body larger than {MAX_BODY_BYTES // 2**20} MiB, not a /metrics page")
                chunks.append(chunk)
        except requests.exceptions.RequestException as exc:
            raise ScrapeError(f"{url}: body cut off: {exc.__class__.__name__}") from None
        ctype = resp.headers.get("Content-Type", "")
    text = b"".join(chunks).decode("utf-8", errors="replace")
    try:
        families = parse_page(text, url, openmetrics="openmetrics" in ctype.lower())
    except InputError as exc:
        raise ScrapeError(f"{exc} (Content-Type: {ctype or 'none'})") from None
    return families, t


def scrape(bundle: Bundle, url: str, duration: float, interval: float, timeout: float = 5.0,
           progress: bool | None = None) -> InputInfo:
    """Scrape ``url`` every ``interval`` seconds for ``duration`` seconds (at least once).

    The first scrape must succeed; later failures are counted in ``InputInfo.skipped`` with the
    reason in ``notes`` and the window goes on.

    Raises:
        ScrapeError: the first scrape failed (refused, timeout, HTTP error, not a /metrics page).
    """
    info = InputInfo(kind="metrics-url", name=url)
    session = make_session()
    show = sys.stderr.isatty() if progress is None else progress
    start = time.monotonic()
    n = 0
    while True:
        try:
            families, t = scrape_once(session, url, timeout)
            added = add_page(bundle, families, url, t)
            info.records += 1
            info.observations += added
        except ScrapeError as exc:
            if info.records == 0 and n == 0:
                raise
            info.skipped += 1
            if len(info.notes) < 5:
                info.notes.append(f"scrape failed: {exc}")
        n += 1
        elapsed = time.monotonic() - start
        if show:
            sys.stderr.write(f"\rkvdiag: scraping {url}: {n} scrape(s), {elapsed:.0f}/{duration:.0f}s ")
            sys.stderr.flush()
        if elapsed + interval > duration + 1e-9:
            break
        time.sleep(max(0.0, start + n * interval - time.monotonic()))
    if show:
        sys.stderr.write("\n")
    if info.observations == 0:
        info.notes.append("no vllm: series on this endpoint")
    bundle.inputs.append(info)
    return info
