"""The hyper-parameters a training checkpoint saved, in one line.

Lightning keeps the module's under `hyper_parameters` and the data module's under
`datamodule_hyper_parameters`; older checkpoints use `hparams`. A Lightning file's loop
counters come first among its values, so a listing of the first values never reaches them.
Read from the inspect contract's object leaves (`ObjectLeaf`); no torch.
"""

from __future__ import annotations

from collections.abc import Iterable

from inspector.checkpoint.tensor_stats import ObjectLeaf

ROOTS = ("hyper_parameters", "datamodule_hyper_parameters", "hparams")
SHOWN = 8


def hyper_parameters(objects: Iterable[ObjectLeaf]) -> list[tuple[str, str]]:
    """(name below its root, repr) of every saved hyper-parameter, in the file's order."""
    found = []
    for o in objects:
        root, dot, name = o.key.partition(".")
        if dot and root in ROOTS:
            found.append((name if root != "datamodule_hyper_parameters" else f"datamodule.{name}",
                          str(o.repr)))
    return found


def hyper_parameters_line(objects: Iterable[ObjectLeaf]) -> str:
    """'lr 0.01 · hidden 8 · …' (the first SHOWN and how many more); '' when none are saved."""
    found = hyper_parameters(objects)
    shown = " · ".join(f"{name} {value}" for name, value in found[:SHOWN])
    more = len(found) - SHOWN
    return shown + (f" · … {more} more" if more > 0 else "")
