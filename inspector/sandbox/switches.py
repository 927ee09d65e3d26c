"""The test suite's switches: environment variables only the suite sets, read on both sides.

The host passes them into the worker's otherwise scrubbed environment (`sandbox.host.launch`);
the worker reads them per job. Kept apart from `sandbox.protocol` (which re-exports them) so
the `scan` command can start its worker before it imports anything heavier than `os`.
"""

from __future__ import annotations

from collections.abc import Mapping

SELFTEST_ENV = "CKPT_INSPECTOR_SANDBOX_SELFTEST"
"""Set only by the test suite: the worker registers an operation that unpickles with plain
`pickle`, to prove the jail contains code that escaped weights_only. The host passes it
through, and never sets it."""
DISABLE_ENV = "CKPT_INSPECTOR_SANDBOX_DISABLE"
"""Comma-separated jail layers to leave off (namespaces, pidns, proc, root, rlimits, threads,
landlock, seccomp, capabilities), so the test suite can check the level reported in a
degraded environment. Honoured only together with SELFTEST_ENV."""
PAYLOAD_ENV = "CKPT_INSPECTOR_SANDBOX_SELFTEST_PAYLOAD"
"""A pickle file the worker unpickles with plain `pickle` once jailed, before it runs its
operation, so the test suite can run hostile code inside a real job (a worker that lies about
the input or the output). Honoured only together with SELFTEST_ENV."""


def selftest(env: Mapping[str, str]) -> bool:
    """Whether `env` has the test suite's self-test switch on."""
    return env.get(SELFTEST_ENV) == "1"


def selftest_payload(env: Mapping[str, str]) -> str | None:
    """The self-test payload a worker runs before its operation (None outside the test suite)."""
    return env.get(PAYLOAD_ENV) or None if selftest(env) else None


def disabled_layers(env: Mapping[str, str]) -> frozenset[str]:
    """The jail layers a self-test environment leaves off (none outside the test suite)."""
    if not selftest(env):
        return frozenset()
    return frozenset(filter(None, env.get(DISABLE_ENV, "").split(",")))
