"""All the host and the worker share: jail levels, a job's limits and the test suite's switches.

The host (`sandbox.host`, in the user's process) and the worker (`sandbox.worker`, jailed) never
import each other; what both must agree on lives here, and nothing here imports torch or any
other module of the sandbox.

- `LEVELS`: the jail levels a handshake may report, weakest first; the host compares the
  worker's with the level the caller requires, and `hides_secrets` its guards with
  `SECRET_GUARDS` (a `partial` jail that leaves the user's files readable is refused).
- `Limits`: what one job's worker may use, with the one set of defaults. A request's `limits`
  carries fields of the record (`Limits.to_json` writes those that differ from the defaults);
  the worker reads the record back (`Limits.from_json`), so a field the request leaves out
  takes the same default on both sides.
- `SELFTEST_ENV`, `DISABLE_ENV` and `PAYLOAD_ENV`: switches only the test suite sets. The host
  passes them into the worker's otherwise scrubbed environment; the worker reads them per job.
  They live in `sandbox.switches` (re-exported here), which imports nothing heavy: the `scan`
  command starts its worker before its other imports (`sandbox.host.launch`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from inspector.core.vocabulary import JailLevel
from inspector.sandbox.switches import (  # noqa: F401 (the protocol's interface)
    DISABLE_ENV,
    PAYLOAD_ENV,
    SELFTEST_ENV,
    disabled_layers,
    selftest,
    selftest_payload,
)

LEVELS = tuple(JailLevel)
"""Jail levels from weakest to strongest."""

SECRET_GUARDS = (frozenset({"landlock"}), frozenset({"root", "proc"}))
"""Guard sets each of which keeps the user's files and the client's `/proc/PID/environ` out of
the worker's reach: Landlock (it reads only its inputs and the Python installation), or the
fresh root together with the worker's own /proc (the home folder and the client's process are
not there). Seccomp and the namespaces alone leave both readable by the same user."""


def hides_secrets(active: Iterable[str]) -> bool:
    """Whether a handshake's `active` guards (`name:detail` strings) include a whole set of
    `SECRET_GUARDS`."""
    names = {str(a).split(":")[0] for a in active}
    return any(guards <= names for guards in SECRET_GUARDS)


GPU_MEMORY_MB = 1 << 30
"""The memory allowance of a job on a CUDA device (`Limits.on_gpu`): CUDA reserves virtual
address space far beyond what it uses, so an address-space limit sized for CPU work makes its
initialisation fail."""


def default_max_threads() -> int:
    """Threads a worker may have: torch's intra-op, inter-op and OpenMP pools (one thread per
    core each) plus the operation's own, with room to spare."""
    return 64 + 3 * (os.cpu_count() or 1)


@dataclass(frozen=True)
class Limits:
    """What one job's worker may use; the jail enforces each (`sandbox.worker.jail`)."""

    cpu_seconds: int = 600
    """RLIMIT_CPU; operations on a checkpoint scale it to its size (`for_input`)."""
    memory_mb: int = 4096
    """The address-space allowance; the worker adds the bytes of the files it maps."""
    open_files: int = 256
    nice: int = 0
    """How much lower than its caller the job is scheduled; an interactive caller (the GUI)
    asks for this so its UI thread wins the cores while the job computes."""
    max_threads: int | None = None
    """Threads the worker's processes may have together; None: `default_max_threads()`."""
    torch_threads: int | None = None
    """The job's compute threads; None: every core. The host sends the job's share of the
    cores (`sandbox.host.parallel.job_threads`)."""

    @classmethod
    def for_input(cls, size: int) -> Limits:
        """The defaults scaled to a checkpoint of `size` bytes: two CPU minutes plus one per GiB."""
        return cls(cpu_seconds=120 + 60 * (size >> 30))

    @classmethod
    def from_json(cls, limits: Mapping[str, Any]) -> Limits:
        """The record a request's `limits` stand for: each field it gives, else the default."""
        return cls(**{f.name: int(limits[f.name]) for f in fields(cls)
                      if limits.get(f.name) is not None})

    def to_json(self) -> dict[str, int]:
        """The fields that differ from the defaults: what a request's `limits` carries."""
        default = Limits()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}

    def on_gpu(self) -> Limits:
        """These limits for a job on a CUDA device: the memory allowance `GPU_MEMORY_MB`."""
        return replace(self, memory_mb=GPU_MEMORY_MB)

    def allowance(self, mapped_bytes: int) -> str:
        """The memory allowance in words, as the jail applies it (`memory_mb` plus the bytes
        of the files the job maps): what a job that ran out of memory is told."""
        return f"{self.memory_mb} MB plus {mapped_bytes >> 20} MB of mapped files"

    def thread_cap(self) -> int:
        """The most threads the worker's processes may have together."""
        return self.max_threads or default_max_threads()

    def compute_threads(self) -> int:
        """torch's compute threads for the job (at least one)."""
        return max(1, self.torch_threads or os.cpu_count() or 1)
