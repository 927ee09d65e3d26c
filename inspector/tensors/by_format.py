"""A scanned checkpoint loaded by its format: the tensor reader each format names, else the
loaders of `load`, `dcp` and `torchscript`. Runs only in the sandbox worker.

The worker's `inspect` and `convert` operations load through `load_request`; the digests and
diffs (`sources`) ask `module_reader` for a format module's own tensor reader.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from inspector.formats import spec_of
from inspector.tensors.dcp import load_folder
from inspector.tensors.load import load_checkpoint, load_safetensors
from inspector.tensors.torchscript import load_weights


@dataclass(frozen=True)
class LoadSpec:
    """What a worker request asks to load: the input, its scanned format and the globals the
    user allowed; read once from the request's JSON."""

    path: str
    format: str = ""
    allow_globals: tuple[str, ...] = ()

    @classmethod
    def of(cls, request: Mapping[str, Any]) -> LoadSpec:
        """The load a request asks for."""
        return cls(str(request["path"]), str(request.get("format") or ""),
                   tuple(request.get("allow_globals") or ()))


def load_request(request: Mapping[str, Any]) -> object:
    """Load the request's input by its scanned `format`: safetensors directly, a DCP folder
    through `tensors.dcp`, TorchScript and torch.export weights through `tensors.torchscript`
    (their code never runs), else torch.load."""
    spec = LoadSpec.of(request)
    reader = module_reader(spec.format)
    if reader is not None:
        return reader(spec.path)
    if spec.format == "safetensors":
        return load_safetensors(spec.path)
    if spec.format == "dcp":
        return load_folder(spec.path, spec.allow_globals)
    if spec.format in ("torchscript", "torch-export"):
        return load_weights(spec.path, spec.format)
    return load_checkpoint(spec.path, spec.allow_globals)


def module_reader(fmt: str) -> Callable[[str], object] | None:
    """The tensor reader a format module of `formats` names for `fmt`, or None."""
    spec = spec_of(fmt)
    if spec is None or spec.tensors is None:
        return None
    module, _, function = spec.tensors.partition(":")
    return getattr(importlib.import_module(module), function)
