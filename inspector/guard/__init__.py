"""The training guard: numerics checks, re-run attribution, fault injection, the data-order
ledger, the audit record and shadow re-inference, for the user's own training process.

This package imports torch (it runs inside training, not in the app); the GUI never imports it
and never will. The files it writes are read without torch by `run.blocklog`, `run.order_log`,
`run.order_diff` and `run.metrics`. Names are loaded on first use, so `import inspector.guard`
does not import torch:

    from inspector.guard import Guard
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["EXIT_HALTED", "BitFlip", "Guard", "GuardConfig", "GuardHalt", "OrderLedger", "Shadow",
           "audit", "intended", "track"]

_LAZY = {
    "Guard": "inspector.guard.guard",
    "GuardConfig": "inspector.guard.guard",
    "GuardHalt": "inspector.guard.guard",
    "EXIT_HALTED": "inspector.guard.guard",
    "BitFlip": "inspector.guard.inject",
    "OrderLedger": "inspector.guard.order",
    "track": "inspector.guard.order",
    "Shadow": "inspector.guard.shadow",
    "audit": "inspector.guard.audit",
    "intended": "inspector.guard.weights.perturb",
}


def __getattr__(name: str) -> Any:
    """Import the module that defines `name` on first use."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'inspector.guard' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names, though none is imported yet."""
    return sorted(__all__)
