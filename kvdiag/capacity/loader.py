"""The one loader of ``--model-config`` (a Hugging Face ``config.json``) for every command: read bounded
(:func:`kvdiag.inputs.jsondoc.config`), its numbers checked (:mod:`.config_fields`), the fields the capacity model
needs present (:func:`.shape.model_shape`)."""

from __future__ import annotations

from ..errors import InputError
from .config_fields import check_config_numbers


def load_model_config(path: str) -> dict:
    """Read a Hugging Face ``config.json`` (``--model-config``) and check the fields the capacity model reads.

    The one loader of every command (analyze, check, watch, estimate, simulate).

    Raises:
        InputError: ``PATH: what`` for every fault: missing, unreadable, not JSON (``PATH:LINE: ...``), nested too
            deeply, not a JSON object, a number NaN / Infinity / out of range (:func:`check_config_numbers`), or a
            field :func:`kvdiag.capacity.model_shape` needs missing or malformed; the message names the file and the
            field.
    """
    from ..inputs.jsondoc import config
    from .shape import model_shape  # (shape imports config_fields: the loader sits above both)

    data = config(path)
    try:
        check_config_numbers(data)
        model_shape(data)
    except InputError as exc:
        raise InputError(f"{path}: {str(exc).removeprefix('config: ')}") from None
    return data
