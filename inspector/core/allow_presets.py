"""Named sets of benign globals a user allows with one flag (`--allow numpy`).

Each preset lists exactly what it admits, and none admits a global the policy calls dangerous
(the tests classify every entry). Allowing a preset only lets `torch.load(weights_only=True)`
rebuild these objects inside the jail; it never turns weights_only off.
"""

from __future__ import annotations

from inspector.core.policy import numpy_dtype_classes

_NUMPY_CORE = [f"numpy.{core}.multiarray.{name}"
               for core in ("core", "_core") for name in ("_reconstruct", "scalar")]

# Object arrays are left out: an object dtype is rare in weights and worth a decision of its own.
_NUMPY_DTYPES = [name for name in numpy_dtype_classes() if name != "numpy.dtypes.ObjectDType"]

PRESETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "numpy": ("NumPy arrays, scalars and dtypes, as checkpoints that saved numpy values hold",
              (*_NUMPY_CORE, "numpy.ndarray", "numpy.dtype", *_NUMPY_DTYPES)),
    "argparse": ("argparse.Namespace, the hyper-parameters of fairseq-style checkpoints",
                 ("argparse.Namespace",)),
}

PRESET_GLOBALS = frozenset(g for _, members in PRESETS.values() for g in members)
"""Names a preset may list that this environment's numpy lacks (they are skipped, not errors)."""


def preset_help() -> str:
    """One line per preset, for a command's --help."""
    return "; ".join(f"{name}: {what}" for name, (what, _) in PRESETS.items())


def allow_flags(needed: list[str]) -> list[str]:
    """The fewest command-line words that allow every name in `needed`."""
    flags: list[str] = []
    left = list(needed)
    for name, (_, members) in PRESETS.items():
        if any(g in members for g in left):
            flags += ["--allow", name]
            left = [g for g in left if g not in members]
    for g in left:
        flags += ["--allow-global", g]
    return flags
