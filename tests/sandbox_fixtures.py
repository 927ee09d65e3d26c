"""Fixtures of the sandbox tests, loaded with `pytest_plugins = ("sandbox_fixtures",)`."""

from __future__ import annotations

import hashlib
import os
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


def sandbox_processes() -> list[int]:
    """Live sandbox processes this test process started: fork servers and cold workers (its
    children) and forked workers (their children)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if fields[0] != "Z" and b"inspector.sandbox." in cmdline:
                parents[int(entry.name)] = int(fields[1])
    ours = {pid for pid, parent in parents.items() if parent == os.getpid()}
    return sorted(ours | {pid for pid, parent in parents.items() if parent in ours})
