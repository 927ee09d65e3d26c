"""Quantized and sparse tensors as plain tensors that rebuild them exactly; runs in the worker.

safetensors holds only dense tensors of plain dtypes, so `convert` writes a quantized or
sparse tensor KEY as parts named KEY + SEPARATOR + suffix, and records how to rebuild it in
`__metadata__[METADATA_KEY]` (JSON: {KEY: spec}). `diff` and the `digests` of the original
split it the same way, so the parts compare and verify one for one.

- quantized (qint8, quint8, qint32), per-tensor affine or symmetric:
  `KEY::int_repr` (int8/uint8/int32), `KEY::scale` (float64, 0-d), `KEY::zero_point` (int64,
  0-d); per-channel: `scale` and `zero_point` are 1-d and the spec holds `axis`.
- sparse COO: `KEY::indices` (int64, [ndim, nnz]) and `KEY::values`, as stored (uncoalesced
  entries stay as they are); the spec holds `shape` and `coalesced`.
- sparse CSR, CSC, BSR, BSC: `KEY::compressed_indices`, `KEY::plain_indices`, `KEY::values`;
  the spec holds `shape` and `layout`.

Every spec holds `kind` and the original `dtype`. `decode` rebuilds the tensor (symmetric
schemes come back as their affine equivalent: same values, scale and zero point).
"""

from __future__ import annotations

import json

import torch

from inspector.core.errors import CodedError
from inspector.formats.safetensors_header import ENCODED_KEY as METADATA_KEY

SEPARATOR = "::"
_QUANTIZED = {torch.qint8, torch.quint8, torch.qint32}
_PER_TENSOR = {torch.per_tensor_affine, torch.per_tensor_symmetric}
_PER_CHANNEL = {torch.per_channel_affine, torch.per_channel_symmetric,
                torch.per_channel_affine_float_qparams}
_COMPRESSED = {torch.sparse_csr: ("crow_indices", "col_indices"),
               torch.sparse_bsr: ("crow_indices", "col_indices"),
               torch.sparse_csc: ("ccol_indices", "row_indices"),
               torch.sparse_bsc: ("ccol_indices", "row_indices")}


_SUFFIXES = {"quantized": ("int_repr", "scale", "zero_point"),
             "sparse_coo": ("indices", "values"),
             "sparse_compressed": ("compressed_indices", "plain_indices", "values")}


def _name(dtype: torch.dtype | torch.layout | torch.qscheme) -> str:
    return str(dtype).removeprefix("torch.")


def encode(t: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict] | None:
    """(parts by suffix, rebuild spec) for a quantized or sparse tensor; None otherwise."""
    spec: dict = {"dtype": _name(t.dtype), "shape": list(t.shape)}
    if t.is_quantized and t.dtype in _QUANTIZED and t.device.type == "cpu":
        scheme = t.qscheme()
        spec.update(kind="quantized", scheme=_name(scheme))
        parts = {"int_repr": t.int_repr()}
        if scheme in _PER_TENSOR:
            parts["scale"] = torch.tensor(t.q_scale(), dtype=torch.float64)
            parts["zero_point"] = torch.tensor(t.q_zero_point(), dtype=torch.int64)
        elif scheme in _PER_CHANNEL:
            parts["scale"] = t.q_per_channel_scales()
            parts["zero_point"] = t.q_per_channel_zero_points()
            spec["axis"] = t.q_per_channel_axis()
        else:
            return None
        return parts, spec
    if t.layout == torch.sparse_coo and t.device.type == "cpu":
        spec.update(kind="sparse_coo", coalesced=t.is_coalesced())
        return {"indices": t._indices(), "values": t._values()}, spec
    if t.layout in _COMPRESSED and t.device.type == "cpu":
        compressed, plain = _COMPRESSED[t.layout]
        spec.update(kind="sparse_compressed", layout=_name(t.layout))
        return {"compressed_indices": getattr(t, compressed)(),
                "plain_indices": getattr(t, plain)(), "values": t.values()}, spec
    return None


def expand(tensors: list[tuple[str, torch.Tensor]]
           ) -> tuple[list[tuple[str, torch.Tensor]], dict[str, dict]]:
    """Replace each encodable tensor by its parts; ({part key: tensor} list, {key: spec})."""
    out: list[tuple[str, torch.Tensor]] = []
    specs: dict[str, dict] = {}
    for key, t in tensors:
        encoded = encode(t) if (t.is_quantized or t.layout != torch.strided) else None
        if encoded is None:
            out.append((key, t))
            continue
        parts, specs[key] = encoded
        out.extend((f"{key}{SEPARATOR}{suffix}", part) for suffix, part in parts.items())
    seen: set[str] = set()
    for name, _ in out:
        if name in seen:
            # a real key named like a part ("q::scale" beside a quantized "q"): a file could
            # hold only one of them under that name
            raise CodedError("key_collision",
                             f"{name!r} names both a tensor and a part of an encoded "
                             f"(quantized or sparse) tensor; rename one of them")
        seen.add(name)
    return out, specs


def metadata_entry(specs: dict[str, dict]) -> dict[str, str]:
    """The `__metadata__` entry that records the specs (empty when nothing was encoded)."""
    return {METADATA_KEY: json.dumps(specs, sort_keys=True)} if specs else {}


def decode(parts: dict[str, torch.Tensor], spec: dict) -> torch.Tensor:
    """Rebuild a tensor from its parts (keyed by suffix) and its spec."""
    kind = spec["kind"]
    if kind == "quantized":
        int_repr, scale, zero_point = parts["int_repr"], parts["scale"], parts["zero_point"]
        if "axis" in spec:
            return torch._make_per_channel_quantized_tensor(int_repr, scale, zero_point,
                                                            spec["axis"])
        return torch._make_per_tensor_quantized_tensor(int_repr, float(scale),
                                                       int(zero_point))
    if kind == "sparse_coo":
        return torch.sparse_coo_tensor(parts["indices"], parts["values"], spec["shape"],
                                       is_coalesced=spec["coalesced"])
    if kind == "sparse_compressed":
        return torch.sparse_compressed_tensor(
            parts["compressed_indices"], parts["plain_indices"], parts["values"],
            spec["shape"], layout=getattr(torch, spec["layout"]))
    raise ValueError(f"unknown encoding {kind!r}")


def decode_file(tensors: dict[str, torch.Tensor], metadata: dict[str, str]
                ) -> dict[str, torch.Tensor]:
    """A converted file's tensors with every encoded tensor rebuilt under its own key."""
    specs = json.loads(metadata.get(METADATA_KEY, "{}"))
    out = dict(tensors)
    for key, spec in specs.items():
        prefix = key + SEPARATOR
        # only the parts `encode` writes: a plain tensor named "KEY::other" stays itself
        names = [prefix + s for s in _SUFFIXES[spec["kind"]] if prefix + s in tensors]
        out[key] = decode({k[len(prefix):]: out.pop(k) for k in names}, spec)
    return out
