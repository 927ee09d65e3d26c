"""A worker's error is a claim too: the code it ends a job with chooses the exit status, what
the output says ("corrupt", "cannot allow ...") and what the app offers to allow, so each code
is held against what this process knows without the worker, by one checker for every
operation (`checked_error`): the request (`Facts`: the globals allowed, what a conversion
asked), the static scan of each input (which runs none of it) and each input's header and
tensors located here (`rawtensors.open_raw`). A code these facts refute is `claim_refuted`;
one they confirm is told in this process's words where it has them; one they cannot speak to
says it is the jailed loader's word.

Which codes each operation may end with at all is `jobs.WORKER_CODES`."""

from __future__ import annotations

import mmap
import os
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from inspector.core.termtext import escape
from inspector.formats.safetensors_header import read_header, recorded_aliases, recorded_specs
from inspector.layout.torch_save import NotCovered
from inspector.layout.torchscript import CODE_ARCHIVES, describe_code_archive
from inspector.rawtensors.readers import NotReadable, open_raw
from inspector.sandbox.host.claims.conversion import Asked, input_collides, safetensors_code
from inspector.sandbox.host.jobs import REFUTED, SandboxError
from inspector.scan.dcp_folder import FORMAT as DCP
from inspector.scan.pickles.policy import weights_only_rules
from inspector.scan.pickles.presets import allow_flags
from inspector.scan.result import ScanResult

_KEY_CODES = frozenset({"key_not_found", "not_tensor_mapping"})
"""What a `--key` selection alone can fail with (`sandbox.worker.convert.select_leaves`)."""
_SPEC = "::spec"
"""The part an encoded tensor's rebuild spec is read as (`tensors.sources.SPEC_PART`)."""
_PICKLES = ("pytorch-zip", "pytorch-legacy")


@dataclass(frozen=True)
class Facts:
    """What this process knows of a job without its worker: the static scan of each input
    (its path and format), the globals the request allowed, and, for a conversion, what was
    asked (`asked`; None for the other operations)."""

    scans: Sequence[ScanResult]
    allowed: tuple[str, ...] = ()
    asked: Asked | None = None


def _refuted(exc: SandboxError, why: str) -> SandboxError:
    return SandboxError(REFUTED, f"the jailed loader ended with {exc.code}, yet {why}, so none "
                        f"of its answer is trusted: {exc.message}", sandbox=exc.sandbox,
                        stderr=exc.stderr)


def _loaders_word(exc: SandboxError, reason: str) -> SandboxError:
    return SandboxError(exc.code, f"{exc.message} (as reported by the jailed loader; not "
                        f"checked here: {reason})", exc.globals, exc.sandbox, exc.stderr)


def _ours(exc: SandboxError, message: str) -> SandboxError:
    """A code confirmed here, told in this process's own words, not the worker's."""
    return SandboxError(exc.code, message, exc.globals, exc.sandbox, exc.stderr)


def checked_error(exc: SandboxError, facts: Facts) -> SandboxError:
    """Any operation's error code, held against `facts`: a weights_only refusal against the
    scans (`_checked_refusal`), and each code this process has facts for by its own check
    (`_CHECKS`); the other codes (a load that failed, the worker's limits, a cancel) say
    nothing about the input that a view shows as a finding."""
    exc = _checked_refusal(exc, facts.scans, facts.allowed)
    check = _CHECKS.get(exc.code)
    return exc if check is None else check(exc, facts)


def _checked_refusal(exc: SandboxError, scans: Sequence[ScanResult],
                    allowed: Iterable[str]) -> SandboxError:
    """A `weights_only_refused` answer (any operation that loads), held against the static
    scans of its inputs: refuted when every scan says torch.load(weights_only=True) loads its
    file, or when it names a global no input imports; the globals it offers for allowing are
    only those of the inputs torch's allowlist refuses (and not allowed already)."""
    if exc.code != "weights_only_refused" or not scans:
        return exc
    if all(scan.weights_only_ok for scan in scans):
        return _refuted(exc, "the static scan finds nothing torch.load(weights_only=True) "
                             "refuses in the file")
    rules = weights_only_rules()  # the allowlist the scans judged by
    imported = {f"{g.module}.{g.name}": g.module for scan in scans for g in scan.globals}
    strange = [str(g) for g in exc.globals if g not in imported]
    if strange:
        return _refuted(exc, f"the file imports no {escape(strange[0][:120])}")
    blocking = {key for key, module in imported.items()
                if key not in rules.allowed or module in rules.blocked_modules}
    done = set(allowed)
    offered = [g for g in dict.fromkeys(exc.globals) if g in blocking and g not in done]
    if offered == list(exc.globals):
        return exc
    message = (f"weights_only refused globals: {', '.join(offered)}; if you trust them, add: "
               f"{shlex.join(allow_flags(offered))}" if offered
               else f"weights_only refused the file ({exc.message})")
    return SandboxError(exc.code, message, offered, exc.sandbox, exc.stderr)


def _bad_safetensors(exc: SandboxError, facts: Facts) -> SandboxError:
    """A safetensors header the loader refuses: this process reads each safetensors input's
    header whole (`read_header`), so the refusal is its own or the claim is false."""
    inputs = [scan.path for scan in facts.scans if scan.format == "safetensors"]
    if not inputs:
        return _refuted(exc, "no input is a safetensors file")
    for path in inputs:
        with open(path, "rb") as fh:
            refusal = read_header(fh, os.fstat(fh.fileno()).st_size).refusal()
        if refusal is not None:
            return _ours(exc, f"{path}: {refusal}")
    return _refuted(exc, "every safetensors input's header reads whole here")


def _bad_allowed_global(exc: SandboxError, facts: Facts) -> SandboxError:
    """A global the request allowed that the loader cannot import: only an allowed one can be
    (whether it imports is known only by importing its module, which is left to the jail)."""
    if not facts.allowed:
        return _refuted(exc, "no global was allowed")
    return _loaders_word(exc, "whether an allowed name imports is known only by importing it")


def _not_covered(exc: SandboxError, facts: Facts) -> SandboxError:
    """A TorchScript or torch.export archive whose records the static parser does not all
    understand: that parser runs here too (`describe_code_archive`), so its answer is this
    process's, and any other input is never read by it."""
    archives = [scan for scan in facts.scans if scan.format in CODE_ARCHIVES]
    if not archives:
        return _refuted(exc, "no input is a TorchScript or torch.export archive")
    for scan in archives:
        with open(scan.path, "rb") as fh, mmap.mmap(fh.fileno(), 0,
                                                    access=mmap.ACCESS_READ) as mm:
            try:
                describe_code_archive(mm, scan.format)
            except NotCovered as why:
                return _ours(exc, f"{scan.path}: {scan.format} archive not read (its code is "
                                  f"never run, so its weights are read only from records fully "
                                  f"understood): {why}")
    return _refuted(exc, "every archive's records are read here")


def _unsupported_tensors(exc: SandboxError, facts: Facts) -> SandboxError:
    """Tensors the operation cannot handle: a DCP folder's transforms (any operation, not read
    here) or, for a conversion without --skip-unsupported, a dtype safetensors cannot hold
    among the input's tensors located here."""
    asked = facts.asked
    if asked is not None and asked.skip_unsupported:
        return _refuted(exc, "--skip-unsupported was given")
    if any(scan.format == DCP for scan in facts.scans):
        return _loaders_word(exc, "a DCP folder's transforms are read only by the jailed loader")
    if asked is None:
        return _refuted(exc, "only a DCP folder's transforms are unsupported here, and no "
                             "input is one")
    for scan in facts.scans:
        try:
            tensors = open_raw(scan.path).tensors
        except (NotReadable, OSError, ValueError) as why:
            return _loaders_word(exc, str(why))
        # a --key selection holds a subset of the file's tensors: none beyond these dtypes
        if any(safetensors_code(t.dtype) is None for t in tensors):
            return exc
    return _refuted(exc, "every tensor of the input has a safetensors dtype")


def _key_collision(exc: SandboxError, facts: Facts) -> SandboxError:
    """Two values under one name: what each input can give (`_collides`); a conversion's
    --key or --strip-prefix selection is made only by the jailed loader."""
    asked = facts.asked
    if asked is not None and (asked.key or asked.strip_prefix):
        return _loaders_word(exc, "a selection's names are made only by the jailed loader")
    for scan in facts.scans:
        try:
            if _collides(Path(scan.path), scan.format, converting=asked is not None):
                return exc
        except (NotReadable, NotCovered, OSError, ValueError) as why:
            return _loaders_word(exc, f"the input's names could not be read here ({why})")
    return _refuted(exc, "no two of the input's values share a name")


def _collides(path: Path, fmt: str, converting: bool) -> bool:
    """Whether two values of one input take one name: a safetensors rebuild spec's part
    (`KEY::spec`) beside a tensor of that name; in a torch pickle (every leaf located here,
    so no quantized or sparse tensor is split into parts) two leaves flattened to one name,
    which only a conversion refuses. NotReadable or NotCovered where it cannot be told."""
    if fmt == "safetensors":
        with open(path, "rb") as fh:
            header = read_header(fh, os.fstat(fh.fileno()).st_size)
        taken = {e.key for e in header.entries} | set(recorded_aliases(header.metadata))
        return any(key + _SPEC in taken for key in recorded_specs(header.metadata))
    if fmt in _PICKLES or fmt in CODE_ARCHIVES:
        open_raw(path)  # every leaf a dense tensor or a plain value, or NotReadable
        return converting and fmt in _PICKLES and input_collides(path, fmt)
    raise NotCovered(f"a {fmt} input's names are read only by the jailed loader")


def _load_failed(exc: SandboxError, facts: Facts) -> SandboxError:
    """A load that failed: why is known only by loading the file, which runs it, so its
    message (free text: "corrupt", "tampered") is the loader's word."""
    return _loaders_word(exc, "only loading the file shows why it fails")


def _key_selection(exc: SandboxError, facts: Facts) -> SandboxError:
    """A --key selection's failure, which needs a --key."""
    if facts.asked is None or not facts.asked.key:
        return _refuted(exc, "no --key was given")
    return exc


_CHECKS: dict[str, Callable[[SandboxError, Facts], SandboxError]] = {
    "bad_safetensors": _bad_safetensors,
    "bad_allowed_global": _bad_allowed_global,
    "not_covered": _not_covered,
    "unsupported_tensors": _unsupported_tensors,
    "key_collision": _key_collision,
    "load_failed": _load_failed,
    **dict.fromkeys(_KEY_CODES, _key_selection),
}
"""Each code this process holds against its own facts, whatever the operation."""
