"""Test-only operation `selftest-payload`: unpickle with the plain `pickle` module in the jail.

It exists so the test suite can prove what happens when code escapes weights_only: the worker
registers it only when CKPT_INSPECTOR_SANDBOX_SELFTEST=1 (`sandbox.protocol.SELFTEST_ENV`; see
worker.OPS; the client passes that switch on only when its own environment has it, and never
sets it). Each file of the request's `paths` is unpickled in turn, exactly as an unsafe loader
would, and what it returned or raised is reported, so a test can assert that creating files,
opening sockets and starting processes all failed inside the jail. It is the documented way to
probe the jail from outside the test suite too: tests/test_jail_probes.py shows how (one probe
per file, many per worker).

`run_prelude` is the same hook for the other operations: the pickle named by
`protocol.PAYLOAD_ENV` is unpickled once the worker is jailed and its operation imported, so its
code can change what a real `inspect` or `convert` reports (tests/test_worker_lies.py: the
client must catch every such lie).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable

from inspector.core.progress import CancelToken
from inspector.sandbox.protocol import selftest_payload

REPR_LIMIT = 300


def run_payload(request: dict, emit: Callable[[dict], None], cancel: CancelToken) -> dict:
    """Unpickle each file of request["paths"] (unsafely, on purpose); report each outcome."""
    outcomes = []
    for n, path in enumerate(request["paths"], 1):
        cancel.check()
        try:
            with open(path, "rb") as fh:
                value = pickle.load(fh)  # unsafe on purpose: this is what the jail contains
            outcomes.append({"ok": True, "value": repr(value)[:REPR_LIMIT]})
        except (Exception, MemoryError) as exc:  # the payload's failure is the result
            outcomes.append({"ok": False, "error": type(exc).__name__,
                             "errno": getattr(exc, "errno", None),
                             "message": str(exc)[:REPR_LIMIT]})
        emit({"type": "progress", "stage": "payload", "done": n, "total": len(request["paths"])})
    return {"outcomes": outcomes}


def run_prelude() -> None:
    """Unpickle the self-test payload (`protocol.PAYLOAD_ENV`), if any, inside the jail."""
    path = selftest_payload(os.environ)
    if path:
        with open(path, "rb") as fh:
            pickle.load(fh)  # unsafe on purpose: hostile code inside a real job
