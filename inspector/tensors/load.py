"""The one place a checkpoint is deserialised: torch.load(weights_only=True) inside the jail.

There is no weights_only=False path. When torch refuses a global, `LoadError` names every
global the checkpoint needs beyond torch's allowlist, so the caller can allow exactly those
(`torch.serialization.safe_globals`) for one load. safetensors files hold no pickle: their
tensors are views of a private mapping of the file. Runs only in the sandbox worker.
"""

from __future__ import annotations

import importlib
import io
import os
import pickle
import re
import shlex
import zipfile

import torch

from inspector.core.dtypes import REGISTRY, DType
from inspector.core.errors import CodedError
from inspector.core.flatten import flatten, unique_keys
from inspector.formats.safetensors_header import Entry, read_header
from inspector.scan.pickles.presets import PRESET_GLOBALS, STAND_INS, allow_flags

_GLOBAL_IN_MESSAGE = re.compile(r"GLOBAL ([\w.]+) was not an allowed global")
# A BUILD on an object whose class the pickle never names (numpy.dtype('f4') is a
# numpy.dtypes.Float32DType): torch names the class only in this sentence.
_BUILD_IN_MESSAGE = re.compile(r"but got <class '([\w.]+)'>")


def torch_dtype(record: DType) -> torch.dtype | None:
    """The torch dtype of a registry record (None when this torch has none)."""
    return getattr(torch, record.name, None) if record.in_torch else None


SAFETENSORS_DTYPES = {
    torch_dtype(d): d.safetensors for d in REGISTRY
    if d.safetensors and torch_dtype(d) is not None
}
"""torch dtype -> safetensors dtype code, from the registry (`core.dtypes`)."""


class LoadError(CodedError):
    """A load that failed; `code` is stable for callers, `globals` set when weights_only refused."""

    def __init__(self, code: str, message: str, globals_: list[str] | None = None) -> None:
        super().__init__(code, message)
        self.globals = globals_ or []


def resolve_global(qualified: str, missing_ok: bool = False) -> object | None:
    """Import `module.name` (the name may be dotted, e.g. `pkg.mod.Class.Inner`); None when it
    is not importable here and `missing_ok` (a preset's name for another numpy version)."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        return obj
    if missing_ok:
        return None
    raise LoadError("bad_allowed_global",
                    f"cannot allow {qualified}: no such importable module attribute here")


def allowed_global(name: str) -> object | tuple[object, str] | None:
    """What `torch.serialization.safe_globals` gets for `name`: its plain stand-in registered
    under that name (`allow_presets.STAND_INS`), else the object; None for a preset's name that
    this environment lacks."""
    stand_in = STAND_INS.get(name)
    if stand_in is not None:
        return resolve_global(stand_in), name
    return resolve_global(name, missing_ok=name in PRESET_GLOBALS)


def load_checkpoint(path: str | bytes, allow_globals: list[str] | tuple[str, ...] = ()) -> object:
    """torch.load with weights_only=True (mmap for zip archives), allowing exactly those globals.

    `path` may also be the bytes of one archive (an item of a `.distcp` file)."""
    allowed = [g for g in map(allowed_global, allow_globals) if g is not None]
    mmap = isinstance(path, str) and zipfile.is_zipfile(path)
    try:
        with torch.serialization.safe_globals(allowed):
            if mmap:
                _check_record_sizes(path)
            return torch.load(_opened(path), map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        if "Weights only load failed" not in text:
            raise LoadError("load_failed", f"corrupt pickle data: {_first_line(text)}") from None
        needed = [g for g in _unsafe_globals(path, text) if g not in allow_globals]
        if needed:
            raise LoadError(
                "weights_only_refused",
                "weights_only refused globals: " + ", ".join(needed)
                + "; if you trust them, add: " + shlex.join(allow_flags(needed)),
                needed,
            ) from None
        reason = text.split("WeightsUnpickler error:", 1)[-1]
        raise LoadError("weights_only_refused",
                        f"weights_only refused the file: {_first_line(reason)}") from None
    except (RuntimeError, EOFError, ValueError, OSError, KeyError, IndexError,
            TypeError, AttributeError, AssertionError, zipfile.BadZipFile) as exc:
        raise LoadError("load_failed", f"cannot load checkpoint: {_first_line(str(exc))}") from None


def _check_record_sizes(path: str) -> None:
    """The check torch.load makes without mmap and skips with it: each storage's record holds
    exactly its bytes (`get_storage_from_record`); with mmap a storage is a slice of the mapped
    file, and a record longer than its storage loads. `data.pkl` is read as torch reads it
    (its weights_only unpickler, the same persistent ids: storage type, key, element count),
    onto the meta device, so no tensor data is read; each storage's size is compared with its
    record's, by record name as torch finds it. A pickle this reading cannot finish leaves the
    check to the real load below, which judges it."""
    from torch import _weights_only_unpickler

    with open(path, "rb") as fh:
        reader = torch._C.PyTorchFileReader(fh)
        names = set(reader.get_all_records())
        pickle_name = next((n for n in ("data.pkl",) if n in names), None)
        if pickle_name is None:
            return
        expected: dict[str, int] = {}

        def persistent_load(saved_id: tuple) -> torch.storage.TypedStorage:
            _, storage_type, key, _location, numel = saved_id
            dtype = torch.uint8 if storage_type is torch.UntypedStorage else storage_type.dtype
            nbytes = numel * torch._utils._element_size(dtype)
            expected[f"data/{key}"] = nbytes
            # typed, as torch's own persistent_load hands it to the rebuild functions
            return torch.storage.TypedStorage(
                wrap_storage=torch.UntypedStorage(nbytes, device="meta"), dtype=dtype,
                _internal=True)

        unpickler = _weights_only_unpickler.Unpickler(io.BytesIO(reader.get_record(pickle_name)),
                                                      encoding="utf-8")
        unpickler.persistent_load = persistent_load
        try:
            unpickler.load()
        except Exception:  # whatever this reading cannot do, the real load judges
            return
        for name, nbytes in expected.items():
            size = reader.get_record_size(name) if name in names else None
            if size is not None and size != nbytes:
                raise RuntimeError(f"record size ({size} bytes) of {name} does not match "
                                   f"expected size ({nbytes} bytes): torch.load without mmap "
                                   "refuses it")


def _opened(path: str | bytes) -> str | io.BytesIO:
    return io.BytesIO(path) if isinstance(path, bytes) else path


def load_safetensors(path: str) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors file as zero-copy views of a private mapping of it, in the
    order their bytes lie in the file (the header lists them by name), which every report
    shows."""
    with open(path, "rb") as fh:
        header = read_header(fh, os.fstat(fh.fileno()).st_size)
    refusal = header.refusal()
    if refusal is not None:
        raise LoadError("load_failed", f"bad safetensors file: {_first_line(refusal)}")
    try:
        storage = torch.UntypedStorage.from_file(path, shared=False, nbytes=header.size)
    except RuntimeError as exc:
        raise LoadError("load_failed", f"bad safetensors file: {_first_line(str(exc))}") from None
    return {e.key: _safetensors_view(storage, e)
            for e in sorted(header.entries, key=lambda e: e.begin)}


def _safetensors_view(storage: torch.UntypedStorage, entry: Entry) -> torch.Tensor:
    dtype = torch_dtype(entry.dtype)
    if dtype is None:
        raise LoadError("load_failed", f"bad safetensors file: {entry.key}: dtype "
                        f"{entry.dtype.safetensors} is not supported here")
    if entry.begin % dtype.itemsize == 0:
        return torch.empty(0, dtype=dtype).set_(storage, entry.begin // dtype.itemsize,
                                                entry.shape)
    # Unaligned data cannot be viewed in place; copy just this tensor.
    raw = torch.empty(0, dtype=torch.uint8).set_(storage, entry.begin, [entry.end - entry.begin])
    return raw.clone().view(dtype).reshape(entry.shape)


def _unsafe_globals(path: str | bytes, message: str) -> list[str]:
    """Every global beyond the allowlist (torch's own static reader), else the one torch named."""
    found: list[str] = []
    try:
        found = list(torch.serialization.get_unsafe_globals_in_checkpoint(_opened(path)))
    except Exception:  # legacy or damaged files: fall back to the message
        found = []
    named = _GLOBAL_IN_MESSAGE.findall(message) + _BUILD_IN_MESSAGE.findall(message)
    found += [g for g in named if g not in found]
    return found


def _first_line(text: str, limit: int = 300) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "") or "unknown error"
    return line if len(line) <= limit else line[: limit - 3] + "..."


def split_leaves(obj: object) -> tuple[list[tuple[str, torch.Tensor]], list[tuple[str, object]]]:
    """Flatten a loaded checkpoint into (tensors, other leaves), both keyed by dotted path."""
    tensors, objects = [], []
    for key, leaf in unique_keys(flatten(obj)):
        if isinstance(leaf, torch.Tensor):
            tensors.append((key, _meant(leaf)))
        else:
            objects.append((key, leaf))
    return tensors, objects


def _meant(t: torch.Tensor) -> torch.Tensor:
    """A tensor saved with its conjugate or negative bit set, as the values it stands for.

    Its storage holds the values before conjugation or negation, so reading its bytes would
    hash, compare and write those (safetensors' save_file does: the conjugate comes back
    unconjugated), and viewing them as bytes fails. A copy, made only for such a tensor."""
    return t.resolve_conj().resolve_neg() if t.is_conj() or t.is_neg() else t
