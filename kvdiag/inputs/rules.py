"""YAML rule files and rule case files (``--rules DIR``, ``rules test CASES_DIR``).

Guards (:func:`kvdiag.engine.model.bounded_yaml`): a bounded read of a regular file (:mod:`.files`), UTF-8, the
composed document at most ``MAX_YAML_NODES`` nodes with aliases counted as often as used and ``MAX_YAML_DEPTH`` levels
(a "billion laughs" file is refused in milliseconds), a recursive alias refused, a 4,300-digit integer refused, every
message ``file: …: expected …``. Texts of a rule that reach an exported Prometheus rule file are escaped for Go
templates there (:func:`kvdiag.export.go_literal`).
"""

from __future__ import annotations


def load_yaml(path: str, text: str | None = None, what: str = "a YAML rule file"):
    """One YAML file of kvdiag's, guarded (see the module docstring)."""
    from ..engine.model import bounded_yaml

    return bounded_yaml(path, text, what)
