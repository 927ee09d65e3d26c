"""Fixtures that route jobs through one warm fork server, loaded with
`pytest_plugins = ("forkserver_fixtures",)`."""

from __future__ import annotations

import pytest

from inspector.sandbox.host import client, launch
from inspector.sandbox.host.forkclient import ForkServer


@pytest.fixture(scope="module")
def fork_server_handle():
    """One fork server per test module (each job still gets its own freshly jailed child); it
    never outlives the module, so later tests that count sandbox processes see none of it."""
    server = ForkServer().start(client.worker_env())
    yield server
    server.close()


@pytest.fixture
def forked(fork_server_handle, monkeypatch):
    """Within the test, run_job forks its workers from the warm server."""
    monkeypatch.setattr(launch, "_fork_server", fork_server_handle)
    return fork_server_handle
