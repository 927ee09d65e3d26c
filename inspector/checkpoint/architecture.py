"""A guess of what model a checkpoint holds, from its tensor names and shapes alone.

Works on the inspect contract's tensor records (`key`, `shape`, `dtype`, `numel`,
`shared_with`, `digest`), so it needs no torch and judges old results too. Training state
(optimizer, scheduler, counters: `checkpoint.health.is_state_key`) is left out, and keys are matched
anywhere in the dotted path, so `model.`, `module.` or Lightning's `state_dict.` prefixes change
nothing. A family is named only when its own key names appear; whatever no shape tells
(attention heads of most families, for one) stays None, never a default.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from inspector.checkpoint.health import is_state_key
from inspector.checkpoint.tensor_stats import TensorStats

UNKNOWN = "unknown"
# Normalisation running statistics are buffers, not parameters; int64 and bool tensors are
# indices, counters and masks (quantized weights are 8- or 32-bit, so those still count).
_BUFFER_LEAVES = frozenset({"running_mean", "running_var", "num_batches_tracked"})
_NOT_WEIGHT_DTYPES = frozenset({"int64", "bool"})
# Fixed-width lookbehinds: an encoder-decoder's `decoder.layers.N.self_attn` is not Llama's.
_LLAMA_LAYER = r"(?:^|\.)(?<!encoder\.)(?<!decoder\.)layers\.(\d+)\."
_VIT_PATCHES = r"(?:^|\.)(?:patch_embeddings\.projection|patch_embed\.proj)\.weight$"
_RESNET = re.compile(r"(?:^|\.)layer\d\.\d+\.conv\d\.weight$")


@dataclass
class Architecture:
    """What the weights look like: family, depth, widths, tying and size."""

    family: str = UNKNOWN
    layers: dict[str, int] = field(default_factory=dict)
    """Layer kind (decoder, encoder, convolution) -> count."""
    hidden_size: int | None = None
    vocab_size: int | None = None
    attention_heads: int | None = None
    intermediate_size: int | None = None
    tied_embeddings: bool | None = None
    """None where the model has no output head that could be tied."""
    parameters: int = 0
    """Elements of the model's weights, shared storage once, buffers and training state not."""
    notes: list[str] = field(default_factory=list)
    evidence: str = ""
    """The key that named the family."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Architecture:
        """Back from `to_json()`'s dict; keys a later version adds are ignored."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def to_json(self) -> dict[str, Any]:
        """The `architecture` contract: every field, None as null."""
        return {"family": self.family, "layers": dict(self.layers),
                "hidden_size": self.hidden_size, "vocab_size": self.vocab_size,
                "attention_heads": self.attention_heads,
                "intermediate_size": self.intermediate_size,
                "tied_embeddings": self.tied_embeddings, "parameters": self.parameters,
                "notes": list(self.notes), "evidence": self.evidence}

    def summary(self) -> str:
        """One line for a person: 'Llama-style decoder · 32 decoder layers · hidden size ...'."""
        parts = [self.family if self.family != UNKNOWN else "family unknown"]
        parts += [f"{n} {kind} layer{'s' if n != 1 else ''}" for kind, n in self.layers.items()]
        for label, value in (("hidden size", self.hidden_size),
                             ("vocabulary", self.vocab_size),
                             ("attention heads", self.attention_heads),
                             ("MLP width", self.intermediate_size)):
            if value is not None:
                parts.append(f"{label} {value:,}")
        if self.tied_embeddings is not None:
            parts.append("tied embeddings" if self.tied_embeddings else "separate output head")
        parts.append(f"{self.parameters:,} parameters")
        return " · ".join(parts + self.notes)


def is_model_weight(key: str, dtype: object) -> bool:
    """A tensor of this key and dtype is a model weight: not training state, a buffer, indices
    or a mask."""
    return (not is_state_key(key) and key.rpartition(".")[2] not in _BUFFER_LEAVES
            and str(dtype) not in _NOT_WEIGHT_DTYPES)


def model_weights(tensors: Iterable[TensorStats]) -> list[TensorStats]:
    """The records that are model weights (`is_model_weight`)."""
    return [t for t in tensors if is_model_weight(t.key, t.dtype)]


def unique_weights(weights: list[TensorStats]) -> list[TensorStats]:
    """`weights` less each one that shares an earlier one's storage and shape (tied weights)."""
    shapes = {t.key: t.shape for t in weights}
    seen: set[str] = set()
    out = []
    for t in weights:
        if not any(k in seen and shapes.get(k) == t.shape for k in t.shared_with or ()):
            out.append(t)
        seen.add(t.key)
    return out


def _find(pattern: str | None, by_key: dict[str, TensorStats]) -> TensorStats | None:
    if pattern is None:
        return None
    regex = re.compile(pattern)
    return next((t for k, t in by_key.items() if regex.search(k)), None)


def _shape(rec: TensorStats | None) -> list[int]:
    return [int(n) for n in (rec.shape if rec is not None else None) or ()]


def _dim(pattern: str, by_key: dict[str, TensorStats], axis: int = 0) -> int | None:
    """Size along `axis` of the first 2-D weight matching `pattern`."""
    shape = _shape(_find(pattern, by_key))
    return shape[axis] if len(shape) == 2 else None


def _numbers(pattern: str, by_key: dict[str, TensorStats]) -> set[int]:
    regex = re.compile(pattern)
    return {int(m.group(1)) for m in map(regex.search, by_key) if m}


def _read_t5(out: Architecture, by_key: dict[str, TensorStats]) -> None:
    out.attention_heads = _dim(r"(?:^|\.)block\.0\.layer\.0\.SelfAttention"
                               r"\.relative_attention_bias\.weight$", by_key, axis=1)
    out.intermediate_size = _dim(r"\.block\.0\.layer\.1\.DenseReluDense\.wi(?:_0)?\.weight$",
                                 by_key)


def _read_vit(out: Architecture, by_key: dict[str, TensorStats]) -> None:
    shape = _shape(_find(_VIT_PATCHES, by_key))
    if len(shape) == 4:
        out.hidden_size = shape[0]
        out.notes.append(f"{shape[2]}×{shape[3]} patches of {shape[1]} channels")
    out.intermediate_size = _dim(r"(?:^|\.)(?:layers|layer|blocks)\.0\.(?:mlp\.fc1|intermediate"
                                 r"\.dense)\.weight$", by_key)


def _read_llama(out: Architecture, by_key: dict[str, TensorStats]) -> None:
    out.intermediate_size = _dim(_LLAMA_LAYER + r"mlp\.gate_proj\.weight$", by_key)
    q = _dim(_LLAMA_LAYER + r"self_attn\.q_proj\.weight$", by_key)
    kv = _dim(_LLAMA_LAYER + r"self_attn\.k_proj\.weight$", by_key)
    # The head width is in no shape, so only the query to key/value head ratio is known.
    if q and kv and q != kv and q % kv == 0:
        out.notes.append(f"grouped-query attention: {q // kv} query heads per key/value head")
    # A mixture of experts: the router has a row per expert; each expert's MLP is numbered
    # (Mixtral as first published) or fused into [experts, ...] tensors (transformers 5).
    moe = _LLAMA_LAYER + r"(?:mlp|block_sparse_moe)\."
    experts = _dim(moe + r"gate\.weight$", by_key)
    if experts:
        out.notes.append(f"mixture of experts: {experts} experts per layer")
        fused = _shape(_find(moe + r"experts\.down_proj$", by_key))
        out.intermediate_size = (_dim(moe + r"experts\.0\.w1\.weight$", by_key)
                                 or (fused[2] if len(fused) == 3 else None))


def _read_gpt2(out: Architecture, by_key: dict[str, TensorStats]) -> None:
    # GPT-2's Conv1D stores [in, out], the transpose of nn.Linear.
    out.intermediate_size = _dim(r"(?:^|\.)h\.0\.mlp\.c_fc\.weight$", by_key, axis=1)
    positions = _dim(r"(?:^|\.)wpe\.weight$", by_key)
    if positions:
        out.notes.append(f"{positions:,} positions")


def _read_bert(out: Architecture, by_key: dict[str, TensorStats]) -> None:
    out.intermediate_size = _dim(r"(?:^|\.)layer\.0\.intermediate\.dense\.weight$", by_key)


@dataclass(frozen=True)
class _Family:
    name: str
    marker: str
    """A key only this family has."""
    layers: dict[str, str]
    """Layer kind -> regex whose first group is the layer number."""
    read: Callable[[Architecture, dict[str, TensorStats]], None]
    """Reads what else its shapes tell (heads, MLP width, ...)."""
    embedding: str | None = None
    """The token embedding, [vocabulary, hidden]."""
    head: str | None = None
    """The output projection that may be tied to the embedding."""
    head_optional: bool = False
    """An encoder without a masked-LM head has nothing to tie; a decoder's absent head is."""


# Checked in order: transformers 5's ViT names its attention like Llama (`layers.N.attention.
# q_proj`), so the patch embedding is looked for before Llama's `self_attn`.
_FAMILIES = (
    _Family("T5-style encoder-decoder",
            r"(?:^|\.)encoder\.block\.\d+\.layer\.0\.SelfAttention\.q\.weight$",
            {"encoder": r"(?:^|\.)encoder\.block\.(\d+)\.",
             "decoder": r"(?:^|\.)decoder\.block\.(\d+)\."}, _read_t5,
            embedding=r"(?:^|\.)shared\.weight$", head=r"(?:^|\.)lm_head\.weight$"),
    _Family("Vision Transformer (ViT)", _VIT_PATCHES,
            {"encoder": r"(?:^|\.)(?:layers|layer|blocks)\.(\d+)\."}, _read_vit),
    _Family("Llama-style decoder (Llama, Mistral, Qwen2, ...)",
            _LLAMA_LAYER + r"self_attn\.q_proj\.weight$", {"decoder": _LLAMA_LAYER}, _read_llama,
            embedding=r"(?:^|\.)embed_tokens\.weight$", head=r"(?:^|\.)lm_head\.weight$"),
    _Family("GPT-2-style decoder", r"(?:^|\.)h\.\d+\.attn\.c_attn\.weight$",
            {"decoder": r"(?:^|\.)h\.(\d+)\."}, _read_gpt2,
            embedding=r"(?:^|\.)wte\.weight$", head=r"(?:^|\.)lm_head\.weight$"),
    _Family("BERT-style encoder (BERT, RoBERTa, ...)",
            r"(?:^|\.)encoder\.layer\.\d+\.attention\.self\.query\.weight$",
            {"encoder": r"(?:^|\.)encoder\.layer\.(\d+)\."}, _read_bert,
            embedding=r"(?:^|\.)embeddings\.word_embeddings\.weight$",
            head=r"(?:^|\.)(?:cls\.predictions|lm_head)\.decoder\.weight$", head_optional=True),
)


def guess_architecture(tensors: Iterable[TensorStats]) -> Architecture:
    """Guess the architecture from the inspect contract's tensor records."""
    weights = model_weights(tensors)
    by_key = {t.key: t for t in weights}
    out = Architecture(parameters=sum(int(t.numel or 0) for t in unique_weights(weights)))
    for family in _FAMILIES:
        marker = re.compile(family.marker)
        evidence = next((k for k in by_key if marker.search(k)), None)
        if evidence is not None:
            out.family, out.evidence = family.name, evidence
            _read_family(out, family, by_key)
            return out
    _read_cnn(out, by_key)
    return out


def _read_family(out: Architecture, family: _Family, by_key: dict[str, TensorStats]) -> None:
    for kind, pattern in family.layers.items():
        numbers = _numbers(pattern, by_key)
        if numbers:
            out.layers[kind] = max(numbers) + 1
    embedding = _find(family.embedding, by_key)
    if embedding is not None and len(_shape(embedding)) == 2:
        out.vocab_size, out.hidden_size = _shape(embedding)
        head = _find(family.head, by_key)
        if head is not None:
            out.tied_embeddings = _same_tensor(embedding, head)
        elif not family.head_optional:
            # transformers leaves a tied head out of what it saves; so does a base model.
            out.tied_embeddings = True
            out.notes.append("no output head saved: tied to the embedding, or a base model")
    family.read(out, by_key)


def _read_cnn(out: Architecture, by_key: dict[str, TensorStats]) -> None:
    convs = [k for k, t in by_key.items() if k.endswith("weight") and len(_shape(t)) in (4, 5)]
    if not convs:
        return
    resnet = next((k for k in convs if _RESNET.search(k)), None)
    out.family = "ResNet-style CNN" if resnet else "convolutional network"
    out.evidence = resnet or convs[0]
    out.layers["convolution"] = len(convs)


def _same_tensor(embedding: TensorStats, head: TensorStats) -> bool:
    """The head shares the embedding's storage, or was saved as an identical copy."""
    return (embedding.key in (head.shared_with or ())
            or (head.digest is not None and head.digest == embedding.digest
                and head.shape == embedding.shape))

