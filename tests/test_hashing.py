"""Streaming SHA-256 and atomic writes."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from inspector.core.atomic import OutputExistsError, atomic_write, write_bytes_atomic
from inspector.core.progress import Cancelled, CancelToken
from inspector.integrity import hashing
from inspector.integrity.hashing import ByteProgress, HashAhead, sha256_file


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


def _files(folder, sizes):
    paths = []
    for i, size in enumerate(sizes):
        path = folder / f"f{i}.bin"
        path.write_bytes(os.urandom(size))
        paths.append(path)
    return paths


def test_hash_ahead_gives_each_files_hash_and_progress_over_all(tmp_path):
    paths = _files(tmp_path, [200_000, 0, 70_001, 5, 300_000])
    seen = []
    total = sum(p.stat().st_size for p in paths)
    track = ByteProgress(lambda done, whole: seen.append((done, whole)), total)
    with HashAhead(paths, track, threads=3) as ahead:
        got = [ahead.get(p) for p in reversed(paths)]
    assert got == [hashlib.sha256(p.read_bytes()).hexdigest() for p in reversed(paths)]
    assert seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_hash_ahead_hashes_files_at_once(tmp_path, monkeypatch):
    # each hash waits until a second one is running: one thread at a time would break the
    # barrier (after its timeout) instead of finishing
    paths = _files(tmp_path, [10, 20, 30, 40])
    barrier = threading.Barrier(2, timeout=60)
    real = hashing.sha256_file

    def meeting(path, progress=None, cancel=None):
        barrier.wait()
        return real(path, progress, cancel)

    monkeypatch.setattr(hashing, "sha256_file", meeting)
    with HashAhead(paths, threads=2) as ahead:
        assert [ahead.get(p) for p in paths] == [real(p) for p in paths]


def test_hash_ahead_raises_a_files_failure_for_that_file_only(tmp_path):
    good = _files(tmp_path, [1000])[0]
    gone = tmp_path / "gone.bin"
    with HashAhead([gone, good], threads=2) as ahead:
        with pytest.raises(FileNotFoundError):
            ahead.get(gone)
        assert ahead.get(good) == hashlib.sha256(good.read_bytes()).hexdigest()


def test_hash_ahead_stops_when_cancelled(tmp_path):
    paths = _files(tmp_path, [4_000_000] * 3)
    token = CancelToken()
    token.cancel()
    with HashAhead(paths, cancel=token, threads=2) as ahead, pytest.raises(Cancelled):
        ahead.get(paths[0])


def test_hash_ahead_hashes_a_path_it_was_not_given(tmp_path):
    one, other = _files(tmp_path, [10, 20])
    with HashAhead([one], threads=1) as ahead:
        assert ahead.get(other) == hashlib.sha256(other.read_bytes()).hexdigest()


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
