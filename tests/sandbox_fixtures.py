"""Fixtures of the sandbox tests, loaded with `pytest_plugins = ("sandbox_fixtures",)`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest


@pytest.fixture
def unchanged():
    """Register input files; after the test their bytes and mtime must be exactly as before."""
    seen: list[tuple[Path, str, int]] = []

    def track(path: Path) -> Path:
        seen.append((path, hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns))
        return path

    yield track
    for path, digest, mtime in seen:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, f"{path} was modified"
        assert path.stat().st_mtime_ns == mtime, f"{path} mtime changed"
