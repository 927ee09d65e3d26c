"""Shadow re-inference for batch jobs: re-run a fraction of the batches and compare the outputs.

    infer = Shadow(model, RUN_DIR, fraction=0.02)      # atol=rtol=0: bit for bit
    for batch in loader:
        out = infer(batch)

Which batches are re-run is decided by a counter, not a random draw: every round(1/fraction)-th
batch, so a job re-runs the same batches each time it runs. A mismatch (any element outside
`atol + rtol * |first|`, or NaN in one run and not the other, or a different shape or dtype) is
a `guard.alarm` record (rule `shadow-mismatch`) with the batch index, the batch's SHA-256 and
the largest difference.

A re-run in the same process, on the same device, with the same weights cannot see a weight
that is wrong in memory. So with `model=` and `checkpoint=` (the ledgered file it was loaded
from) the shadow compares every tensor of `model.state_dict()` with the ledger's record of that
checkpoint (SHA-256 per tensor) at the start and again at `close()`; a tensor that differs is a
`shadow-weights-differ` alarm naming it (and, at the end, the last batch's hash).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from inspector.core.errors import CodedError
from inspector.guard.alarm_record import append_alarm
from inspector.guard.scene import batch_hash, iter_tensors
from inspector.run.record_lookup import find_record


@dataclass
class ShadowMismatch:
    """One re-run batch whose outputs differ."""

    batch: int
    max_abs_diff: float
    detail: str


class Shadow:
    """Wraps an inference callable; calls it, and a second time on the sampled batches."""

    def __init__(self, fn: Callable[[Any], Any], run_dir: str | os.PathLike[str],
                 fraction: float = 0.01, atol: float = 0.0, rtol: float = 0.0,
                 rank: int | None = None, *, model: torch.nn.Module | None = None,
                 checkpoint: str | os.PathLike[str] | None = None) -> None:
        if not 0 < fraction <= 1:
            raise CodedError("bad-fraction", f"shadow fraction {fraction} must be in (0, 1]")
        self.fn = fn
        self.run_dir = Path(run_dir)
        self.every = max(1, round(1 / fraction))
        self.atol, self.rtol = atol, rtol
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        self.batches = 0
        self.checked = 0
        self.mismatches: list[ShadowMismatch] = []
        self.weights_differ: list[str] = []
        self.model = model
        self._last_batch: Any = None
        self._expected = _recorded_digests(checkpoint) if model is not None and checkpoint else None
        if self._expected is not None:
            self._check_weights("start")

    def __call__(self, batch: Any) -> Any:
        """The first run's output; on a sampled batch, after comparing it with a second run."""
        index = self.batches
        self.batches += 1
        self._last_batch = batch
        with torch.inference_mode():
            out = self.fn(batch)
            if index % self.every:
                return out
            again = self.fn(batch)
        self.checked += 1
        found = compare(out, again, self.atol, self.rtol)
        if found is not None:
            diff, detail = found
            self.mismatches.append(ShadowMismatch(index, diff, detail))
            append_alarm(self.run_dir, step=index, rule="shadow-mismatch", value=diff,
                         threshold=self.atol, action="warn", rank=self.rank, detail=detail,
                         batch_hash=batch_hash(batch))
        return out

    def close(self) -> None:
        """At the end of the job: compare the weights with the ledger's record once more."""
        if self._expected is not None:
            self._check_weights("end")

    def _check_weights(self, when: str) -> None:
        """A `shadow-weights-differ` alarm when a tensor differs from the ledger's record."""
        from inspector.tensors.stats import tensor_digest

        assert self._expected is not None and self.model is not None
        found = []
        for key, t in self.model.state_dict().items():
            want = _lookup(self._expected, key)
            if want is not None and tensor_digest(t.detach()) != want:
                found.append(key)
        if found:
            self.weights_differ += [k for k in found if k not in self.weights_differ]
            append_alarm(self.run_dir, step=self.batches, rule="shadow-weights-differ",
                         value=len(found), threshold=None, action="warn", rank=self.rank,
                         params=found[:8], when=when,
                         batch_hash=batch_hash(self._last_batch) if when == "end" else None)


def compare(a: Any, b: Any, atol: float = 0.0, rtol: float = 0.0) -> tuple[float, str] | None:
    """(largest difference, what differs) between two outputs' tensors, or None if they agree."""
    ta, tb = list(iter_tensors(a)), list(iter_tensors(b))
    if len(ta) != len(tb):
        return float("inf"), f"{len(ta)} output tensors, then {len(tb)}"
    worst: tuple[float, str] | None = None
    for n, (x, y) in enumerate(zip(ta, tb, strict=True)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return float("inf"), f"output {n}: {tuple(x.shape)} {x.dtype}, then " \
                                 f"{tuple(y.shape)} {y.dtype}"
        if atol == 0 and rtol == 0:
            same = bool(torch.equal(x.view(-1).view(torch.uint8), y.view(-1).view(torch.uint8))) \
                if x.is_contiguous() and y.is_contiguous() else bool(torch.equal(x, y))
            if same:
                continue
        elif torch.allclose(x.float(), y.float(), rtol=rtol, atol=atol, equal_nan=True):
            continue
        delta = (x.double() - y.double()).abs().nan_to_num(nan=float("inf"))
        diff = float(delta.max()) if delta.numel() else 0.0
        where = int(delta.argmax()) if delta.numel() else 0
        if worst is None or diff > worst[0]:
            worst = (diff, f"output {n}: element {where} differs by {diff:g}")
    return worst


def _recorded_digests(checkpoint: str | os.PathLike[str]) -> dict[str, str]:
    """Each tensor's SHA-256 in the ledger's newest record of `checkpoint`; CodedError when
    no ledger above it records it."""
    found = find_record(checkpoint)
    if found is None:
        raise CodedError("no-record", f"{checkpoint} has no ledger record in a run folder above "
                         "it; save it through inspector.ledger, or leave checkpoint= out")
    return {t.key: t.digest for f in found[1].files for t in f.tensors or () if t.digest}


def _lookup(recorded: dict[str, str], key: str) -> str | None:
    """The record's digest for a state-dict key: the same key, or one saved under a prefix
    (`{"model": model.state_dict()}` records `model.KEY`)."""
    if key in recorded:
        return recorded[key]
    hits = [v for k, v in recorded.items() if k.endswith("." + key)]
    return hits[0] if len(hits) == 1 else None
