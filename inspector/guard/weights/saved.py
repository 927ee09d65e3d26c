"""A save's copy of a watched model held to what the guard knows at the save: the copy being
written (`{k: v.clone()}`, a `.cpu()` staging buffer, a trainer's full state dict) is not the
live model the health check reads, and a fault in the copy alone (a RAM fault in the staging
buffer) would otherwise be sealed.

The saved tensors that carry a watched tensor's name (the key ends with it at a dot, with its
shape and dtype) are grouped by the key's prefix (`model.`, `state_dict.`, `ema.`). A group is
a copy of the live model when at least half of its tensors an optimizer steps (all of them
when none is held by one) hold the live bytes exactly (compared byte for byte with the live
tensor, which the health check just held to the guard's fingerprint; on another device, a
staging buffer in host memory, the copy's fingerprint, `prints.fingerprint`, against the one
the guard read at the save); in such a copy every tensor whose bytes differ is named, and so
is every buffer no forward writes (`constants`) whose bytes are not the live buffer's. A group
that is not one (an EMA, weights staged some steps ago) still has each tensor's largest |value|
held to the learned `weight-largest` bound (an EMA is a convex mix of past weights, so never
past it), as are a copy's tensors that differ. Both read the saved bytes only; a saved tensor
that is the live parameter's own storage is the live bytes and is not read again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from inspector.core.flatten import flatten
from inspector.guard.weights.fingerprint import WeightWatch, local
from inspector.guard.weights.prints import Prints, fingerprint, raw_bytes
from inspector.guard.weights.rules import WeightLargest, WeightRuleSet

RULE = "saved-copy"
SHOWN = 3
INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
"""The integer dtype of each element size, to compare bytes as integers."""


@dataclass
class _Group:
    """The saved tensors under one key prefix that carry watched names."""

    params: list[tuple[int, str, torch.Tensor]] = field(default_factory=list)
    """(position among the watched parameters, saved key, tensor)."""
    buffers: list[tuple[str, str, torch.Tensor]] = field(default_factory=list)
    """(watched name, saved key, tensor) of the floating-point buffers."""
    constants: list[tuple[int, str, torch.Tensor]] = field(default_factory=list)
    """(position among the buffers no forward writes, saved key, tensor)."""


def saved_problems(watch: WeightWatch, rules: WeightRuleSet, label: str, state: Any,
                   shared: frozenset[str] = frozenset()) -> list[str]:
    """Every saved tensor of `state` carrying a watched name that a copy of the live model
    holds with other bytes, or that is past its learned largest |value|, in words; a name in
    `shared` (another guarded model watches it too: a GAN's two `nn.Sequential`s) is bounded
    only in a copy of this model, as a tensor outside one may be the other model's."""
    with torch.no_grad():
        groups = _groups(watch, state)
        if not groups:
            return []
        largest = next((r for r in rules.rules if isinstance(r, WeightLargest)), None)
        held = _held(watch)
        out = []
        for group in groups.values():
            differ = _differing(watch, group)
            copy = _is_copy(group, differ, held)
            if copy:
                out += [f"{RULE} on {label}{key}: its bytes differ from the live weights the "
                        "guard fingerprinted at the save (a fault in the copy being saved)"
                        for (_, key, _), bad in zip(group.params, differ, strict=True) if bad]
                out += _constants_differ(watch, label, group)
                # the live bytes' largest |w| is the health check's: only the others are read
                group.params = [e for e, bad in zip(group.params, differ, strict=True) if bad]
            else:
                group.params = [e for e in group.params
                                if watch.named_params[e[0]][0] not in shared]
                group.buffers = [e for e in group.buffers if e[0] not in shared]
            if largest is not None:
                out += _past_bound(watch, largest, label, group)
        return out[:SHOWN] + ([f"and {len(out) - SHOWN} more saved-copy problems"]
                              if len(out) > SHOWN else [])


def _groups(watch: WeightWatch, state: Any) -> dict[str, _Group]:
    """The saved tensors carrying a watched name, with its shape and dtype, by key prefix."""
    params = {name: i for i, (name, _) in enumerate(watch.named_params)}
    buffers = dict(zip(watch.names[len(watch.params):], watch.buffers, strict=True))
    constants = {still.name: i for i, still in enumerate(watch.constants.items)}
    groups: dict[str, _Group] = {}
    for key, leaf in _tensors(state):
        for prefix, name in _splits(key):
            if name in constants:
                if _same_kind(leaf, watch.constants.items[constants[name]].tensor):
                    groups.setdefault(prefix, _Group()).constants.append(
                        (constants[name], key, leaf))
                break
            if name in params:
                like = watch.params[params[name]]
                if _same_kind(leaf, like):
                    groups.setdefault(prefix, _Group()).params.append((params[name], key, leaf))
                break
            if name in buffers:
                if _same_kind(leaf, buffers[name]):
                    groups.setdefault(prefix, _Group()).buffers.append((name, key, leaf))
                break
    return groups


def _tensors(state: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The state's dense tensors with bytes, by dotted key."""
    for key, leaf in flatten(state):
        if (isinstance(leaf, torch.Tensor) and leaf.layout == torch.strided
                and leaf.device.type != "meta"):
            yield key, local(leaf)


def _splits(key: str) -> Iterator[tuple[str, str]]:
    """(prefix, name) for each cut of a dotted key at a dot, the longest name first."""
    parts = key.split(".")
    for cut in range(len(parts)):
        yield ".".join(parts[:cut]), ".".join(parts[cut:])


def _same_kind(saved: torch.Tensor, live: torch.Tensor) -> bool:
    return saved.shape == live.shape and saved.dtype == live.dtype


def _live_prints(watch: WeightWatch) -> Prints:
    """The parameters' fingerprint the guard read at the save (its check leaves it as the one
    expected; read now when this period's cadence took none)."""
    watch.settle()
    return watch.expected if watch.expected is not None else fingerprint(watch.params)


def _held(watch: WeightWatch) -> set[int] | None:
    """The positions of the parameters some optimizer steps (None: no optimizer seen yet)."""
    known = [held for _, held in watch.held.values()]
    if not known:
        return None
    if any(held is None for held in known):
        return set(range(len(watch.params)))
    return {i for held in known for i in held}


def _differing(watch: WeightWatch, group: _Group) -> list[bool]:
    """Per saved parameter of the group, whether its bytes differ from the live ones: compared
    byte for byte on the live tensor's device, else by the guard's fingerprint (another
    device: a staging buffer in host memory); one that is the live parameter's own storage
    is not read."""
    out, far = [], []
    for k, (i, _, saved) in enumerate(group.params):
        live = watch.params[i]
        far += [(k, i)] if saved.device != live.device else []
        out.append(saved.device == live.device and not _is_live(saved, live)
                   and not _same_bytes(saved, live))
    if far:
        printed = fingerprint([group.params[k][2] for k, _ in far])
        expected = _live_prints(watch).select([i for _, i in far])
        for (k, _), bad in zip(far, printed.differ(expected).tolist(), strict=True):
            out[k] = bool(bad)
    return out


def _constants_differ(watch: WeightWatch, label: str, group: _Group) -> list[str]:
    """The buffers no forward writes whose bytes in a copy of the live model are not the live
    buffer's (which the guard holds to the bytes it first read)."""
    items = watch.constants.items
    return [f"{RULE} on {label}{key}: its bytes differ from the live buffer {items[i].name}, "
            "which no forward writes (a fault in the copy being saved)"
            for i, key, saved in group.constants if not _is_live(saved, items[i].tensor)
            and not _same_bytes(saved, items[i].tensor.to(saved.device))]


def _same_bytes(saved: torch.Tensor, live: torch.Tensor) -> bool:
    """Whether two tensors of one shape and dtype hold the same bytes (as integers: a float
    compare would take -0.0 for 0.0 and never NaN for itself)."""
    as_int = INTS.get(saved.element_size())
    if as_int is None:
        return torch.equal(raw_bytes(saved), raw_bytes(live))
    return torch.equal(saved.detach().view(as_int), live.detach().view(as_int))


def _is_live(saved: torch.Tensor, live: torch.Tensor) -> bool:
    return (saved.device == live.device and saved.data_ptr() == live.data_ptr()
            and saved.stride() == live.stride())


def _is_copy(group: _Group, differ: list[bool], held: set[int] | None) -> bool:
    """Whether the group is a copy of the live model: at least half of its stepped tensors
    (all of them when it holds none an optimizer steps) hold the live bytes, one at least."""
    stepped = [bad for (i, _, _), bad in zip(group.params, differ, strict=True)
               if held is None or i in held]
    judged = stepped or differ
    same = judged.count(False)
    return same > 0 and 2 * same >= len(judged)


def _past_bound(watch: WeightWatch, largest: WeightLargest, label: str, group: _Group
                ) -> list[str]:
    """The group's saved tensors whose largest |value| is past the learned bound."""
    names = [watch.named_params[i][0] for i, _, _ in group.params]
    entries = [(n, key, t, False) for n, (_, key, t) in zip(names, group.params, strict=True)]
    entries += [(n, key, t, True) for n, key, t in group.buffers]
    live = dict(zip(watch.names, watch.params + watch.buffers, strict=True))
    out = []
    for name, key, tensor, buffer in entries:
        bound = largest.bound(name, buffer)
        if bound is None or not tensor.numel() or _is_live(tensor, live[name]):
            continue
        # float8 has no reductions: its few values widen exactly
        low, high = torch.aminmax(tensor.detach() if tensor.element_size() > 1
                                  else tensor.detach().float())
        top = max(-low.item(), high.item())
        if not top <= bound:  # NaN too: past any bound
            out.append(f"{RULE} on {label}{key}: saved largest |w| {top:.4g} past the bound "
                       f"{bound:.4g} the guard learned for {name}")
    return out

