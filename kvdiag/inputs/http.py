"""URLs kvdiag reads (``--metrics-url``, ``--prometheus-url``): one GET with a total deadline, a bounded body,
redirects only to the same host, and every URL shown through :func:`safe_url` (no userinfo, no query values).

Guards shared with the rest of :mod:`kvdiag.inputs`: a body of at most ``max_bytes``, a deadline on the whole exchange
(connect, headers, redirects, body: a server dripping one byte a second cannot hold kvdiag), one message form
(``URL: what happened``, never a header value), and :func:`url_problem` naming what is wrong with a URL before any
request (a password holding ``#``, which a URL parser takes for the start of a fragment, is told as such).
"""

from __future__ import annotations

import re
import threading
import time
from urllib.parse import urljoin, urlsplit

import requests
import urllib3

from ..errors import InputError, KvdiagError, ScrapeError  # noqa: F401

MAX_BODY_BYTES = 64 * 1024 * 1024
ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"  # OpenMetrics 1.0 from prometheus-client escapes ":" to "_"

MAX_REDIRECTS = 5
_SECRET_PARAM = re.compile(r"token|key|pass|pwd|secret|sig|auth|credential|session|cookie", re.I)
"""Query names that look secret (kept for callers; :func:`safe_url` now hides every query value)."""


def _safe_query(query: str) -> str:
    """A query string with every value replaced by ``***``, whatever its name (``?jwt=…``, ``?x=…``): only the
    names are shown (``&`` and ``;`` both separate parameters, as many servers read them)."""
    return "".join(
        part if part in ("&", ";") or "=" not in part else part.split("=", 1)[0] + "=***"
        for part in re.split(r"([&;])", query))


def safe_url(url: str) -> str:
    """``url`` fit to show or to use as an instance label: no ``user:password@`` (also a password holding ``#``,
    ``?`` or ``/``, which a URL parser would take for the path or query), every query value replaced by ``***``
    (only the names are shown), no fragment. Also for a URL that does not parse (``http://[::1/…``) or lacks its
    scheme (``user:pw@host:9090/metrics``): the credentials are cut by position, never echoed."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        scheme, sep, rest = ("", "//", text[2:]) if text.startswith("//") else ("", "", text)
    if "@" in rest:  # user:password@host: everything before the last '@' is userinfo (a password may hold '@', '?',
        # '#' or '/'; a query value holding '@' is cut too: the URL shown is shorter, never a secret)
        rest = rest.rsplit("@", 1)[-1]
    rest = rest.split("#", 1)[0]
    head, qmark, query = rest.partition("?")
    return f"{scheme.lower()}{sep}{head}" + (qmark + _safe_query(query) if query else "")



def url_problem(url: str) -> str:
    """What is wrong with ``url`` as an http(s) URL to GET ('' when nothing is), told before any request and without
    echoing a credential: a scheme other than http / https, no host, or userinfo (``user:password@``) holding a
    character that ends it for a URL parser (``#`` starts a fragment, ``/`` a path, ``?`` a query: percent-encode
    it)."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return "expected an http:// or https:// URL"
    if "@" in rest:
        userinfo = rest.rsplit("@", 1)[0]
        for ch, code in (("#", "%23"), ("/", "%2F"), ("?", "%3F")):
            if ch in userinfo:
                return (f"the user or password before '@' holds '{ch}', which ends it for a URL parser "
                        f"(percent-encode it as {code}; the credentials are not shown)")
        rest = rest.rsplit("@", 1)[1]
    if not rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]:
        return "expected an http:// or https:// URL with a host"
    return ""


def run_with_deadline(fn, timeout: float, on_timeout: str, cancel=None):
    """Run ``fn()`` in a worker thread and wait at most ``timeout`` seconds (plus a short grace for the
    worker's own timeout errors) for it; the result, or the exception it raised.

    A socket timeout bounds each ``recv()``, not the whole exchange: a server that sends its headers
    one byte at a time would hold a plain request forever. Past the deadline the worker is
    abandoned (a daemon thread; ``cancel()``, when given, closes its connection) and
    ``ScrapeError(on_timeout)`` is raised. An exception that is not a :class:`KvdiagError` is
    re-raised as is for the caller to word.
    """
    box: dict = {}
    done = threading.Event()

    def work():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, daemon=True, name="kvdiag-http").start()
    if not done.wait(timeout + min(0.5, timeout / 4 + 0.05)):
        if cancel is not None:
            try:
                cancel()
            except Exception:  # noqa: BLE001 - best effort; the daemon thread is abandoned anyway
                pass
        raise ScrapeError(on_timeout)
    if "error" in box:
        raise box["error"]
    return box["result"]


# what urllib3 / http.client say when the TCP connection stood but the bytes that came back were no HTTP answer
_NOT_HTTP = (("badstatusline", "the reply is not HTTP"), ("got more than", "a reply header line is too long"),
             ("line too long", "a reply header line is too long"), ("too many headers", "too many reply headers"),
             ("remotedisconnected", "the server closed the connection without an answer"),
             ("remote end closed", "the server closed the connection without an answer"),
             ("connection reset", "the server reset the connection"),
             ("connection aborted", "the reply is not HTTP"))


def _connected_but(msg: str) -> str:
    """'connected, but …' when ``msg`` (a requests ConnectionError, lower case) shows the connection was made;
    else 'cannot connect'."""
    for needle, what in _NOT_HTTP:
        if needle in msg:
            return f"connected, but {what}"
    return "cannot connect"


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    if pa.hostname != pb.hostname:
        return False
    return (pa.scheme, pa.port) == (pb.scheme, pb.port) or (pa.scheme, pb.scheme) == ("http", "https")


def http_get(session: requests.Session, url: str, timeout: float, *, params: dict | None = None,
             accept: str = ACCEPT, max_bytes: int = MAX_BODY_BYTES, what: str = "a /metrics page") -> tuple[bytes, str, int]:
    """GET ``url`` with a total deadline of ``timeout`` seconds (connect, headers, redirects and body);
    return ``(body, content_type, status)``.

    Redirects are followed (at most :data:`MAX_REDIRECTS`) only to the same host, so ``--header`` and
    bearer-token values never travel to another one. URLs in messages go through :func:`safe_url`;
    header values are never quoted.

    Raises:
        ScrapeError: refused, timed out, TLS failure, redirected to another host, body larger than
            ``max_bytes``, body cut off, a bad URL.
    """
    shown = safe_url(url)
    problem = url_problem(url)
    if problem:
        raise ScrapeError(f"{shown}: {problem}")
    state: dict = {"resp": None, "shown": shown}

    def cancel():
        resp = state["resp"]
        if resp is not None:
            resp.close()

    try:
        return run_with_deadline(lambda: _get(session, url, timeout, params, accept, max_bytes, what, state),
                                 timeout, f"{state['shown']}: no complete answer within {timeout:g}s", cancel)
    except ScrapeError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line naming the URL, never a value of a header
        raise ScrapeError(f"{shown}: request failed ({exc.__class__.__name__})") from None


def _get(session, url, timeout, params, accept, max_bytes, what, state) -> tuple[bytes, str, int]:
    deadline = time.monotonic() + timeout
    shown = state["shown"]
    current = url
    for _hop in range(MAX_REDIRECTS + 1):
        try:
            resp = session.get(current, params=params, timeout=(timeout / 3, timeout), stream=True,
                               headers={"Accept": accept}, allow_redirects=False,
                               verify=session.verify)  # explicit: REQUESTS_CA_BUNDLE would override the session
        except requests.exceptions.SSLError as exc:
            reason = "certificate verify failed" if "CERTIFICATE_VERIFY_FAILED" in str(exc) else "TLS error"
            raise ScrapeError(f"{shown}: {reason} (use --ca-cert FILE, or --insecure)") from None
        except requests.exceptions.ConnectTimeout:
            raise ScrapeError(f"{shown}: connection timed out after {timeout:g}s") from None
        except requests.exceptions.ReadTimeout:
            raise ScrapeError(f"{shown}: no answer within {timeout:g}s") from None
        except requests.exceptions.ConnectionError as exc:
            msg = str(exc).lower()
            if "read timed out" in msg:  # urllib3 wraps a read timeout in MaxRetryError when retries are spent
                raise ScrapeError(f"{shown}: no answer within {timeout:g}s") from None
            reason = "connection refused" if "refused" in msg else (
                f"connection timed out after {timeout:g}s" if "timed out" in msg else _connected_but(msg))
            raise ScrapeError(f"{shown}: {reason}") from None
        except (requests.exceptions.MissingSchema, requests.exceptions.InvalidSchema,
                requests.exceptions.InvalidURL):
            raise ScrapeError(f"{shown}: expected an http:// or https:// URL") from None
        except requests.exceptions.RequestException as exc:
            raise ScrapeError(f"{shown}: request failed ({exc.__class__.__name__})") from None
        state["resp"] = resp
        if not resp.is_redirect:
            break
        target = urljoin(current, resp.headers.get("Location", ""))
        resp.close()
        if not _same_origin(current, target):
            raise ScrapeError(f"{shown}: redirected to {safe_url(target)}, another host; not followed (headers and "
                              "tokens stay with the host given); give that URL directly if it is right")
        current, params = target, None
        shown = state["shown"] = f"{safe_url(url)} (redirected to {safe_url(current)})"
    else:
        raise ScrapeError(f"{shown}: more than {MAX_REDIRECTS} redirects, expected {what}")
    with resp:
        chunks, size = [], 0
        raw = resp.raw
        if hasattr(raw, "read1"):  # urllib3 2: returns as soon as some bytes arrived, so a drip cannot hold us; 2.6+
            # inflates at most the bytes asked for per call (a gzip bomb never comes out whole)
            reader = iter(lambda: raw.read1(65536, decode_content=True), b"")
        else:
            reader = resp.iter_content(4096)
        declared = resp.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > max_bytes and "Content-Encoding" not in resp.headers:
            raise ScrapeError(f"{shown}: body of {int(declared) / 2**20:,.0f} MiB announced, larger than "
                              f"{max_bytes // 2**20} MiB, what kvdiag reads for {what}")
        try:
            for chunk in reader:
                # the cap and the deadline while streaming, before the chunk is kept: the bytes held never pass
                # max_bytes, and a server that never ends (chunked forever, a drip) is cut at the deadline
                size += len(chunk)
                if size > max_bytes:
                    raise ScrapeError(f"{shown}: body larger than {max_bytes // 2**20} MiB (decompressed), the cap "
                                      f"kvdiag reads for {what}")
                if time.monotonic() > deadline:
                    raise ScrapeError(f"{shown}: body not complete within {timeout:g}s (--timeout)")
                chunks.append(chunk)
        except requests.exceptions.ReadTimeout:
            raise ScrapeError(f"{shown}: body stalled, no data within {timeout:g}s") from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            if "timed out" in str(exc).lower():
                raise ScrapeError(f"{shown}: body stalled, no data within {timeout:g}s") from None
            raise ScrapeError(f"{shown}: body cut off ({exc.__class__.__name__})") from None
        return b"".join(chunks), resp.headers.get("Content-Type", ""), resp.status_code

