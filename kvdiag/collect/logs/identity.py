"""Model identity read from a log: multimodal or not, by architecture (``architectures.tsv``: vLLM's model
registry 0.4-0.33) or by checkpoint name."""

from __future__ import annotations

# ``LogCollector`` (:mod:`.collector`) is named in annotations only: the collector imports this module

import functools
import re
from pathlib import Path

from .envelope import _bounded, Line

# architectures that end in ForConditionalGeneration but take only text (vllm/model_executor/models/registry.py)
_TEXT_SEQ2SEQ = re.compile(r"^(?:M?Bart|T5|MT5|Marian|Pegasus|Mistral3Text)ForConditionalGeneration$")
_MM_ARCH = re.compile(r"VL|Vision|Llava|LLaVA|Omni|Audio|Whisper|Pixtral|Idefics|Mllama|InternVL|InternS1|MiniCPM[VO]|"
                      r"Phi3V|Phi4MM|Phi4Multimodal|Molmo|PaliGemma|Chameleon|Fuyu|Blip|Aria|Ultravox|Florence|"
                      r"Voxtral|Granite(?:Speech|Vision)|Kimi(?:VL|K25)|NVLM|H2OVL|Ovis|Skywork|Deepseek(?:VL|OCR)|"
                      r"Emu3|Step3VL|Glm4v|GLM4V|Keye|Tarsier|Aya(?:Vision)|SmolVLM|Lfm2Vl|Gemma3n?ForConditional")


@functools.lru_cache(maxsize=1)
def _architectures() -> dict[str, bool]:
    """``architectures.tsv``: every architecture of vLLM's model registry 0.4-0.33 → multimodal or not."""
    out = {}
    for row in (Path(__file__).parent.parent / "architectures.tsv").read_text().splitlines():
        if row and not row.startswith("#"):
            name, kind = row.split("\t")
            out[name] = kind == "multimodal"
    return out


def is_multimodal_architecture(arch: str) -> bool:
    """Does vLLM architecture ``arch`` take images / audio / video?

    Looked up in ``architectures.tsv`` (the keys of ``_MULTIMODAL_MODELS`` vs the text tables of
    ``vllm/model_executor/models/registry.py`` in the wheels 0.4-0.33); a name not listed there (a newer or
    out-of-tree model) is multimodal when it has a vision or audio marker (``VL``, ``Vision``, ``Llava``, ``Audio``,
    ``Omni``, ...) or ends in ``ForConditionalGeneration`` (the suffix vLLM's registry files its multimodal models
    under), except the text-only encoder-decoders (Bart, T5, ...)."""
    known = _architectures().get(arch)
    if known is not None:
        return known
    if _TEXT_SEQ2SEQ.match(arch):
        return False
    return bool(_MM_ARCH.search(arch)) or arch.endswith("ForConditionalGeneration")


# multimodal checkpoints by name (Hugging Face ids: Qwen2.5-VL-7B, Llama-3.2-11B-Vision, llava-1.5, Phi-3.5-vision,
# gemma-3n, Qwen2-Audio, Qwen2.5-Omni, pixtral, InternVL, MiniCPM-V/-o, idefics, molmo, paligemma, ...)
_MM_NAME = re.compile(r"(?i)(?:^|[-_./])(?:vl|vlm|vision|llava[\w.-]*|omni|audio|pixtral[\w.-]*|internvl[\w.-]*|"
                      r"minicpm-?[vo][\w.-]*|idefics\d*|molmo[\w.-]*|paligemma[\w.-]*|ultravox[\w.-]*|"
                      r"voxtral[\w.-]*|smolvlm[\w.-]*|qwen\d(?:\.\d)?-?vl[\w.-]*)(?=$|[-_./\d])")


def _model_name(c: LogCollector, line: Line, name: str) -> None:
    c._add("model_name", None, line, text=_bounded(name))
    if _MM_NAME.search(name):
        _set_multimodal(c, line, True)


def _set_multimodal(c: LogCollector, line: Line, value: bool) -> None:
    if value and not c.multimodal:
        c.multimodal = True
        c._add("model_multimodal", 1.0, line)
    elif not value and not c._mm_said:
        c._add("model_multimodal", 0.0, line)
    c._mm_said = True


