"""A worker's error is a claim too: the code it ends a job with chooses the exit status, what
the output says and what the app offers to allow, so each code is held against what this
process knows without the worker: the request, the static scan (which runs none of the input)
and the input's tensors located here (`expected`). A code these facts refute is
`claim_refuted`; one they cannot speak to says it is the jailed loader's word.

Which codes each operation may end with at all is `jobs.WORKER_CODES`."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence

from inspector.core.termtext import escape
from inspector.layout.torch_save import NotCovered
from inspector.sandbox.host.claims.conversion import Asked, input_collides, safetensors_code
from inspector.sandbox.host.claims.expected import Expected
from inspector.sandbox.host.jobs import REFUTED, SandboxError
from inspector.scan.pickles.policy import weights_only_rules
from inspector.scan.pickles.presets import allow_flags
from inspector.scan.result import ScanResult

_KEY_CODES = frozenset({"key_not_found", "not_tensor_mapping"})
"""What a `--key` selection alone can fail with (`sandbox.worker.convert.select_leaves`)."""


def _refuted(exc: SandboxError, why: str) -> SandboxError:
    return SandboxError(REFUTED, f"the jailed loader ended with {exc.code}, yet {why}, so none "
                        f"of its answer is trusted: {exc.message}", sandbox=exc.sandbox,
                        stderr=exc.stderr)


def _loaders_word(exc: SandboxError, reason: str) -> SandboxError:
    return SandboxError(exc.code, f"{exc.message} (as reported by the jailed loader; not "
                        f"checked here: {reason})", exc.globals, exc.sandbox, exc.stderr)


def checked_refusal(exc: SandboxError, scans: Sequence[ScanResult],
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


def checked_convert_error(exc: SandboxError, expected: Expected, asked: Asked) -> SandboxError:
    """A conversion's error code, held against what was asked (`asked`) and the input's
    tensors located here: a --key failure needs a --key; a name clash needs a selection or two
    of the input's leaves under one name (its pickle walked here); tensors with no
    safetensors form need a dtype safetensors cannot hold, and no --skip-unsupported."""
    if exc.code in _KEY_CODES and not asked.key:
        return _refuted(exc, "no --key was given")
    if exc.code not in ("key_collision", "unsupported_tensors"):
        return exc
    located = expected.located()
    if isinstance(located, str):
        return _loaders_word(exc, located)
    tensors = located.tensors
    if exc.code == "unsupported_tensors":
        if asked.skip_unsupported:
            return _refuted(exc, "--skip-unsupported was given")
        # a --key selection holds a subset of the file's tensors: none beyond these dtypes
        if all(safetensors_code(t.dtype) is not None for t in tensors):
            return _refuted(exc, "every tensor of the input has a safetensors dtype")
        return exc
    if asked.key or asked.strip_prefix:
        return exc
    try:
        collides = input_collides(expected.path, located.format)
    except (NotCovered, OSError, ValueError) as err:
        return _loaders_word(exc, f"the input's names could not be read here ({err})")
    return exc if collides else _refuted(exc, "no two of the input's values share a name")
