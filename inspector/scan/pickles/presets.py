"""Named sets of benign globals a user allows with one flag (`--allow numpy`).

Each preset lists exactly what it admits, and none admits a global the policy calls dangerous
(the tests classify every entry). Allowing a preset only lets `torch.load(weights_only=True)`
rebuild these objects inside the jail; it never turns weights_only off.
"""

from __future__ import annotations

import re

# NumPy 2 gives every dtype object a class of its own in numpy.dtypes; torch.load(weights_only=
# True) checks the class of every object a BUILD sets state on, so a pickled numpy.dtype('f4')
# also needs numpy.dtypes.Float32DType allowed. The numpy preset lists these classes and the scan
# names the one a pickled dtype needs.
# Keyed by the kind letter and the item size that numpy.dtype.__reduce__ writes ('f4', 'i8',
# 'U3': size in characters, ignored).
_NUMPY_DTYPE_CLASSES = {
    "f": {2: "Float16DType", 4: "Float32DType", 8: "Float64DType", 16: "LongDoubleDType"},
    "c": {8: "Complex64DType", 16: "Complex128DType", 32: "CLongDoubleDType"},
    "i": {1: "Int8DType", 2: "Int16DType", 4: "Int32DType", 8: "Int64DType"},
    "u": {1: "UInt8DType", 2: "UInt16DType", 4: "UInt32DType", 8: "UInt64DType"},
    "b": {1: "BoolDType"},
    "O": {None: "ObjectDType"},
    "V": {None: "VoidDType"},
    "U": {None: "StrDType"},
    "S": {None: "BytesDType"},
    "M": {None: "DateTime64DType"},
    "m": {None: "TimeDelta64DType"},
}


def numpy_dtype_classes() -> list[str]:
    """Every `numpy.dtypes.X` class name that numpy_dtype_class can give."""
    return [f"numpy.dtypes.{name}" for sizes in _NUMPY_DTYPE_CLASSES.values()
            for name in sizes.values()]


def numpy_dtype_class(code: str) -> str | None:
    """`numpy.dtypes.X` that numpy.dtype(code) objects are instances of, or None if unknown."""
    match = re.fullmatch(r"[<>|=]?([a-zA-Z])(\d*)", code)
    if match is None:
        return None
    sizes = _NUMPY_DTYPE_CLASSES.get(match.group(1), {})
    name = sizes.get(int(match.group(2))) if match.group(2) else None
    name = name or sizes.get(None)
    return f"numpy.dtypes.{name}" if name else None


_NUMPY_CORE = [f"numpy.{core}.multiarray.{name}"
               for core in ("core", "_core") for name in ("_reconstruct", "scalar")]

# Object arrays are left out: an object dtype is rare in weights and worth a decision of its own.
_NUMPY_DTYPES = [name for name in numpy_dtype_classes() if name != "numpy.dtypes.ObjectDType"]

# Lightning's AttributeDict is a dict whose keys read as attributes; it holds hyper-parameters
# (a config passed to save_hyperparameters, a Fabric state). One class under four import paths:
# the unified `lightning` package, the standalone packages, and the subclass Lightning re-exports.
_ATTRIBUTE_DICTS = ("lightning.fabric.utilities.data.AttributeDict",
                    "lightning_fabric.utilities.data.AttributeDict",
                    "lightning.pytorch.utilities.parsing.AttributeDict",
                    "pytorch_lightning.utilities.parsing.AttributeDict")
# Paths in hyper-parameters (data_dir=Path(...)) and in older ModelCheckpoint state. Python 3.13
# pickles them from pathlib._local, and a path saved on Windows cannot be built on Linux.
_PATHS = {f"pathlib{where}.{pure}{system}Path": f"pathlib.Pure{system}Path"
          for where in ("", "._local") for pure in ("", "Pure") for system in ("Posix", "Windows")}

# omegaconf's containers, as Hydra-configured runs save their config among a checkpoint's
# hyper-parameters: the containers, their metadata, the value nodes, and the plain types and
# containers their metadata and content dicts are pickled with.
_OMEGACONF = (
    "omegaconf.dictconfig.DictConfig", "omegaconf.listconfig.ListConfig",
    "omegaconf.base.ContainerMetadata", "omegaconf.base.Metadata",
    *(f"omegaconf.nodes.{node}Node" for node in (
        "Any", "String", "Integer", "Float", "Boolean", "Bytes", "Path", "Enum", "Literal")),
    "typing.Any", "collections.defaultdict",
    *(f"builtins.{plain}" for plain in ("dict", "list", "int", "float", "str", "bool", "bytes")),
)

STAND_INS: dict[str, str] = {**dict.fromkeys(_ATTRIBUTE_DICTS, "builtins.dict"), **_PATHS}
"""Globals the worker rebuilds as a plain class of the standard library, registered under the
checkpoint's name: an AttributeDict as a dict, a path as a pure path (a name that never touches
the filesystem). The worker needs neither Lightning nor the saving system's path class."""

PRESETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "numpy": ("NumPy arrays, scalars and dtypes, as checkpoints that saved numpy values hold",
              (*_NUMPY_CORE, "numpy.ndarray", "numpy.dtype", *_NUMPY_DTYPES)),
    "argparse": ("argparse.Namespace, the hyper-parameters of fairseq-style checkpoints",
                 ("argparse.Namespace",)),
    "lightning": ("Lightning's AttributeDict (loaded as a dict), pathlib paths (loaded as pure "
                  "paths) and argparse.Namespace (PyTorch Lightning 1.x hparams), as Lightning "
                  "checkpoints hold them",
                  (*_ATTRIBUTE_DICTS, *_PATHS, "argparse.Namespace")),
    "omegaconf": ("omegaconf's DictConfig and ListConfig with their nodes and metadata, the "
                  "hyper-parameters of Hydra-configured Lightning checkpoints",
                  _OMEGACONF),
}

PRESET_GLOBALS = frozenset(g for _, members in PRESETS.values() for g in members)
"""Names a preset may list that this environment's numpy lacks (they are skipped, not errors)."""


def preset_help() -> str:
    """One line per preset, for a command's --help."""
    return "; ".join(f"{name}: {what}" for name, (what, _) in PRESETS.items())


def allow_flags(needed: list[str]) -> list[str]:
    """Command-line words that allow every name in `needed`: the preset admitting most of them
    first (a Lightning 1.x file's Namespace and path take `--allow lightning` alone), then
    `--allow-global` for each name no preset admits."""
    flags: list[str] = []
    left = list(needed)
    while True:
        # the preset that admits most of what is left (the first listed, on a tie)
        covered, _, name = max((sum(g in members for g in left), -order, name)
                               for order, (name, (_, members)) in enumerate(PRESETS.items()))
        if not covered:
            break
        flags += ["--allow", name]
        left = [g for g in left if g not in PRESETS[name][1]]
    for g in left:
        flags += ["--allow-global", g]
    return flags
