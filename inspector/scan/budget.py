"""The work one file may cost the static scan, shared by all of it: every zip member, every
nesting level (a tar in a zip in a gzip) and every stream. A small file cannot stretch past it
however it is built (a bzip2 bomb, many directory entries pointing at one compressed record,
millions of one-byte opcodes): past it the scan stops, and the file is not safe.

Both bounds grow linearly with the file's size, so a real checkpoint is never cut short by
them: a raw pickle of n bytes has at most n opcodes, and compressed content beyond
`DECODED_PER_BYTE` times its file is rare (and a compressed pickle is suspicious anyway).
"""

from __future__ import annotations

from dataclasses import dataclass

DECODED_BASE = 32 << 20  # decoded bytes any file may produce, whatever its size
DECODED_PER_BYTE = 16  # and this many more per byte of the file
DECODED_CAP = 1 << 30
OPCODES_BASE = 500_000  # pickle opcodes any file may have walked
OPCODES_PER_BYTE = 1  # and one more per byte of the file

# Bounds on single parts, shared by `scan.context` and the format modules
MAX_MEMBER_BYTES = 1 << 30  # a pickle member larger than this is reported, not read
MAX_DECOMPRESSED = 1 << 30
# decoded bytes one file's streams may pass through (read to the end, not held): a loader pays
# the same to decode them, and past this the file says so (`scan-budget`, naming this limit).
# A bzip2 bomb decodes at a few hundred MB/s: this keeps a small file's scan within seconds
MAX_STREAMED = 512 << 20
CRC_BUDGET = 64 << 20  # tensor record bytes CRC-checked per file; pickles are always checked
MAX_LISTED_PICKLES = 1000  # `pickles` entries kept for the GUI; every pickle is scanned
MAX_NESTING = 3  # pickles inside call arguments inside pickles
MAX_FORKS = 64  # next pickles where a reader without peek() goes on, followed per file
MAX_NESTING_ARCHIVES = 3  # archives inside archives scanned this deep


class BudgetSpent(Exception):
    """The file's scan budget is spent: the scan stops here (not safe)."""


@dataclass
class ScanBudget:
    """What is left of one file's budget: bytes decoders may still produce, opcodes the walker
    may still read. One object is shared by every part of the file's scan."""

    decoded: int
    opcodes: int
    streamed: int = MAX_STREAMED  # decoded bytes streams may still pass through, not held

    @classmethod
    def for_size(cls, size: int) -> ScanBudget:
        """The budget of a file of `size` bytes."""
        return cls(min(DECODED_CAP, DECODED_BASE + DECODED_PER_BYTE * size),
                   OPCODES_BASE + OPCODES_PER_BYTE * size)

    def decode(self, produced: int) -> None:
        """Count `produced` decoded bytes."""
        self.decoded = max(self.decoded - produced, 0)

    def walked(self, opcodes: int) -> None:
        """Count `opcodes` walked."""
        self.opcodes = max(self.opcodes - opcodes, 0)

    def check(self) -> None:
        """BudgetSpent once either bound is spent (called before each walk and decode, so the
        walk that spent it is still folded into the result)."""
        if not self.opcodes:
            raise BudgetSpent(f"more pickle opcodes than the scan budget ({OPCODES_BASE:,} + "
                              f"{OPCODES_PER_BYTE} per byte of the file)")
        if not self.decoded:
            raise BudgetSpent("more decoded content than the scan budget ("
                              f"{DECODED_BASE >> 20} MiB + {DECODED_PER_BYTE} bytes per byte "
                              "of the file)")
