"""The one record per file format, and the lists every other part derives from it.

Each format module of this package registers one `FormatSpec` (several where one reader serves
closely related kinds, as torch's zip reader serves `pytorch-zip`, `torchscript` and
`torch-export`). File dialogs, folder filters, the desktop MIME types, the scan's dispatch and
the worker's tensor loading all read these records, so a new format is one module here plus its
tests (DEVELOPING.md, "Add a format").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inspector.core.vocabulary import Format

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

HEAD_BYTES = 512
"""How many leading bytes `FormatSpec.sniff` is given."""


@dataclass(frozen=True)
class FormatAdvice:
    """What a person is told about a file of one format at one verdict (`scan.advice`)."""

    headline: str
    meaning: str
    action: str


@dataclass(frozen=True)
class FormatSpec:
    """What the project knows of one file format."""

    format: Format
    label: str
    """What a user reads in a dialog or a result: "GGUF model (llama.cpp, ggml)"."""
    suffixes: tuple[str, ...] = ()
    """Offered by file dialogs and the desktop MIME globs; never how a file is recognised."""
    mime: str | None = None
    """The shared-mime-info type the desktop integration routes to the app."""
    holds_code: bool = False
    """Its loader can run code the file carries (a pickle, TorchScript, a template engine)."""
    loaders: tuple[str, ...] = ()
    """The loaders a user opens it with, whose own readings the verdict rests on."""
    sniff: Callable[[bytes, int], bool] | None = None
    """Positive recognition from the first `HEAD_BYTES` bytes and the file size; None where
    the built-in chain (`sniffing.sniff`) recognises it."""
    scan: Callable[[FormatContext, Any], None] | None = None
    """`scan(ctx, buf)`: reads the whole file (`buf`, bytes or a read-only mapping) and reports
    through the context the scan hands it (`formats.context.FormatContext`: `ctx.result.format`,
    `ctx.find`, `ctx.not_fully_read`, `ctx.scan_nested`); raising ends in the scan's fallback
    readings. None for a kind another record's scan names (`npz`, `pytorch-zip`: the zip
    reader)."""
    tensors: str | None = None
    """`"module:function"` the jailed worker calls as `function(path) -> {name: tensor}` to
    read its tensors for statistics and digests; None where `tensors.load` reads it."""
    kinds: tuple[str, ...] = ()
    """The first guesses of the built-in chain (`sniffing.sniff`: `zip`, `compressed:gzip`,
    `pickle?`) that this record's `scan` reads. The chain keeps its own order, since its
    precedence decides what a polyglot is read as first; a format with a magic number of its
    own gives `sniff` instead."""
    mime_globs: tuple[str, ...] | None = None
    """The suffixes the desktop integration claims for `mime`, where fewer than `suffixes`
    (`.bin` is too common a name to claim); None: all of `suffixes`."""
    loadable: bool = False
    """`tensors.load` itself loads it for inspect, convert and diff (without a `tensors`
    reader)."""
    pickled: bool = True
    """Its loader unpickles (weights_only matters); False for safetensors, GGUF, ONNX."""
    safe_advice: FormatAdvice | None = None
    """What to do with a safe file of a format that holds no pickle (else the pickle advice:
    `torch.load(weights_only=True)`, which would be wrong for it)."""
    suspicious_advice: FormatAdvice | None = None
    """What to do with a suspicious one (else the pickle advice: allow named globals)."""


_SPECS: dict[Format, FormatSpec] = {}


def register(spec: FormatSpec) -> FormatSpec:
    """Add one format's record (each format once)."""
    if spec.format in _SPECS:
        raise ValueError(f"format {spec.format} is registered twice")
    _SPECS[spec.format] = spec
    return spec


def spec_of(fmt: str) -> FormatSpec | None:
    """The record of a format name, or None for a name no module registers."""
    try:
        return _SPECS.get(Format(fmt))
    except ValueError:
        return None


def all_specs() -> tuple[FormatSpec, ...]:
    """Every registered record, in registration order."""
    return tuple(_SPECS.values())


def detect(head: bytes, size: int) -> FormatSpec | None:
    """The first registered format whose own sniff recognises these bytes."""
    return next((s for s in _SPECS.values() if s.sniff is not None and s.sniff(head, size)), None)


def by_kind(kind: str) -> FormatSpec | None:
    """The record whose `scan` reads what the built-in chain named `kind`."""
    return next((s for s in _SPECS.values() if kind in s.kinds), None)


def loadable() -> tuple[Format, ...]:
    """The formats the jailed worker loads: its own readers' and the modules' `tensors`."""
    return tuple(s.format for s in _SPECS.values() if s.loadable or s.tensors is not None)


def read_without_pickle(fmt: str | None) -> FormatSpec | None:
    """The record of a format whose loader never unpickles, or None (pickled or unknown)."""
    spec = spec_of(fmt) if fmt else None
    return spec if spec is not None and not spec.pickled else None


def holding_code(holds: bool) -> tuple[Format, ...]:
    """The formats whose loader can run code the file carries (`holds`), or cannot."""
    return tuple(s.format for s in _SPECS.values() if s.holds_code is holds)


def suffixes(*formats: Format) -> tuple[str, ...]:
    """Every suffix a file dialog offers, each once, in registration order; of `formats` only,
    in their order, where given."""
    specs = [_SPECS[f] for f in formats if f in _SPECS] if formats else _SPECS.values()
    return tuple(dict.fromkeys(x for s in specs for x in s.suffixes))


def dialog_filter(*formats: Format, title: str = "Model files") -> str:
    """The Qt file-dialog filter: the model files the app opens (of `formats` only, where
    given), then all files."""
    return f"{title} ({' '.join('*' + x for x in suffixes(*formats))});;All files (*)"


def mime_types() -> dict[str, tuple[str, tuple[str, ...]]]:
    """MIME type -> (comment, glob suffixes), for the desktop integration."""
    out: dict[str, tuple[str, list[str]]] = {}
    for s in _SPECS.values():
        if s.mime:
            globs = s.suffixes if s.mime_globs is None else s.mime_globs
            out.setdefault(s.mime, (s.label, []))[1].extend(globs)
    return {mime: (label, tuple(dict.fromkeys(globs))) for mime, (label, globs) in out.items()}
