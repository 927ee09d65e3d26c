"""`save(obj, path)`: a checkpoint file written atomically, proven on disk, then ledgered.

The order is what makes a crash at any moment harmless:
1. check the disk has room (nothing written yet);
2. write a temp file in the target's folder (`.NAME.HOST-PID.XXXX.tmp`, never ledgered; one a
   dead process of this host left is cleared first, `ledger.strays`) and fsync it, on a
   thread, while 3 runs (both end before 4);
3. re-read the temp file once, as `verify` would: every tensor's bytes are compared with the
   same tensor in memory (`digests.proven_digests`). The file's SHA-256 is read back on
   another thread from the pages torch.save has written so far, during 2 (`tee.FileFollower`;
   a safetensors file: after it). Reading back is what catches bytes that landed wrong, so it
   is kept. Each tensor's SHA-256 for the record was taken during 2, in memory, on a third
   thread, right after torch.save wrote its storage (`tee`; the compare is what proves it is
   the disk's); a tensor torch did not write straight from memory (on a GPU, quantized parts,
   a safetensors file) is hashed from disk in the re-read's pass. So the proof costs one
   SHA-256 of the bytes and a compare more than the floor (write, fsync, re-read, SHA-256),
   both SHA-256s beside the write on other threads;
4. rename it over the target and fsync the folder; only now can a reader see it;
5. append the `ledger.save` record (fsync'd), then rotate older ones (`keep`).
Before 1, the guard's checks for the run (`run.health_gate`) and the journaled optimizer settings
are asked (`ledger.health.run_problems`); the state's own
checks in memory (`ledger.health`: NaN, optimizer moments) run on the digests' thread during 2,
before the re-read needs the verdict. A state that fails either is still written and proven,
but renamed to `NAME.SUFFIX.unhealthy` and recorded `unhealthy` (the previous checkpoint at the
target stays), so no resume lands on it; a file whose re-read proved nothing (`unverified`)
is placed as `NAME.SUFFIX.unverified` for the same reason.
A kill before 4 leaves the previous checkpoint untouched beside a stray temp file; a kill
between 4 and 5 leaves a checkpoint without a record, which `latest_valid` never returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from inspector.core.atomic import current_umask, fsync_path
from inspector.core.errors import CodedError
from inspector.core.vocabulary import SaveOutcome
from inspector.integrity.hashing import sha256_file
from inspector.integrity.manifest import FileEntry
from inspector.ledger.digests import expected_bytes, memory_tensors, proven_digests
from inspector.ledger.health import (
    evidence_path,
    run_problems,
    say_unhealthy,
    state_problems,
    unhealthy_detail,
)
from inspector.ledger.record import append_save, relative
from inspector.ledger.rotate import rotate
from inspector.ledger.space import check_space, disk_full
from inspector.ledger.strays import clear_strays, temp_tag
from inspector.ledger.tee import DigestingWriter, FileFollower
from inspector.run.checkpoints import LedgerError, SaveRecord


def save(
    obj: Any,
    path: str | os.PathLike[str],
    *,
    step: int | None = None,
    epoch: float | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    keep: int | None = None,
    metadata: dict[str, str] | None = None,
    writer: str | None = None,
    allow_globals: tuple[str, ...] = (),
) -> SaveRecord:
    """Save `obj` (torch.save; safetensors for a `.safetensors` path), prove it, ledger it.

    The re-read loads a pickle with weights_only=True; `allow_globals` admits the classes a
    trainer pickles beside the tensors (`scan.pickles.presets`, e.g. Lightning's)."""
    asked = Path(path)
    run = Path(run_dir) if run_dir is not None else asked.parent
    gate = run_problems(obj, run)
    folder = asked.parent  # the evidence name's too
    folder.mkdir(parents=True, exist_ok=True)
    as_safetensors = asked.suffix == ".safetensors"
    check_space(folder, expected_bytes(obj))
    clear_strays(folder)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{asked.name}.{temp_tag()}.", suffix=".tmp",
                                    dir=folder)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        try:
            # the state's checks, then the tensors' digests, run on one thread while torch.save
            # writes; the disk takes the bytes while they are read back from the page cache
            # (what the re-read reads before or after an fsync alike); nothing is renamed
            # until all end
            with ThreadPoolExecutor(1, thread_name_prefix="ledger-digest") as hashing, \
                    ThreadPoolExecutor(2, thread_name_prefix="ledger") as pool:
                own = hashing.submit(state_problems, obj)
                known, file_hash = _write(obj, fd, tmp, as_safetensors, metadata, hashing, pool)
                problems = own.result() + gate
                target = evidence_path(asked) if problems else asked
                rel = relative(target, run)
                durable = pool.submit(os.fsync, fd)
                entry, outcome, detail = _prove(tmp, rel, obj, allow_globals, file_hash, known)
                durable.result()
            if outcome == SaveOutcome.UNVERIFIED and target == asked:
                # bytes nothing proved never take the name a trainer's resume picks
                target = evidence_path(asked, outcome)
                entry = dataclasses.replace(entry, path=relative(target, run))
        except Exception as exc:
            full = disk_full(exc, folder)
            if full is not None:
                raise full from exc
            raise
        if outcome == SaveOutcome.MISMATCH:
            append_save(run, target, layout="file", fmt=entry.format, writer=_writer(writer,
                        as_safetensors), files=[entry], outcome=outcome, detail=detail,
                        step=step, epoch=epoch)
            raise LedgerError("save_mismatch", f"{target}: {detail}; the file was not put in "
                              "place and the previous checkpoint is kept: check the machine's "
                              "memory and disk (`ckpt-inspector report`)")
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    finally:
        os.close(fd)
    fsync_path(folder)
    if problems and outcome == SaveOutcome.VERIFIED:
        outcome, detail = SaveOutcome.UNHEALTHY, unhealthy_detail(problems)
    if target != asked:
        say_unhealthy(asked, target, detail or str(outcome))
    record = append_save(run, target, layout="file", fmt=entry.format,
                         writer=_writer(writer, as_safetensors), files=[entry],
                         outcome=outcome, detail=detail, step=step, epoch=epoch)
    if keep is not None and not problems:
        rotate(run, record, keep)
    return record


def _writer(name: str | None, as_safetensors: bool) -> str:
    return name or ("safetensors" if as_safetensors else "torch.save")


def _write(obj: Any, fd: int, tmp: Path, as_safetensors: bool, metadata: dict[str, str] | None,
           hashing: Executor, pool: Executor) -> tuple[dict[str, Future[str]], Future[str]]:
    """Write the checkpoint into the temp file; `fd` stays open, to fsync (it was opened
    before any byte was written, so its fsync reports every write-back error since). Return
    the digests of the tensors hashed on `hashing` as torch.save wrote them, and the file's
    SHA-256, read back on `pool` as it was written (`tee`)."""
    if as_safetensors:
        from safetensors.torch import save_file

        save_file(obj, str(tmp), metadata=metadata)
        return {}, pool.submit(sha256_file, tmp)
    import torch

    follower = FileFollower(tmp)
    file_hash = pool.submit(follower.run)
    try:
        with os.fdopen(fd, "wb", closefd=False) as fh:
            tee = DigestingWriter(fh, memory_tensors(obj), hashing, follower.reached)
            torch.save(obj, tee)
    finally:
        follower.finish(os.fstat(fd).st_size)
    return tee.digests, file_hash


def _prove(tmp: Path, rel: str, obj: Any, allow_globals: tuple[str, ...],
           file_hash: Future[str], known: dict[str, Future[str]]
           ) -> tuple[FileEntry, SaveOutcome, str | None]:
    """Re-read the written file once: its manifest entry, and whether every tensor matched
    memory (those in `known` are compared, not hashed again); `file_hash` is the file's
    SHA-256, read back on a thread (hashlib lets go of the GIL)."""
    size = tmp.stat().st_size
    try:
        fmt, on_disk, bad = proven_digests(tmp, obj, allow_globals, known)
    except CodedError as exc:
        return (FileEntry(rel, file_hash.result(), size, None, None), SaveOutcome.UNVERIFIED,
                f"re-read failed: {exc.message}")
    sha = file_hash.result()
    entry = FileEntry(rel, sha, size, fmt, on_disk)
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        return entry, SaveOutcome.MISMATCH, f"on disk, tensor {shown} differs from memory"
    return entry, SaveOutcome.VERIFIED, None
