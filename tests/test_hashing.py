"""Streaming SHA-256 and atomic writes."""

from __future__ import annotations

import hashlib
import os

import pytest

from inspector.core.atomic import OutputExistsError, atomic_write, write_bytes_atomic
from inspector.core.hashing import sha256_file
from inspector.core.progress import Cancelled, CancelToken


def test_sha256_matches_hashlib_across_chunk_boundaries(tmp_path):
    data = os.urandom(3 * 1024 + 17)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    seen = []
    digest = sha256_file(path, progress=lambda d, t: seen.append((d, t)), chunk_bytes=1024)
    assert digest == hashlib.sha256(data).hexdigest()
    assert seen[-1] == (len(data), len(data))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_sha256_cancel_stops_reading(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 10_000)
    token = CancelToken()
    calls = []

    def progress(done, total):
        calls.append(done)
        token.cancel()

    with pytest.raises(Cancelled):
        sha256_file(path, progress=progress, cancel=token, chunk_bytes=1000)
    assert calls == [1000]


def test_atomic_write_refuses_overwrite_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.bin"
    write_bytes_atomic(target, b"first")
    with pytest.raises(OutputExistsError):
        write_bytes_atomic(target, b"second")
    assert target.read_bytes() == b"first"
    write_bytes_atomic(target, b"second", overwrite=True)
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_atomic_write_failure_keeps_old_file(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_write(target, overwrite=True) as fh:
        fh.write(b"partial")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
