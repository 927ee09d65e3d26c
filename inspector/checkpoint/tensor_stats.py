"""The inspect contract's records, typed: `TensorStats`, one tensor record, which every judge
of a checkpoint reads (health, contents, architecture, resume, the report), and `ObjectLeaf`,
one non-tensor leaf. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inspector.core.json_record import NUMBER, JsonRecord


@dataclass
class TensorStats(JsonRecord):
    """One tensor record of the inspect contract: identity, layout, statistics, digest."""

    key: str
    dtype: str
    shape: list[int]
    numel: int = 0
    nbytes: int = 0
    layout: str | None = None
    device: str | None = None
    flags: list[str] = field(default_factory=list)
    stride: list[int] | None = None
    storage_offset: int | None = None
    contiguous: bool | None = None
    digest: str | None = None
    stats_on: str | None = None
    nan: int = 0
    inf: int = 0
    first_nonfinite: int | None = None
    """The flat (row-major) index of the first NaN or Inf; None when there is none."""
    zeros: int = 0
    min: float | None = field(default=None, metadata=NUMBER)
    max: float | None = field(default=None, metadata=NUMBER)
    mean: float | None = field(default=None, metadata=NUMBER)
    std: float | None = field(default=None, metadata=NUMBER)
    std_sample: float | None = field(default=None, metadata=NUMBER)
    absmax: float | None = field(default=None, metadata=NUMBER)
    histogram: dict[str, Any] | None = None
    shared_with: list[str] | None = None
    shard: str | None = None
    """The shard file holding it (sharded checkpoints only)."""
    exponents: list[list[int]] | None = None
    """[[floor(log2|x|), count], ...] of the finite non-zero values (`tensors.stats`)."""
    quantization: dict[str, Any] | None = None
    """A quantized tensor's scheme, scale(s) and `nonfinite_scales`."""

    @property
    def has_stats(self) -> bool:
        """The worker summarised its values (not sparse, meta, or a dtype without statistics)."""
        return "nan" not in self.absent and self.nan is not None


@dataclass
class ObjectLeaf(JsonRecord):
    """A non-tensor leaf: its dotted key, Python type and bounded repr."""

    key: str
    type: str | None = None
    repr: str | None = None
    shard: str | None = None
