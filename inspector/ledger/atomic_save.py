"""`save(obj, path)`: a checkpoint file written atomically, proven on disk, then ledgered.

The order is what makes a crash at any moment harmless:
1. check the disk has room (nothing written yet);
2. write a temp file in the target's folder (`.NAME.HOST-PID.XXXX.tmp`, never ledgered; one a
   dead process of this host left is cleared first, `ledger.strays`), fsync it, while the
   tensors in memory are digested on a second thread;
3. re-read the temp file as `verify` would and compare every tensor with memory; the file's
   SHA-256 was taken while torch.save wrote it (a safetensors file is hashed on a second thread
   during the re-read);
4. rename it over the target and fsync the folder; only now can a reader see it;
5. append the `ledger.save` record (fsync'd), then rotate older ones (`keep`).
Before 1, the health check (`ledger.health`) runs on the state in memory: a state that fails
it is still written and proven, but renamed to `NAME.unhealthy.SUFFIX` and recorded `unhealthy`
(the previous checkpoint at the target stays), so no resume lands on it.
A kill before 4 leaves the previous checkpoint untouched beside a stray temp file; a kill
between 4 and 5 leaves a checkpoint without a record, which `latest_valid` never returns.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from inspector.core.atomic import current_umask, fsync_path
from inspector.core.errors import CodedError
from inspector.core.vocabulary import SaveOutcome
from inspector.integrity.hashing import sha256_file
from inspector.integrity.manifest import FileEntry
from inspector.ledger.digests import differences, disk_digests, expected_bytes, memory_digests
from inspector.ledger.health import evidence_path, health_problems, say_unhealthy, unhealthy_detail
from inspector.ledger.record import append_save, relative
from inspector.ledger.rotate import rotate
from inspector.ledger.space import check_space, disk_full
from inspector.ledger.strays import clear_strays, temp_tag
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
    problems = health_problems(obj, run)
    target = evidence_path(asked) if problems else asked
    target.parent.mkdir(parents=True, exist_ok=True)
    as_safetensors = target.suffix == ".safetensors"
    check_space(target.parent, expected_bytes(obj))
    # hashlib lets go of the GIL: memory is digested on a thread while the file is written
    memory = ThreadPoolExecutor(1, thread_name_prefix="ledger-memory-sha256")
    expected = memory.submit(memory_digests, obj)
    rel = relative(target, run)
    clear_strays(target.parent)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.{temp_tag()}.", suffix=".tmp",
                                    dir=target.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        try:
            written_sha = _write(obj, fd, tmp, as_safetensors, metadata)
        except Exception as exc:
            full = disk_full(exc, target.parent)
            if full is not None:
                raise full from exc
            raise
        entry, outcome, detail = _prove(tmp, rel, expected.result(), allow_globals,
                                        written_sha)
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
        memory.shutdown(cancel_futures=True)
    fsync_path(target.parent)
    if problems and outcome == SaveOutcome.VERIFIED:
        outcome, detail = SaveOutcome.UNHEALTHY, unhealthy_detail(problems)
        say_unhealthy(asked, target, detail)
    record = append_save(run, target, layout="file", fmt=entry.format,
                         writer=_writer(writer, as_safetensors), files=[entry],
                         outcome=outcome, detail=detail, step=step, epoch=epoch)
    if keep is not None and not problems:
        rotate(run, record, keep)
    return record


def _done(value: str) -> Future:
    """A future that already holds `value`."""
    future: Future = Future()
    future.set_result(value)
    return future


def _writer(name: str | None, as_safetensors: bool) -> str:
    return name or ("safetensors" if as_safetensors else "torch.save")


def _write(obj: Any, fd: int, tmp: Path, as_safetensors: bool,
           metadata: dict[str, str] | None) -> str | None:
    """Write the checkpoint into the open temp file and make its bytes durable; the SHA-256
    of the bytes written when they passed through us (torch.save), else None."""
    with os.fdopen(fd, "wb") as fh:
        if as_safetensors:
            from safetensors.torch import save_file

            save_file(obj, str(tmp), metadata=metadata)
            sha = None
        else:
            import torch

            writer = _HashingWriter(fh)
            torch.save(obj, writer)
            fh.flush()
            sha = writer.digest.hexdigest()
        os.fsync(fh.fileno())
    return sha


class _HashingWriter:
    """A write-only file that hashes what passes through it on the way to the real one, so the
    file's SHA-256 costs no second read (torch.save writes its archive front to back)."""

    def __init__(self, fh: Any) -> None:
        self.fh = fh
        self.digest = hashlib.sha256()

    def write(self, data: Any) -> int:
        """Hash, then write."""
        self.digest.update(data)
        return self.fh.write(data)

    def flush(self) -> None:
        """Flush the real file."""
        self.fh.flush()


def _prove(tmp: Path, rel: str, expected: list, allow_globals: tuple[str, ...],
           written_sha: str | None = None) -> tuple[FileEntry, SaveOutcome, str | None]:
    """Re-read the written file: its manifest entry, and whether every tensor matched memory;
    the file's SHA-256 is the one taken while writing, or read on a second thread."""
    size = tmp.stat().st_size
    with ThreadPoolExecutor(1, thread_name_prefix="ledger-sha256") as pool:
        file_hash = (_done(written_sha) if written_sha is not None
                     else pool.submit(sha256_file, tmp))
        try:
            fmt, on_disk = disk_digests(tmp, allow_globals)
        except CodedError as exc:
            sha = file_hash.result()
            return (FileEntry(rel, sha, size, None, None), SaveOutcome.UNVERIFIED,
                    f"re-read failed: {exc.message}")
        sha = file_hash.result()
    entry = FileEntry(rel, sha, size, fmt, on_disk)
    bad = differences(expected, on_disk, rel)
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        return entry, SaveOutcome.MISMATCH, f"on disk, tensor {shown} differs from memory"
    return entry, SaveOutcome.VERIFIED, None
