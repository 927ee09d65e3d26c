"""What a loaded tensor is, without reading its values: its layout record and the storage its
bytes share with other tensors (a non-tensor leaf's record is `leaves.describe_object`).

Runs where torch does (the sandbox worker, and the ledger in the training process). Nothing
here touches a tensor's data: statistics and digests are `stats`'.
"""

from __future__ import annotations

import torch

from inspector.core.strict_json import strict
from inspector.layout.spans import Spans, overlapping, reached


def dtype_name(dtype: torch.dtype) -> str:
    """'float32' for torch.float32."""
    return str(dtype).removeprefix("torch.")


def is_dense(t: torch.Tensor) -> bool:
    """True for strided tensors with data on the CPU (what statistics and digests need)."""
    return t.layout == torch.strided and t.device.type == "cpu" and not t.is_nested


def layout_record(key: str, t: torch.Tensor) -> dict:
    """Structural facts about a tensor, without touching its data."""
    if t.is_nested:
        parts = t.unbind()
        numel = sum(p.numel() for p in parts)
        return {"key": key, "dtype": dtype_name(t.dtype), "shape": [], "numel": numel,
                "nbytes": numel * t.element_size(), "layout": "nested",
                "device": t.device.type, "flags": ["nested"],
                "components": [list(p.shape) for p in parts[:16]]}
    rec: dict = {
        "key": key, "dtype": dtype_name(t.dtype), "shape": list(t.shape), "numel": t.numel(),
        "nbytes": t.numel() * t.element_size(), "layout": str(t.layout).removeprefix("torch."),
        "device": t.device.type, "flags": [],
    }
    if t.layout != torch.strided:
        rec["flags"].append("sparse")
        return rec
    if t.device.type == "meta":
        rec["flags"].append("meta")
    rec.update(stride=list(t.stride()), storage_offset=t.storage_offset(),
               contiguous=t.is_contiguous())
    if t.is_quantized:
        rec["flags"].append("quantized")
        rec["quantization"] = strict(_quantization(t))
    return rec


def _quantization(t: torch.Tensor) -> dict:
    scheme = str(t.qscheme()).removeprefix("torch.")
    if t.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        return {"scheme": scheme, "scale": t.q_scale(), "zero_point": t.q_zero_point()}
    scales = t.q_per_channel_scales()
    zeros = t.q_per_channel_zero_points()
    return {"scheme": scheme, "axis": t.q_per_channel_axis(), "channels": scales.numel(),
            "scale": [float(s) for s in scales[:16]], "zero_point": [int(z) for z in zeros[:16]],
            "nonfinite_scales": int((~torch.isfinite(scales)).sum())}


def storage_groups(items: list[tuple[str, torch.Tensor]]) -> dict[str, list[str]]:
    """For each key, the other keys whose tensors share bytes of its storage.

    Bytes, not the storage: every tensor of a safetensors file (and every item of a DCP
    folder) is a view of one mapping of its file, yet no two of them hold the same bytes.
    """
    return overlapping(_byte_spans(items))


def _byte_spans(items: list[tuple[str, torch.Tensor]]) -> Spans:
    """Per storage, the (start, end, key) bytes each dense, non-empty tensor reaches in it."""
    by_storage: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
    for key, t in items:
        if is_dense(t) and t.untyped_storage().nbytes() > 0 and t.numel() > 0:
            st = t.untyped_storage()
            start = t.storage_offset() * t.element_size()
            span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
            by_storage.setdefault((st.data_ptr(), st.nbytes()), []).append(
                (start, start + span * t.element_size(), key))
    return by_storage


def unique_storage(items: list[tuple[str, torch.Tensor]]) -> dict:
    """Storages, and the elements and bytes the tensors reach, each byte counted once (tied
    weights count once).

    The bytes reached, not the storage's size: a safetensors file's tensors are views of one
    mapping of the whole file, header included, which made a one-file GPT-2 count 168,850
    elements for 168,192 and its four shards 168,872."""
    itemsize = {key: t.element_size() for key, t in items}
    by_storage = _byte_spans(items)
    numel, nbytes = reached(by_storage, itemsize)
    for _, t in items:
        if not is_dense(t):
            size = layout_record("", t)
            numel += size["numel"]
            nbytes += size["nbytes"]
    return {"storages": len(by_storage), "numel": numel, "nbytes": nbytes}
