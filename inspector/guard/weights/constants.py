"""The buffers only a fault changes: fingerprinted once and compared at every reading.

A model's buffers that no optimizer steps and no forward writes are weights too: position ids
and index tables (integers), a sinusoidal position table, RoPE's `inv_freq`, attention-bias
tables, a frozen BatchNorm's statistics (floats). One flipped bit there moves no norm and no
largest |value| of any other tensor; a float one's norm and largest |value| barely move (a sign
flip keeps both), so only their bytes show it. Every dense buffer is one of these unless its
module's forward writes it by design: a norm layer's running statistics and its
`num_batches_tracked` (their own rules: `norm_stats`, `variance-negative`, `variance-shrunk`)
and torch's quantization observers and fake-quantizers (their forward and their switches write
them) are left out.

What else writes a buffer shows itself by writing it again; a fault does not. So, per buffer,
at each step's reading (`Constants.flags`, one exact fingerprint of them all, compared on the
device with the last step reading's; the host reads one flag each in the step's one sync):

- a change is pending: the next step reading tells a writer from a fault;
- a second change (the next reading's, or any later one) shows a writer (a counter, an EMA, a
  table refreshed every N steps, one a switch starts writing after the first steps): the buffer
  leaves the set for good, and the change named before it, if any, is its writer's
  (`written`: the guard drops its held alarm);
- a pending change followed by a reading at which the buffer held still is a fault, named
  (`weights-changed`) at that reading, one step after it (within the first
  `CONSTANT_LEARNING` readings, at the last of them). A writer every N >= 2 steps that starts
  after them is named once, at its first write, and released at its second.

A forced reading (a save's health check) names every buffer, out of the first readings, whose
bytes are not the ones first fingerprinted (a pending change included: the save cannot wait
for the next step to tell), and changes no state. A buffer rewritten once on purpose after the
first readings (a table resized) is named until `accept`, as any deliberate edit of the
weights is (`Guard.accept_weights`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from inspector.guard.weights.prints import Prints, fingerprint

CONSTANT_LEARNING = 4
"""The first step readings, within which a buffer's change is named only at the last of them
(a forward's counter, a writer every few steps, shows itself by its second change first)."""


def constant_buffers(model: nn.Module) -> tuple[list[str], list[torch.Tensor]]:
    """The model's dense buffers (integer, bool, float, complex as its real view) that no
    forward of theirs writes by design: not a norm layer's running statistics nor its
    `num_batches_tracked`, nor any buffer of torch's quantization observers and
    fake-quantizers."""
    from torch.ao.quantization import FakeQuantizeBase, ObserverBase
    from torch.nn.modules.batchnorm import _NormBase

    named = []
    for module_name, module in model.named_modules():
        if isinstance(module, (FakeQuantizeBase, ObserverBase)):
            continue
        norm = isinstance(module, _NormBase)
        for name, b in module.named_buffers(recurse=False):
            if (b is None or b.layout != torch.strided or b.device.type == "meta"
                    or (norm and name in ("running_mean", "running_var",
                                          "num_batches_tracked"))):
                continue
            to_local = getattr(b, "to_local", None)  # a DTensor: the shard this rank holds
            t = to_local() if callable(to_local) else b
            named.append((f"{module_name}.{name}" if module_name else name,
                          torch.view_as_real(t) if t.is_complex() else t))
    named = probed(named, lambda t: fingerprint([t]).flat.tolist(), "fingerprinted")
    return [n for n, _ in named], [t for _, t in named]


def probed(named: list[tuple[str, torch.Tensor]], probe: Callable[[torch.Tensor], object],
           what: str) -> list[tuple[str, torch.Tensor]]:
    """The named tensors `probe` reads without an error, tried once each; the others (a tensor
    subclass without the kernels) are named in one line on stderr, since a guard that stopped
    the training it watches would cost more than it saves."""
    kept, left = [], []
    for name, t in named:
        try:
            probe(t)
        except Exception as exc:  # whatever the subclass raises: not watched, and said so
            left.append(f"{name} ({type(exc).__name__})")
            continue
        kept.append((name, t))
    if left:
        more = f" and {len(left) - 5} more" if len(left) > 5 else ""
        print(f"inspector.guard: buffers not watched, their values cannot be {what}: "
              f"{', '.join(left[:5])}{more}", file=sys.stderr)
    return kept


@dataclass
class Still:
    """One buffer the set watches, and its changes at step readings since it was learned."""

    name: str
    tensor: torch.Tensor
    changes: int = 0
    pending: bool = False
    """It changed at the last step reading, and no reading has told writer from fault yet."""


class Constants:
    """One model's buffers that only a fault changes (module doc): their fingerprints as first
    read and as the last step reading read them, and each buffer's changes."""

    def __init__(self, model: nn.Module) -> None:
        names, tensors = constant_buffers(model)
        self.items = [Still(n, t) for n, t in zip(names, tensors, strict=True)]
        self.learned: Prints | None = fingerprint(tensors) if tensors else None
        """The bytes every buffer must still hold (as first read, or as last accepted)."""
        self.last = self.learned
        """The bytes as the last step reading found them."""
        self.now: Prints | None = None
        self.readings = 0
        self.written: set[str] = set()
        """The buffers that changed twice: a writer's, no longer watched; a change named
        before is its writer's too."""

    def __len__(self) -> int:
        return len(self.items)

    @property
    def names(self) -> list[str]:
        """The watched buffers' names, in order."""
        return [s.name for s in self.items]

    def flags(self, forced: bool) -> torch.Tensor | None:
        """Per buffer, on the device (no sync): whether its bytes differ from the learned ones
        (`forced`: a save's check) or from the last step reading's."""
        if not self.items or self.learned is None or self.last is None:
            return None
        now = fingerprint([s.tensor for s in self.items])
        self.now = None if forced else now
        return now.differ(self.learned if forced else self.last)

    def judge(self, flags: list[bool], forced: bool) -> list[str]:
        """The buffers to name at this reading, given its `flags` (module doc)."""
        learning = self.readings < CONSTANT_LEARNING
        if forced:
            return [] if learning else [s.name for s, f in zip(self.items, flags, strict=True)
                                        if f]
        self.readings += 1
        named = []
        for s, changed in zip(self.items, flags, strict=True):
            if changed:
                s.changes += 1
                s.pending = s.changes == 1
            elif s.pending and self.readings >= CONSTANT_LEARNING:
                s.pending = False
                named.append(s.name)
        if any(flags):
            self.last = self.now
            self._drop_written()
        return named

    def _drop_written(self) -> None:
        """Leave out the buffers that changed twice (a writer's), for good."""
        kept = [i for i, s in enumerate(self.items) if s.changes < 2]
        if len(kept) == len(self.items):
            return
        self.written.update(s.name for s in self.items if s.changes >= 2)
        self.items = [self.items[i] for i in kept]
        self.learned = self.learned.select(kept) if kept and self.learned else None
        self.last = self.last.select(kept) if kept and self.last else None

    def accept(self) -> None:
        """The buffers' bytes now are intended: learned anew, their changes forgotten."""
        if self.items:
            self.learned = self.last = fingerprint([s.tensor for s in self.items])
        for s in self.items:
            s.changes, s.pending = 0, False

    def norm(self, name: str) -> float:
        """A named buffer's L2 norm now (the alarm path only)."""
        t = next(s.tensor for s in self.items if s.name == name)
        with torch.no_grad():
            return float(t.detach().double().norm())
