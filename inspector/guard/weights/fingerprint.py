"""What the weights look like between optimizer steps: an exact fingerprint per tensor, its norm
and its largest |value|, computed on the tensor's own device with no sync.

The fingerprint (`weights.prints`) is exact integer arithmetic over a tensor's bytes: the
sums of the rows and the columns of its 64-bit words laid out as a grid, which no pair of bit
flips leaves unchanged. On a CPU it costs about two `sum`s over the weights in cache, less
where the pass is bound by memory (a float64 sum of squares, which needs a float64 copy, costs
~70x more there).

`WeightWatch.after_step` takes the fingerprint right after an optimizer step (a global
`torch.optim` post-hook calls it); `reading()` takes the next one together with the per-tensor
L2 norms and, every `largest_every` readings, the largest |w|, as one device vector the guard
reads back in its step's one sync. Each reduction is one pass over the weights and a pass is
what the guard costs (a pass over a 41 MB model is ~2.5 % of a small CPU step), so on a CPU
the reading walks each tensor once in pieces of `PIECE_BYTES` and runs its reductions on a
piece while it is still in the core's cache (`_read`): for weights that do not fit in the
cache the norm and the largest |w| then cost a fraction of a pass (41 MB pushed out of cache:
10.6 -> 7.3 ms for all three; weights that stay in a large L3 cache gain little). Two passes
stay: the fingerprint after the step and the one that checks it, since the
optimizer rewrites every weight in between.

With a spare CPU core (`overlap`), the post-step fingerprint is taken by the training thread
and one background thread (`guard-weights`), half of the bytes each, and the training thread
goes on only when both are done; the norms and largest |w| of the weights the step wrote are
then read by the background thread while the next forward and backward run, and the check's
fingerprint is taken there while the guard reduces the gradients; both are joined before the
step's one sync, and any optimizer step waits for them (`settle`) so no background read
overlaps a write. The fingerprints are taken at the same two moments as inline, so the window
a change can slip through is the same: between an optimizer's write of a tensor and the
post-step fingerprint, and between the check and the next optimizer step. A tensor whose check
fails is re-read on the spot, so its norm and largest |w| are its bytes now, as inline.
"""

from __future__ import annotations

import math
import os
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import torch
from torch import nn

from inspector.core.flatten import is_running_variance
from inspector.guard.weights.constants import Constants, probed
from inspector.guard.weights.members import layout, members
from inspector.guard.weights.norm_stats import NormStats
from inspector.guard.weights.prints import (
    CACHED_BYTES,
    Prints,
    column_sums,
    fingerprint,
    grid,
    print_parts,
    raw_bytes,
    tails,
    words_of,
)


def local(t: torch.Tensor) -> torch.Tensor:
    """The bytes this rank holds: a DTensor's local shard (a view of its storage), else `t`;
    a complex tensor as its real and imaginary parts (`view_as_real`, a float view of the same
    bytes), which every reading reduces as any float tensor."""
    to_local = getattr(t, "to_local", None)
    t = to_local() if callable(to_local) else t
    return torch.view_as_real(t) if t.is_complex() else t


def watched(t: torch.Tensor | None) -> bool:
    """Whether the weight rules read this tensor: a floating-point or complex one."""
    return t is not None and (t.is_floating_point() or t.is_complex())


PIECE_BYTES = CACHED_BYTES
"""The piece of a tensor a reading reduces at a time (a multiple of 8, so every piece but a
tensor's last is read as 64-bit words)."""


def _read(t: torch.Tensor, prints: bool, largest: bool
          ) -> tuple[list[torch.Tensor] | None, torch.Tensor, torch.Tensor | None]:
    """One tensor's fingerprint parts and largest |w| (each when asked) and its L2 norm
    (float32). On a CPU its bytes come from memory once: every reduction runs on a piece while
    it is in cache (pieces of whole rows of `grid`, the fingerprint's parts as `print_parts` takes
    them). A GPU reads its own memory at full speed and pays per kernel launch instead, so
    there each reduction takes the whole tensor."""
    raw = raw_bytes(t)
    cut = raw.device.type == "cpu"
    # 64-bit words that are a view of the bytes can be summed piece by piece
    in_place = raw.storage_offset() % 8 == 0
    rows, columns = grid(raw.numel() // 8) if in_place else (0, 0)
    pieces = _cuts(raw.numel(), rows, columns, in_place) if cut else [(0, raw.numel())]
    columns_sums, row_sums, norms, highs, lows = [], [], [], [], []
    for start, end in pieces:
        values = raw[start:end].view(t.dtype)
        if prints and cut and in_place and end <= 8 * rows * columns:
            block = raw[start:end].view(torch.int64).view(-1, columns)
            columns_sums.append(block.sum(0))
            row_sums.append(block.sum(1))
        norms.append(torch.linalg.vector_norm(values, dtype=_norm_dtype(t)))
        if largest:
            low, high = torch.aminmax(values)
            highs.append(high)
            lows.append(low)
    if not norms:
        zero = torch.zeros((), device=t.device)
        return print_parts(raw) if prints else None, zero, zero if largest else None
    top = None
    if largest:
        top = torch.maximum(torch.stack(highs).max(), -torch.stack(lows).min()).float()
    parts = None
    if prints and cut and in_place:  # the pieces' sums are `print_parts`', cut at whole rows
        words, covered = words_of(raw)
        summed = [column_sums(columns_sums), *row_sums] if rows else []
        parts = summed + tails(raw, words, rows * columns, covered)
    elif prints:
        parts = print_parts(raw)
    return parts, torch.linalg.vector_norm(torch.stack(norms)), top


def _cuts(size: int, rows: int, columns: int, in_place: bool) -> list[tuple[int, int]]:
    """The byte ranges a CPU reading takes in turn: blocks of whole rows of about
    `PIECE_BYTES` while the words are a view of the bytes, then the rest; else plain
    `PIECE_BYTES` pieces."""
    if not in_place or not rows:
        return [(at, min(at + PIECE_BYTES, size)) for at in range(0, size, PIECE_BYTES)]
    step = 8 * columns * max(1, PIECE_BYTES // (8 * columns))
    summed = 8 * rows * columns
    cuts = [(at, min(at + step, summed)) for at in range(0, summed, step)]
    return cuts + ([(summed, size)] if summed < size else [])


def _norm_dtype(t: torch.Tensor) -> torch.dtype:
    """float32 accumulation for narrower floats (a half norm overflows at 65504)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _values(params: list[torch.Tensor], largest: bool
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The tensors' norms and (when asked) largest |w|, without their fingerprints."""
    with torch.no_grad():
        read = [_read(p, False, largest) for p in params]
    return _stack([r[1] for r in read]), _stack([r[2] for r in read]) if largest else None


def readable(buffers: list[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
    """The named buffers whose values the readings can reduce and read back (`probed`)."""
    return probed(buffers, lambda b: _buffer_values([b], [])[1].tolist(), "reduced")


def _buffer_values(buffers: list[torch.Tensor], variances: list[int]
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The buffers' norms and largest |value|, two fused calls over them all (a CNN has a
    hundred or more small ones: one reduction each costs ~5x more, per step), and the running
    variances' (`variances`, their positions) lowest values (None: none)."""
    with torch.no_grad():
        # an empty one (a placeholder) reads as a zero: the infinity norm has no identity;
        # a float8 one is read as float32 (no norm kernel takes it)
        views = [(b.detach() if b.element_size() > 1 else b.detach().float())
                 if b.numel() else b.new_zeros((), dtype=torch.float32) for b in buffers]
        norms = torch._foreach_norm(views, 2.0)
        top = torch._foreach_norm(views, math.inf)
        # a flipped sign keeps a variance's norm and largest |value|: only its lowest value
        # shows it (one small reduction each is faster here than two fused calls with a copy)
        lowest = [views[i].min() for i in variances]
        device = views[0].device
        if any(v.device != device for v in views):
            norms, top, lowest = ([t.to(device) for t in part] for part in (norms, top, lowest))
        # float64 (stack promotes, then one cast): a float64 buffer's value past float32's
        # range stays a finite number
        return (torch.stack(norms).double(), torch.stack(top).double(),
                torch.stack(lowest).double() if lowest else None)


@dataclass
class WeightReading:
    """One reading of every watched tensor, on the device: which changed since the fingerprint
    taken after the last optimizer step (None when none was taken), the norms, the largest
    |w| (None when not due). Parts a background thread still computes are futures, joined by
    `vector()`; `settled` says whether the norms were read before the check (after the step)."""

    changed: torch.Tensor | Future | None
    norms: torch.Tensor | Future
    largest: torch.Tensor | None
    settled: bool = False
    buffers: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None
    """The buffers' norms and largest |value|, which follow the parameters' in the vector, and
    the running variances' lowest values, which follow them."""
    constants: torch.Tensor | None = None
    """Which constant buffers' bytes changed (`constants.Constants.flags`), which end the
    vector."""
    forced: bool = False
    """A reading a save's check forced (`reading(largest=True)`), not a step's."""

    def vector(self) -> torch.Tensor:
        """Everything as one float64 vector, to read back with the step's other numbers."""
        if isinstance(self.norms, Future):
            self.norms, self.largest = self.norms.result()
        if isinstance(self.changed, Future):
            self.changed = self.changed.result()
        lowest = None
        if self.buffers is not None:
            norms, top, lowest = self.buffers
            self.buffers = None
            device = self.norms.device
            # no fingerprint covers a buffer, so its largest |value| is read at every step;
            # the parameters' not due this step are NaN, which the rules pass over
            params = (self.largest if self.largest is not None else
                      torch.full((self.norms.numel(),), math.nan, device=device))
            self.norms = torch.cat([self.norms, norms.to(device)])
            self.largest = torch.cat([params.to(device), top.to(device)])
        parts = [self.norms.double()]
        if self.changed is not None:
            parts.insert(0, self.changed.double())
        if self.largest is not None:
            parts.append(self.largest.double())
        if lowest is not None:
            parts.append(lowest.to(self.norms.device))
        if self.constants is not None:
            parts.append(self.constants.to(self.norms.device).double())
        return torch.cat(parts)


@dataclass
class WeightValues:
    """A reading read back to the host: per tensor, in the watch's order."""

    changed: list[bool] | None
    norms: list[float]
    largest: list[float] | None
    nonfinite: list[bool]
    """Whether the tensor holds NaN or Inf (a norm can overflow on finite values: checked)."""
    stepped: int | None = None
    """How many leading tensors an optimizer steps (the parameters; the buffers after them
    move by what each forward computes); None: all of them."""
    negative: dict[int, float] = field(default_factory=dict)
    """The running variances (by position) holding a negative value: their lowest value (a NaN
    there is `nonfinite`'s)."""
    variance_lowest: dict[int, float] = field(default_factory=dict)
    """The lowest value of each running variance (by position) whose layer moves it by at most
    half a batch's worth per forward (`slow_variances`)."""
    constants_changed: dict[str, float] = field(default_factory=dict)
    """The constant buffers named changed (`constants.Constants.judge`), and the norm layers'
    running statistics changed with no forward since the step (`NormStats`): name -> L2 norm."""
    rates: list[float | None] | None = None
    """The learning rate each stepped tensor's param group has now (None: not known), which
    `update-size` measures a step against; set by the guard, which reads the groups."""


def slow_variances(model: nn.Module) -> set[str]:
    """The running variances of the model's norm layers whose forward moves them by at most
    half of a batch's variance (momentum at most 0.5, or None: a cumulative average, which from
    its second batch on moves them by at most half): no forward shrinks one by 2^16 at once.
    A layer with a larger momentum follows its last batch, which may hold a dead channel."""
    from torch.nn.modules.batchnorm import _NormBase

    return {f"{name}.running_var" if name else "running_var"
            for name, m in model.named_modules()
            if isinstance(m, _NormBase) and m.track_running_stats
            and (m.momentum is None or m.momentum <= 0.5)}


def spare_core(params: list[torch.Tensor]) -> bool:
    """Whether a background reader would run on a core of its own: CPU weights, and more cores
    allowed to this process than torch's threads use (a GPU reads its weights itself)."""
    return (bool(params) and params[0].device.type == "cpu"
            and len(os.sched_getaffinity(0)) > torch.get_num_threads())


class WeightWatch:
    """Fingerprints, norms and largest |w| of one model's floating-point parameters; `overlap`
    reads what it can on a background thread (None: when `spare_core` says so)."""

    def __init__(self, model: nn.Module, every: int = 1, largest_every: int = 1,
                 overlap: bool | None = None) -> None:
        named = [(n, p) for n, p in model.named_parameters() if watched(p)]
        self.named_params = named
        """The floating-point parameters, the model's own objects (a DTensor, not its shard)."""
        self.members = members(model)
        """Every parameter and buffer as the watch first saw them (`members.replaced`)."""
        self.modules = list(model.modules())
        self.layout = layout(self.modules)
        # FSDP wraps modules and shards parameters (DTensors): its ranks hold different bytes
        self.sharded = (any(hasattr(p, "to_local") for _, p in named)
                        or any("FullyShardedDataParallel" in type(m).__name__
                               or type(m).__name__.startswith("FSDP") for m in model.modules()))
        # dense ones: a sparse buffer (a graph's adjacency) has no reductions of this kind
        buffers = readable([(n, local(b)) for n, b in model.named_buffers()
                            if watched(b) and b.layout == torch.strided])
        self.names = [n for n, _ in named] + [n for n, _ in buffers]
        """The parameters' names, then the floating-point buffers' (BatchNorm's running
        statistics): every tensor the checkpoint holds and the model computes with."""
        self.params = [local(p) for _, p in named]
        self.buffers = [b for _, b in buffers]
        """Read for their norms and largest |value|: a forward may write them, so no
        fingerprint taken after the optimizer step can say they should not have changed (those
        no forward writes are `constants` too)."""
        self.variances = [i for i, (n, _) in enumerate(buffers) if is_running_variance(n)]
        """The buffers that are running variances (by position among `buffers`): read for their
        sign and lowest value too."""
        self.norm_stats = NormStats(model)
        """The norm layers' running statistics as each step's forward left them: a save's
        reading compares them (`NormStats`)."""
        slow = slow_variances(model)
        self.slow = {i for i in self.variances if buffers[i][0] in slow}
        """Those a forward moves by at most half a batch's worth (`slow_variances`)."""
        self.constants = Constants(model)
        """The buffers no optimizer steps and no forward writes (position ids, a position
        table, `inv_freq`): their fingerprint is compared at every reading (`constants`)."""
        self.every = every
        self.largest_every = max(1, largest_every)
        self.ids = {id(p) for _, p in named}
        self.expected: Prints | None = None
        self.steps = 0
        self.readings = 0
        on = spare_core(self.params) if overlap is None else overlap and bool(self.params)
        self.worker = (ThreadPoolExecutor(1, thread_name_prefix="guard-weights") if on
                       else None)
        self.cut = _half(self.params)
        """The post-step fingerprint's split: the tensors before it on the training thread,
        the rest (as near half the bytes as whole tensors allow) on the background one."""
        self.after: list[tuple[list[int] | None, Future]] = []
        """The norms (and largest |w| when due) of the weights each optimizer step since the
        last check wrote (the positions it stepped, None: all), read in the background: what
        the next check reports when its fingerprints agree."""
        self.held: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        """Per optimizer: the signature of its param groups and the positions of the watched
        tensors they hold (`held_by`)."""
        self.cuts: dict[tuple[int, ...] | None, int] = {None: self.cut}
        """The two threads' split of each stepped subset's fingerprint (`_fingerprint_now`)."""
        self.stepped = False
        """Whether an optimizer stepped since the last check (the cadence counts checks)."""
        self.due = False
        """Whether the fingerprints are taken in this check's period (`every`)."""
        self.checking: Future | None = None
        """The background check's fingerprint, which becomes `expected` (`reading`)."""
        self.stats_moved: list[str] = []
        """The norm statistics the last forced reading found changed with no forward."""
        self.moved_before: torch.Tensor | None = None
        """Which tensors had changed since the post-step fingerprint when an intended change
        began (`begin_intended`): the next reading reports them."""

    def current(self) -> bool:
        """Whether the model still holds the tensors (and modules) the watch reads."""
        return layout(self.modules) == self.layout

    def held_by(self, optimizer: torch.optim.Optimizer) -> list[int] | None:
        """The positions of the watched tensors `optimizer` steps (None: every one; []: none),
        re-derived only when its param groups change (a list walk per step otherwise)."""
        groups = optimizer.param_groups
        signature = tuple((id(g["params"]), len(g["params"])) for g in groups)
        known = self.held.get(optimizer)
        if known is not None and known[0] == signature:
            return known[1]
        ids = {id(p) for g in groups for p in g["params"]}
        at = [i for i, (_, p) in enumerate(self.named_params) if id(p) in ids]
        held = None if len(at) == len(self.params) else at
        self.held[optimizer] = (signature, held)
        return held

    def after_step(self, held: list[int] | None = None) -> None:
        """The weights an optimizer just wrote (at positions `held`, None: all) are the ones
        to expect: their fingerprints are retaken, every other tensor keeps the one it had
        (no step wrote it since), so a change to another optimizer's tensors between two
        optimizers' steps stays seen. The fingerprints are taken in every `every`-th check's
        period (one check and the optimizer steps after it)."""
        if not self.stepped:
            self.stepped, self.steps = True, self.steps + 1
            self.due = self.every > 0 and self.steps % self.every == 0
        if not self.due:
            self.expected = None
        elif held is None or self.expected is None:
            self.expected = self._fingerprint_now(None)
        else:
            spliced = self.expected.replaced(held, self._fingerprint_now(held))
            self.expected = spliced if spliced is not None else self._fingerprint_now(None)
        if self.worker is not None:
            largest = self.readings % self.largest_every == 0
            params = self.params if held is None else [self.params[i] for i in held]
            piece = self.worker.submit(_values, params, largest)
            self.after = [(held, piece)] if held is None else [*self.after, (held, piece)]

    def _fingerprint_now(self, held: list[int] | None) -> Prints:
        """`fingerprint` of the tensors at `held` (None: all), on both threads when there is
        a background one; returns only when every tensor has been read."""
        params = self.params if held is None else [self.params[i] for i in held]
        if self.worker is None or not params:
            return fingerprint(params)
        key = None if held is None else tuple(held)
        cut = self.cuts.get(key)
        if cut is None:
            cut = self.cuts[key] = _half(params)
        theirs = self.worker.submit(fingerprint, params[cut:])
        mine, rest = fingerprint(params[:cut]), theirs.result()
        return Prints(torch.cat([mine.flat, rest.flat.to(mine.flat.device)]),
                      mine.lengths + rest.lengths)

    def settle(self) -> None:
        """Wait for the background reads (before anything writes the weights)."""
        for _, piece in self.after:
            piece.result()
        if self.checking is not None:
            self.checking.result()
            self.checking = None

    def accept(self) -> None:
        """The weights now are the ones to expect (after a deliberate edit or a load)."""
        self.settle()
        self.after = []
        self.expected = fingerprint(self.params) if self.every > 0 else None
        self.constants.accept()
        self.norm_stats.keep()

    def begin_intended(self) -> None:
        """An intended change outside a step is about to run (SAM's ascent step): compare
        the weights with the post-step fingerprint now, for the next reading to report."""
        self.settle()
        if self.expected is not None:
            moved = fingerprint(self.params).differ(self.expected)
            held = self.moved_before
            self.moved_before = moved if held is None else moved | held

    def end_intended(self) -> None:
        """The intended change is done: its weights are the ones the next check expects."""
        if self.expected is not None:
            self.expected = fingerprint(self.params)

    def _held(self, changed: torch.Tensor, held: torch.Tensor | None) -> torch.Tensor:
        """`changed`, with what `begin_intended` found before the intended change."""
        return changed if held is None else changed | held.to(changed.device)

    def reading(self, largest: bool | None = None) -> WeightReading:
        """Read every tensor now (no sync); `largest` forces or drops the |w| pass. In the
        background when the post-step reads are there and nothing is forced."""
        with torch.no_grad():
            due = self.readings % self.largest_every == 0 if largest is None else largest
            self.readings += 1
            # the buffers as they are now, after this step's forward wrote them; a forced
            # reading (a save's health check) finds the norm statistics no forward wrote since
            buffers = _buffer_values(self.buffers, self.variances) if self.buffers else None
            if largest is None:
                self.norm_stats.keep()
            else:
                self.stats_moved = self.norm_stats.moved()
            forced = largest is not None
            constants = self.constants.flags(forced)
            if not self.params:
                return WeightReading(None, torch.zeros(0), torch.zeros(0) if due else None,
                                     buffers=buffers, constants=constants, forced=forced)
            held, self.moved_before = self.moved_before, None
            if not forced:
                self.stepped = False
            if self.worker is not None and self.after and not forced:
                after, self.after = self.after, []
                return WeightReading(self._check_behind(held), self._gathered(after, due), None,
                                     settled=True, buffers=buffers, constants=constants,
                                     forced=forced)
            self.settle()
            self.after = []
            device = self.params[0].device
            check = self.expected is not None
            read = [_read(p, check, due) for p in self.params]
            changed = None
            if check:
                now = Prints.join([r[0] for r in read], device)
                changed = self._held(now.differ(self.expected), held)
                if not forced:  # a change is named once; a save's check leaves it to the step's
                    self.expected = now
            top = _stack([r[2] for r in read]) if due else None
            return WeightReading(changed, _stack([r[1] for r in read]), top, buffers=buffers,
                                 constants=constants, forced=forced)

    def _check_behind(self, held: torch.Tensor | None) -> Future | None:
        """Which tensors differ from the post-step fingerprints (with `held`), read on the
        background thread; the fingerprints read become the ones expected (a change is named
        once, as inline). None when none are expected."""
        expected, worker = self.expected, self.worker
        if expected is None or worker is None:
            return None

        def check() -> torch.Tensor:
            now = fingerprint(self.params)
            self.expected = now
            return self._held(now.differ(expected), held)
        self.checking = worker.submit(check)
        return self.checking

    def _gathered(self, after: list[tuple[list[int] | None, Future]], due: bool) -> Future:
        """Every tensor's norm (and largest |w| when `due`) on the background thread: from the
        last optimizer step that wrote it, else read now (no step since the last check wrote
        it)."""
        if len(after) == 1 and after[0][0] is None:
            return after[0][1]
        assert self.worker is not None
        covered: set[int] = set()
        for at, _ in after:
            covered |= set(range(len(self.params)) if at is None else at)
        rest = [i for i in range(len(self.params)) if i not in covered]
        if rest:
            after = [*after, (rest, self.worker.submit(
                _values, [self.params[i] for i in rest], due))]
        return self.worker.submit(_merged, after, len(self.params))

    def close(self) -> None:
        """Stop the background reader (its pending reads finish first)."""
        if self.worker is not None:
            self.worker.shutdown(wait=True)

    def values(self, reading: WeightReading, flat: list[float]) -> WeightValues:
        """Split a read-back `reading.vector()` into its parts."""
        n, printed = len(self.names), len(self.params)
        moved: list[str] = []
        if reading.constants is not None:
            cut = len(flat) - len(self.constants)
            flags, flat = flat[cut:], flat[:cut]
            moved = self.constants.judge([c != 0 for c in flags], reading.forced)
        at = 0
        changed = None
        if reading.changed is not None:
            changed, at = [v != 0 for v in flat[:printed]], printed
        norms = flat[at:at + n]
        largest = flat[at + n:at + 2 * n] if reading.largest is not None else None
        if reading.settled and changed is not None and any(changed):
            self._reread(changed, norms, largest)
        # only on the rare non-finite norm: an extra pass and sync tell Inf from overflow; in a
        # buffer only NaN counts, since an Inf there may be meant (a -inf attention mask), and
        # an Inf where a buffer held none is `weight-largest`'s
        tensors = self.params + self.buffers
        nonfinite = [not math.isfinite(v) and (bool(torch.isnan(t.detach()).any()) if i >= printed
                                               else not bool(torch.isfinite(t.detach()).all()))
                     for i, (v, t) in enumerate(zip(norms, tensors, strict=True))]
        lowest = flat[len(flat) - len(self.variances):] if self.variances else []
        negative = {printed + i: v for i, v in zip(self.variances, lowest, strict=True)
                    if v < 0}
        slow = {printed + i: v for i, v in zip(self.variances, lowest, strict=True)
                if i in self.slow}
        moved_stats, self.stats_moved = self.stats_moved, []
        return WeightValues(changed, norms, largest, nonfinite, printed, negative, slow,
                            {name: self.constants.norm(name) for name in moved}
                            | {name: norms[self.names.index(name)] if name in self.names
                               else math.nan for name in moved_stats})

    def _reread(self, changed: list[bool], norms: list[float], largest: list[float] | None
                ) -> None:
        """Replace the post-step norms and largest |w| of the changed tensors by their bytes
        now (the alarm path: the rules judge what is there, as an inline reading does)."""
        with torch.no_grad():
            for i in (i for i, c in enumerate(changed) if c):
                _, norm, top = _read(self.params[i], False, largest is not None)
                norms[i] = float(norm)
                if largest is not None and top is not None:
                    largest[i] = float(top)


def _merged(pieces: list[tuple[list[int] | None, Future]], n: int
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The norms and largest |w| of `n` tensors from pieces that each read some of them (their
    positions, None: all), the last piece's reading winning; no largest |w| unless every piece
    read it."""
    norms: torch.Tensor | None = None
    top: torch.Tensor | None = None
    tops = True
    for at, piece in pieces:
        got, got_top = piece.result()
        index = torch.arange(n) if at is None else torch.tensor(at, dtype=torch.int64)
        index = index.to(got.device)
        norms = (got.new_zeros(n) if norms is None else norms).index_copy(0, index, got)
        tops = tops and got_top is not None
        if tops and got_top is not None:
            top = (got_top.new_zeros(n) if top is None else top).index_copy(0, index, got_top)
    assert norms is not None
    return norms, top if tops else None


def _half(params: list[torch.Tensor]) -> int:
    """Where to split `params` so that the tensors before it hold as near half the bytes as
    whole tensors allow."""
    sizes = [p.numel() * p.element_size() for p in params]
    return min(range(len(sizes) + 1), key=lambda i: abs(2 * sum(sizes[:i]) - sum(sizes)))


def _stack(values: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> torch.Tensor:
    if not values:
        return torch.zeros(0)
    device = values[0].device
    return torch.stack([v.to(device=device, dtype=torch.float32) for v in values])
