"""One weight of a checkpoint (:class:`Module`): the unit :mod:`.modules` and :mod:`.towers` list and the
quantisation schemes price. Its own module so that both can build it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field

# kinds: "linear" (a weight matrix a scheme may quantise), "experts" (fused MoE weights, count = experts),
# "embedding", "lm_head", "dense" (kept in the model dtype by every scheme: norms, conv1d, per-head params, biases
# that belong to no quantisable matrix), "buffer" (allocated at load, not in the checkpoint: rope cache).


@dataclass(frozen=True)
class Module:
    """One weight of the checkpoint.

    Attributes:
        name: checkpoint name (``model.layers.0.self_attn.q_proj``); ignore lists are matched against it.
        kind: ``linear``, ``experts``, ``embedding``, ``lm_head``, ``dense`` or ``buffer``.
        out_features: rows of the weight (per expert for ``experts``; elements for ``dense``/``buffer``).
        in_features: columns (the reduction dimension group scales run along; 1 for ``dense``/``buffer``).
        count: experts in an ``experts`` entry (1 otherwise).
        bias: bias elements (model dtype under every scheme).
        part: the parameter-count bucket (``attention``, ``mlp``, ``experts``, ``state_layers``, ``towers``,
            ``embeddings``, ``lm_head``, ``norms``, ``mtp``, ``buffers``).
        aliases: other names the same module carries in checkpoints of other transformers versions.
        fused: checkpoint names of the shards a fused module (experts' gate/up) stands for.
    """

    name: str
    kind: str
    out_features: int
    in_features: int
    part: str
    count: int = 1
    bias: int = 0
    aliases: tuple[str, ...] = ()
    fused: tuple[str, ...] = field(default=())

    @property
    def params(self) -> int:
        """Parameters (elements) of the module, biases included."""
        return self.out_features * self.in_features * self.count + self.bias
