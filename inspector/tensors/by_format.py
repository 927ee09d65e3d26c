"""A scanned checkpoint loaded by its format: the tensor reader each format names, else the
loaders of `load`, `dcp` and `torchscript`. Runs only in the sandbox worker.

The worker's `inspect` and `convert` operations load through `load_request`; the digests and
diffs (`sources`) ask `module_reader` for a format module's own tensor reader.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from inspector.formats import spec_of
from inspector.tensors.dcp import load_folder
from inspector.tensors.load import load_checkpoint, load_safetensors
from inspector.tensors.torchscript import load_weights


def load_request(request: dict) -> object:
    """Load request["path"] by its scanned `format`: safetensors directly, a DCP folder through
    `tensors.dcp`, TorchScript and torch.export weights through `tensors.torchscript` (their
    code never runs), else torch.load."""
    reader = module_reader(request.get("format") or "")
    if reader is not None:
        return reader(request["path"])
    if request.get("format") == "safetensors":
        return load_safetensors(request["path"])
    if request.get("format") == "dcp":
        return load_folder(request["path"], request.get("allow_globals", ()))
    if request.get("format") in ("torchscript", "torch-export"):
        return load_weights(request["path"], request["format"])
    return load_checkpoint(request["path"], request.get("allow_globals", ()))


def module_reader(fmt: str) -> Callable[[str], object] | None:
    """The tensor reader a format module of `formats` names for `fmt`, or None."""
    spec = spec_of(fmt)
    if spec is None or spec.tensors is None:
        return None
    module, _, function = spec.tensors.partition(":")
    return getattr(importlib.import_module(module), function)
