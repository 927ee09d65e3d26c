"""The byte spans tensors reach in their storages, torch-free: which tensors overlap, and how
many bytes they reach, each counted once.

`tensors.records` hands them the spans of loaded tensors, `tensors.plain` the spans a
safetensors or GGUF header lists, so both give the same `shared_with` and `unique_storage`; the
user's process checks a worker's `shared_with` with the same function (`claims.records`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

Spans = Mapping[Hashable, list[tuple[int, int, str]]]
"""Per storage, the (start, end, key) bytes each dense, non-empty tensor reaches in it."""


def overlapping(spans: Spans) -> dict[str, list[str]]:
    """For each key, the other keys whose spans share bytes with its own in one storage."""
    shared: dict[str, list[str]] = {}
    for per_storage in spans.values():
        active: list[tuple[int, str]] = []  # (end, key) of the spans begun before this one
        for start, end, key in sorted(per_storage):
            active = [(e, k) for e, k in active if e > start]
            for _, other in active:
                shared.setdefault(key, []).append(other)
                shared.setdefault(other, []).append(key)
            active.append((end, key))
    return shared


def reached(spans: Spans, itemsize: Mapping[str, int]) -> tuple[int, int]:
    """(elements, bytes) the spans reach, each byte counted once; a span's bytes count as
    elements of its key's `itemsize`."""
    numel = nbytes = 0
    for per_storage in spans.values():
        end_so_far = 0  # the end of the bytes counted so far in this storage
        for start, end, key in sorted(per_storage):
            fresh = max(0, end - max(start, end_so_far))
            nbytes += fresh
            numel += fresh // max(1, itemsize[key])
            end_so_far = max(end_so_far, end)
    return numel, nbytes
