"""Phase before class (issue 39 item 3): PyTorch's OOM text "with X allocated in private pools (e.g., CUDA Graphs)"
says memory was allocated in a private pool — vLLM captures its CUDA graphs into one
(``vllm/compilation/cuda_graph.py`` ``CUDAGraphWrapper``: ``torch.cuda.graph(cudagraph, pool=self.graph_pool)``),
which ``compile_or_warm_up_model`` does after the weights loaded and the KV pool was allocated. A frameless OOM
holding such memory is not a weight-loading OOM, however much of the GPU PyTorch holds.

Input: incident 264 (tuned side of tools/corpus_split.py; the 5-line PyTorch OOM text pasted in
wtdcode/vllm-backport#94, see its source.md), read in-process."""

from __future__ import annotations

import json

from click.testing import CliRunner

from conftest import FIXTURES

from kvdiag.bundle import Bundle
from kvdiag.cli import cli
from kvdiag.collect.logs import read_logs

CASE = FIXTURES / "incidents" / "264-dsv41-flash-8xa800-245k-prefill-mhc-activation-oom"
GIB = 2**30


def _analyze(path) -> tuple[dict, str]:
    runner = CliRunner()
    js = runner.invoke(cli, ["analyze", "--log", str(path), "--format", "json"])
    text = runner.invoke(cli, ["analyze", "--log", str(path)])
    return json.loads(js.output), text.output


def test_the_reader_records_the_private_pools_figure():
    b = Bundle()
    read_logs(b, [str(CASE / "vllm.log")], progress=False)
    rows = b.signal("oom_private_pools_bytes")
    assert list(rows["value"]) == [2.52 * GIB], rows


def test_an_oom_with_cuda_graph_memory_is_not_weights_dont_fit():
    doc, text = _analyze(CASE / "vllm.log")
    assert doc["verdict"]["primary"] != "weights_dont_fit", doc["verdict"]
    assert "--tensor-parallel-size" not in text, text
    phases = {e["source"] for f in doc["findings"] for e in f["evidence"] if e["signal"] == "cuda_oom_phase"}
    assert phases and all("(load)" not in s for s in phases), phases
