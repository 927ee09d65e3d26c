"""torch.distributed.checkpoint folders, read inside the jail without plain pickle.

A DCP folder holds `.metadata` (a `Metadata` object pickled with plain pickle, protocol 4) and
`__R_N.distcp` data files: back-to-back `torch.save` archives, one per stored item. The
metadata's `storage_data` gives each item's file, offset and length; `state_dict_metadata`
says which items are chunks of which tensor (offsets and sizes in the full tensor) and which
are plain values (bytes items).

`.metadata` is read with torch's own weights_only unpickler, allowed exactly the plain data
classes `policy.KNOWN_DATA` lists (DCP's metadata classes and the paths in them). That
unpickler reads only protocol-2 opcodes, so `_Protocol2` hands it the file's protocol-4
opcodes as their protocol-2 forms (FRAME dropped, MEMOIZE as LONG_BINPUT, SHORT_BINUNICODE as
BINUNICODE, STACK_GLOBAL as GLOBAL of the two strings on its stack); every global is still
resolved and checked by torch. A tensor item that `layout.torch_save` describes statically
becomes a view of the mapped data file (no unpickling, no copy); any other item is loaded
from its bytes with weights_only=True (DCP itself loads bytes items with weights_only=False).
Chunks are reassembled into full tensors; a chunk layout that does not cover its tensor
exactly once is refused. Runs only in the sandbox worker.
"""

from __future__ import annotations

import math
import mmap
import os
import pickle
import pickletools
import struct
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import _weights_only_unpickler

from inspector.layout.torch_save import NotCovered, describe_archive
from inspector.scan.pickles.policy import KNOWN_DATA
from inspector.scan.pickles.presets import STAND_INS
from inspector.tensors.load import LoadError, allowed_global, load_checkpoint, resolve_global

METADATA_NAME = ".metadata"
METADATA_LIMIT = 256 << 20
"""Bytes of `.metadata` read at most: it describes items, it holds no tensor data."""


class _Protocol2:
    """A file-like that feeds torch's weights_only Unpickler a protocol-4 pickle as the
    protocol-2 opcodes it reads; STACK_GLOBAL is turned into GLOBAL when the unpickler
    reaches it, from the two strings then on top of its stack."""

    def __init__(self, data: bytes) -> None:
        self._pieces = self._translate(data)
        self._buf = b""
        self.unpickler: _weights_only_unpickler.Unpickler | None = None

    def _translate(self, data: bytes) -> Iterator[bytes | Callable[[], bytes]]:
        try:
            ops = list(pickletools.genops(data))
        except ValueError as exc:
            raise LoadError("load_failed", f"corrupt .metadata pickle: {exc}") from None
        memo: set[int] = set()
        ends = [pos for _op, _arg, pos in ops[1:]] + [ops[-1][2] + 1 if ops else 0]
        for (op, arg, pos), end in zip(ops, ends, strict=True):
            if op.name == "FRAME":
                continue
            if op.name == "MEMOIZE":
                index = len(memo)
                memo.add(index)
                yield b"r" + struct.pack("<I", index)
            elif op.name == "SHORT_BINUNICODE":
                raw = arg.encode("utf-8", "surrogatepass")
                yield b"X" + struct.pack("<I", len(raw)) + raw
            elif op.name == "STACK_GLOBAL":
                yield self._stack_global
            else:
                if op.name in ("BINPUT", "LONG_BINPUT"):
                    memo.add(arg)
                yield data[pos:end]

    def _stack_global(self) -> bytes:
        stack = self.unpickler.stack
        names = stack[-2:]
        # a newline would end GLOBAL's name early and make the rest of it opcodes
        if len(names) != 2 or any(type(n) is not str or "\n" in n for n in names):
            raise pickle.UnpicklingError("STACK_GLOBAL needs two strings on the stack")
        del stack[-2:]
        return b"c" + names[0].encode() + b"\n" + names[1].encode() + b"\n"

    def _fill(self, n: int) -> None:
        # one opcode at a time: STACK_GLOBAL must see the stack its predecessors left
        while len(self._buf) < n:
            piece = next(self._pieces, None)
            if piece is None:
                return
            self._buf += piece() if callable(piece) else piece

    def read(self, n: int) -> bytes:
        """The next n bytes of the protocol-2 stream."""
        self._fill(n)
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def readline(self) -> bytes:
        """The rest of the current line (GLOBAL's module and name)."""
        self._fill(1)
        end = self._buf.find(b"\n") + 1 or len(self._buf)
        out, self._buf = self._buf[:end], self._buf[end:]
        return out


def metadata_classes() -> list[type | tuple[type, str]]:
    """DCP's plain data classes and the paths in its metadata (`policy.KNOWN_DATA`); a path as
    its stand-in under the pickled name (`load.allowed_global`), so that a `.metadata` written
    by another Python (3.13's `pathlib._local.PosixPath`) or on Windows loads here too."""
    found = (allowed_global(name) if name in STAND_INS else resolve_global(name, missing_ok=True)
             for name in sorted(KNOWN_DATA))
    return [obj for obj in found if isinstance(obj, type | tuple)]


def read_metadata(path: str) -> object:
    """The folder's `Metadata`, read by torch's weights_only unpickler and the DCP allow-list."""
    from torch.distributed.checkpoint.metadata import Metadata

    with open(path, "rb") as fh:
        data = fh.read(METADATA_LIMIT + 1)
    if len(data) > METADATA_LIMIT:
        raise LoadError("load_failed", f".metadata is larger than {METADATA_LIMIT >> 20} MiB")
    stream = _Protocol2(data)
    unpickler = _weights_only_unpickler.Unpickler(stream)
    stream.unpickler = unpickler
    try:
        with torch.serialization.safe_globals(metadata_classes()), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns that protocol 4 is not its own
            metadata = unpickler.load()
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError,
            IndexError, KeyError, struct.error) as exc:
        raise LoadError("weights_only_refused",
                        f".metadata refused by the weights_only unpickler: {exc}") from None
    if type(metadata) is not Metadata:
        raise LoadError("load_failed", f".metadata holds a {type(metadata).__name__}, "
                        "not a torch.distributed.checkpoint Metadata")
    return metadata


class _Items:
    """Reads stored items from the folder's data files.

    A tensor item whose archive `layout.torch_save` describes completely (what torch.save
    writes for one tensor) becomes a view of a private read-only mapping of its data file: no
    copy, no unpickling, and the caller's `PageReleaser` gives its pages back once read. Any
    other item (plain values, anything the static layout does not cover) is read and loaded
    with weights_only=True.
    """

    def __init__(self, folder: Path, allow_globals: list[str] | tuple[str, ...]) -> None:
        self._folder = folder
        self._allow = allow_globals
        self._mapped: dict[str, torch.UntypedStorage] = {}

    def locate(self, t: torch.Tensor) -> tuple[str, int] | None:
        """(data file, offset in it) of a tensor that is a view of one mapped file."""
        for name, mapped in self._mapped.items():
            base = mapped.data_ptr()
            if base <= t.data_ptr() < base + mapped.nbytes():
                return name, t.data_ptr() - base
        return None

    def load(self, fqn: str, info: object) -> object:
        """The object stored for one item (a tensor chunk or a value)."""
        name = info.relative_path
        if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".."):
            raise LoadError("load_failed", f"{fqn}: data file {name!r} is not in the folder")
        if getattr(info, "transform_descriptors", None):
            raise LoadError("unsupported_tensors", f"{fqn}: stored with transforms "
                            f"{info.transform_descriptors}, which are not read here")
        start, length = int(info.offset), int(info.length)
        # opened per item: a folder written by many ranks has more files than the jail's limit
        with open(self._folder / name, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if start < 0 or length <= 0 or start + length > size:
                raise LoadError("load_failed", f"{fqn}: item [{start}, {start + length}) lies "
                                f"outside {name} ({size} bytes)")
            view = self._view(fh, name, size, start, length)
            if view is not None:
                return view
            fh.seek(start)
            data = fh.read(length)  # loops past read(2)'s 2 GiB cap, unlike one pread
        try:
            return load_checkpoint(data, self._allow)
        except LoadError as exc:
            raise LoadError(exc.code, f"{fqn}: {exc.message}", exc.globals) from None

    def _view(self, fh, name: str, size: int, start: int, length: int) -> torch.Tensor | None:
        """The item's one tensor as a view of the mapped file, or None to load it instead."""
        floor = start - start % mmap.ALLOCATIONGRANULARITY
        # only this item is mapped to read its layout; its data pages are not touched here
        with mmap.mmap(fh.fileno(), start + length - floor, offset=floor,
                       access=mmap.ACCESS_READ) as mm:
            try:
                layouts = describe_archive(mm, start - floor, start + length - floor)
            except NotCovered:
                return None
        if len(layouts) != 1 or layouts[0].key != "<root>":
            return None
        layout = layouts[0]
        dtype = getattr(torch, layout.dtype, None)
        if not isinstance(dtype, torch.dtype) or not all(layout.shape):
            return None
        span = (1 + sum((n - 1) * step for n, step in zip(layout.shape, layout.stride,
                                                           strict=True))) * layout.itemsize
        mapped = self._mapped.get(name)
        if mapped is None:
            mapped = self._mapped[name] = torch.UntypedStorage.from_file(
                str(self._folder / name), shared=False, nbytes=size)
        begin = floor + layout.data_offset  # inside the item: describe_archive checked it
        return torch.empty(0, dtype=dtype).set_(mapped[begin : begin + span], 0, layout.shape,
                                                layout.stride)


def _tensor(fqn: str, entry: object, storage: dict, items: _Items) -> torch.Tensor:
    """A full tensor from its chunks, each checked against the metadata's dtype and place."""
    from torch.distributed.checkpoint.metadata import MetadataIndex

    size, dtype = tuple(entry.size), entry.properties.dtype
    pieces = []
    for chunk in entry.chunks:
        info = storage.get(MetadataIndex(fqn, chunk.offsets))
        if info is None:
            raise LoadError("load_failed", f"{fqn}: no stored item for chunk {list(chunk.offsets)}")
        part = items.load(fqn, info)
        if (not isinstance(part, torch.Tensor) or part.dtype != dtype
                or tuple(part.shape) != tuple(chunk.sizes) or len(chunk.offsets) != len(size)):
            raise LoadError("load_failed", f"{fqn}: a stored chunk does not match the metadata")
        pieces.append((tuple(chunk.offsets), part))
    if len(pieces) == 1 and not any(pieces[0][0]) and tuple(pieces[0][1].shape) == size:
        return pieces[0][1]
    full = torch.empty(size, dtype=dtype)
    covered = torch.zeros(size, dtype=torch.int8)
    for offsets, part in pieces:
        region = tuple(slice(o, o + n) for o, n in zip(offsets, part.shape, strict=True))
        if any(o + n > s for o, n, s in zip(offsets, part.shape, size, strict=True)):
            raise LoadError("load_failed", f"{fqn}: a chunk lies outside the tensor")
        full[region] = part
        covered[region] += 1
    if math.prod(size) and not bool((covered == 1).all()):
        raise LoadError("load_failed", f"{fqn}: the chunks do not cover the tensor exactly once")
    return full


def _nest(values: dict[str, object], paths: object) -> dict:
    """The saved state's nesting, from the planner's `fqn -> key path` (so `convert --key model`
    finds `model`); the flat names where there is no such map or it does not fit together."""
    if not isinstance(paths, dict):
        return values
    root: dict = {}
    for fqn, value in values.items():
        path = paths.get(fqn)
        if not (type(path) is tuple and path and all(type(p) in (str, int) for p in path)):
            path = (fqn,)
        node = root
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if type(node) is not dict:
                return values
        if path[-1] in node:
            return values
        node[path[-1]] = value
    return root


def load_folder(folder: str, allow_globals: list[str] | tuple[str, ...] = ()) -> dict:
    """Every value of a DCP folder (tensors reassembled), nested as it was saved."""
    return open_folder(folder, allow_globals)[0]


def open_folder(folder: str, allow_globals: list[str] | tuple[str, ...] = ()
                ) -> tuple[dict, Callable[[torch.Tensor], tuple[str, int] | None]]:
    """`load_folder`'s values, and where a tensor kept whole in one data file lies there
    (its file and offset; None for one reassembled from chunks), for the diff's forensics."""
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        MetadataIndex,
        TensorStorageMetadata,
    )

    root = Path(folder)
    metadata = read_metadata(str(root / METADATA_NAME))
    storage = metadata.storage_data
    if not isinstance(storage, dict):
        raise LoadError("load_failed", ".metadata has no storage layout")
    items = _Items(root, allow_globals)
    out: dict[str, object] = {}
    for fqn, entry in metadata.state_dict_metadata.items():
        if isinstance(entry, TensorStorageMetadata):
            out[fqn] = _tensor(fqn, entry, storage, items)
        elif isinstance(entry, BytesStorageMetadata):
            info = storage.get(MetadataIndex(fqn))
            if info is None:
                raise LoadError("load_failed", f"{fqn}: no stored item")
            out[fqn] = items.load(fqn, info)
        else:
            raise LoadError("load_failed", f"{fqn}: unknown storage kind {type(entry).__name__}")
    return _nest(out, metadata.planner_data), items.locate
