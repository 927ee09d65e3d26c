"""The weights' exact fingerprint: integer arithmetic over a tensor's raw bytes, the same on
any device, kernel or rank (`weights.fingerprint` reads it with the norms; `weights.replicas`
compares it across ranks).

A tensor's bytes are read as 64-bit words laid out as a grid of `COLUMNS` columns; its
fingerprint is the wrap-around int64 sum of each column and of each row, then the words after
the grid and the bytes after the last whole word as they are (a tensor of at most
`VERBATIM_WORDS` words is kept whole). No pair of bit flips can leave it unchanged: two flips
in different rows each move their own row's sum by ±2^k, never 0 mod 2^64; two in one row move
two columns' sums. One sum per tensor, as before, was blind to pairs that cancel: a word's
bit 63 (in float32 the sign of every odd-index element) flipped twice adds 2^64 = 0, and a bit
set in one word and cleared in another adds 0 at any position.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

CACHED_BYTES = 1 << 20
"""The bytes a CPU reduces at a time: small enough to stay in a core's L2 cache between the
reductions over them, large enough that dispatching them costs little."""

COLUMNS = 64
"""The grid's width in 64-bit words (512 bytes): its column sums are as cheap as its row sums
(a wider grid's column sums cost up to 3x on a CPU), and the row sums it keeps are 1/64 of the
tensor's bytes."""

VERBATIM_WORDS = 64
"""A tensor of at most this many 64-bit words is its own fingerprint (a copy): as cheap as a
reduction over it, and exact."""


@dataclass
class Prints:
    """Every tensor's fingerprint as one flat int64 vector on the device: `lengths[i]` values
    for tensor i, in order."""

    flat: torch.Tensor
    lengths: list[int]

    def differ(self, other: Prints) -> torch.Tensor:
        """Per tensor, whether its fingerprint differs from `other`'s (bool, on the device;
        no sync)."""
        device = self.flat.device
        if self.lengths != other.lengths:  # the tensors' sizes changed: every one differs
            return torch.ones(len(self.lengths), dtype=torch.bool, device=device)
        ne = (self.flat != other.flat.to(device)).long()
        counts = torch.zeros(len(self.lengths), dtype=torch.int64, device=device)
        return counts.index_add_(0, _segments(tuple(self.lengths), device), ne) > 0

    def per_tensor(self) -> list[tuple[int, ...]]:
        """Each tensor's fingerprint on the host (a sync: the alarm and learning paths only)."""
        flat, out, at = self.flat.tolist(), [], 0
        for n in self.lengths:
            out.append(tuple(flat[at:at + n]))
            at += n
        return out

    def select(self, kept: list[int]) -> Prints:
        """The fingerprints of the tensors at `kept`, in that order."""
        starts = [sum(self.lengths[:i]) for i in range(len(self.lengths))]
        flat = torch.cat([self.flat[starts[i]:starts[i] + self.lengths[i]] for i in kept]
                         ) if kept else self.flat[:0]
        return Prints(flat, [self.lengths[i] for i in kept])

    def replaced(self, at: list[int], new: Prints) -> Prints | None:
        """These fingerprints with those of the tensors at `at` (in order) taken from `new`
        (one copy of the flat vector); None when their sizes differ (a tensor resized)."""
        if [self.lengths[i] for i in at] != new.lengths:
            return None
        device = self.flat.device
        index = _positions(tuple(self.lengths), tuple(at), device)
        return Prints(self.flat.index_copy(0, index, new.flat.to(device)), self.lengths)

    @staticmethod
    def join(parts: list[list[torch.Tensor]], device: torch.device | None = None) -> Prints:
        """Each tensor's fingerprint parts (`print_parts`, in order) as one `Prints`: one `cat`,
        which also copies the parts that are views of the weights."""
        flat = [p.to(device) if device is not None else p for ps in parts for p in ps]
        lengths = [sum(p.numel() for p in ps) for ps in parts]
        if not flat:
            return Prints(torch.zeros(0, dtype=torch.int64, device=device), lengths)
        return Prints(torch.cat(flat), lengths)


@functools.lru_cache(maxsize=32)
def _segments(lengths: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Which tensor each value of a flat fingerprint belongs to (made once per layout: a
    host-to-device copy would sync)."""
    ids = [i for i, n in enumerate(lengths) for _ in range(n)]
    return torch.tensor(ids, dtype=torch.int64, device=device)


@functools.lru_cache(maxsize=32)
def _positions(lengths: tuple[int, ...], at: tuple[int, ...], device: torch.device
               ) -> torch.Tensor:
    """The positions in a flat fingerprint of the values of the tensors at `at` (made once per
    layout and optimizer)."""
    starts = [0]
    for n in lengths:
        starts.append(starts[-1] + n)
    ids = [k for i in at for k in range(starts[i], starts[i + 1])]
    return torch.tensor(ids, dtype=torch.int64, device=device)


def fingerprint(tensors: list[torch.Tensor]) -> Prints:
    """Each tensor's exact fingerprint (int64, on the first tensor's device)."""
    device = tensors[0].device if tensors else None
    return Prints.join([print_parts(raw_bytes(t)) for t in tensors], device)


def raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, flat, as uint8 (a view when it is contiguous): a one-byte float
    (float8) as its bytes too, never converted by value (1.0 and 1.5 would both read 1)."""
    flat = t.detach().reshape(-1)
    return flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)


def words_of(raw: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The bytes as 64-bit words (a view) where their alignment allows, else as 32-bit words or
    bytes widened to int64 (a copy: an unaligned view only); and how many bytes the words
    cover (the <8 after them are `print_parts`' tail)."""
    n, offset = raw.numel(), raw.storage_offset()
    if offset % 8 == 0:
        return raw[:n - n % 8].view(torch.int64), n - n % 8
    if offset % 4 == 0:
        return raw[:n - n % 4].view(torch.int32).to(torch.int64), n - n % 4
    return raw.to(torch.int64), n


def grid(words: int) -> tuple[int, int]:
    """The rows and columns of the words' block that is summed (the words after it are kept
    as they are); (0, 0) for a tensor small enough to be kept whole (`VERBATIM_WORDS`)."""
    if words <= VERBATIM_WORDS:
        return 0, 0
    return words // COLUMNS, COLUMNS


def print_parts(raw: torch.Tensor) -> list[torch.Tensor]:
    """One tensor's fingerprint, in parts: its words' column sums and row sums over `grid`,
    then the words and bytes after the block as they are."""
    words, covered = words_of(raw)
    rows, columns = grid(words.numel())
    parts = []
    if rows:
        block = words[:rows * columns].view(rows, columns)
        # on a CPU, blocks of rows that stay in cache between their two sums
        step = rows if raw.device.type != "cpu" else max(1, CACHED_BYTES // (8 * columns))
        cut = [block[at:at + step] for at in range(0, rows, step)]
        parts = [column_sums([c.sum(0) for c in cut]), *(c.sum(1) for c in cut)]
    return parts + tails(raw, words, rows * columns, covered)


def column_sums(partial: list[torch.Tensor]) -> torch.Tensor:
    """The column sums of a grid from those of its blocks of rows."""
    return partial[0] if len(partial) == 1 else torch.stack(partial).sum(0)


def tails(raw: torch.Tensor, words: torch.Tensor, summed: int, covered: int
           ) -> list[torch.Tensor]:
    """The words after the summed block and the bytes after the last word, as int64."""
    out = [words[summed:]] if summed < words.numel() else []
    return out + ([raw[covered:].to(torch.int64)] if covered < raw.numel() else [])
