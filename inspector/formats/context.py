"""What a format module's `scan(ctx, buf)` is handed: `FormatContext`, the one file's scan as a
format module sees it (report findings and blockers, walk pickles within the file's budget,
decode streams, open nested content).

The scan implements it (`scan.context.ScanContext`) and hands one to each format's scan, so the
imports run one way: the scan imports the formats, and a format module imports this interface
(for its annotations only, under `TYPE_CHECKING`: importing a format costs no more), never the
scan's engine or context. What it names lies below both: the result records (`scan.result`),
the budget (`scan.budget`) and the pickle walker (`scan.pickles.walker`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from inspector.formats.archives import decompress, zipread
from inspector.scan.budget import ScanBudget
from inspector.scan.pickles.walker import PickleScan
from inspector.scan.result import GlobalUse, ScanResult


class FormatContext(Protocol):
    """One file's scan: what a format module reads and calls while it reads the file."""

    result: ScanResult
    """The file's result: a format module sets its `format` (and `error` where the file is no
    model at all) and may read its findings and weights_only blockers."""
    budget: ScanBudget
    """The file's one budget, shared by every nested scan: decoded bytes are counted in it."""
    archives: list[tuple[int, int]] | None
    """The (offset, length) of each item a DCP `.metadata` lists in this file; None: unknown."""
    crc_budget: int
    """Tensor record bytes whose CRC-32 may still be checked, shared by every archive."""
    forks: int
    """Second readings of pickles followed so far (bounded by `scan.budget.MAX_FORKS`)."""
    torch_refuses: bool
    """Whether torch.load(weights_only=True) refuses the file so far."""
    uses: dict[tuple[str, str], GlobalUse]
    """The imports found so far, by (module, name)."""
    records: dict[tuple[int, int, int], zipread.Member]
    """The zip records read so far, by (data offset, compressed size, method)."""
    member_of: dict[int, str]
    """Archive members' buffers, by id, and their names."""

    def find(self, severity: str, code: str, message: str, member: str | None = ...,
             offset: int | None = ..., call: str | None = ...) -> None:
        """Report one finding."""

    def block(self, reason: str) -> None:
        """torch.load(weights_only=True) refuses the file, for `reason`."""

    def not_fully_read(self, code: str, why: str, member: str | None = ...) -> None:
        """Part of the file was not scanned (a bound, a missing library): never safe."""

    def walk(self, data: bytes, start: int = ..., through: bool = ...,
             entry: bool = ...) -> PickleScan:
        """Walk the pickle at `start` within the file's budget, kept for the loaders' readings."""

    def probe(self, data, start: int = ...) -> PickleScan:
        """A quick bounded walk of bytes that are rarely a pickle."""

    def add_pickle(self, scan: PickleScan, member: str | None, torch_reads: bool,
                   depth: int = ...) -> None:
        """Fold one walked pickle into the result; `torch_reads`: torch.load unpickles it."""

    def read_apart(self, data: bytes, apart: bool) -> AbstractContextManager[None]:
        """While inside, walks of `data` are of bytes no loader reads as pickles when `apart`."""

    def read_also(self, data: bytes, walked: bytes) -> None:
        """The loaders read `data`, the start of `walked`, so the real readers read it too."""

    def ask_torch(self, span: tuple[int, int] | None, walked: list[bytes]) -> None:
        """The pickles of the damaged archive `span` are read as torch's own zip reader hands
        them out; `walked`: the scan's own readings of them."""

    def decoded_limit(self, cap: int = ...) -> int:
        """How many bytes the next decode may produce, within the file's budget."""

    def decode(self, buf, algo: str, cap: int = ...) -> decompress.Decoded:
        """A compressed stream's content, within the file's decode budget."""

    def scan_nested(self, data: bytes, member: str) -> bool:
        """Scan a member that is itself an archive or a compressed file; whether it was one."""

    def sibling(self) -> FormatContext:
        """A fresh context over the same file and budget, whose findings are its own."""
