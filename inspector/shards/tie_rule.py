"""Which name of a tied tensor is stored: the one transformers' `save_pretrained` keeps.

transformers drops the keys its model class lists in `_tied_weights_keys` (the output head, a
decoder's copy of the embedding) and keeps the tensor they are tied to. The worker cannot
import transformers, so the names decide: the shared embedding of an encoder-decoder
(`shared`, as T5 and BART call it) first, then an input embedding (`wte`, `embed_tokens`,
`word_embeddings`, `tok_embeddings`, `embed_in`, `word_embedding`), then any other name, and an
output projection (`lm_head`, `embed_out`, `output`, `decoder` as BERT's head calls it) last;
among names of one rank the first in sorted order, as the safetensors project's own converter
keeps it. Only the module that holds the tensor counts, so BART's `model.decoder.embed_tokens`
is an input embedding. No torch.
"""

from __future__ import annotations

from collections.abc import Iterable

_SHARED = frozenset({"shared"})
_INPUT_EMBEDDINGS = frozenset({"wte", "embed_tokens", "word_embeddings", "tok_embeddings",
                               "embed_in", "word_embedding"})
_OUTPUT_HEADS = frozenset({"lm_head", "embed_out", "output", "decoder"})


def _rank(name: str) -> tuple[int, str]:
    parts = name.split(".")
    module = parts[-2] if len(parts) > 1 else ""
    if module in _SHARED:
        return 0, name
    if module in _INPUT_EMBEDDINGS:
        return 1, name
    return (3 if module in _OUTPUT_HEADS else 2), name


def kept_name(names: Iterable[str]) -> str:
    """Of the names of one tied tensor, the one a conversion stores (the rest are aliases)."""
    return min(names, key=_rank)
