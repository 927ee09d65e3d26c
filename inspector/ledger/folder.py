"""Folder checkpoints: `save_pretrained`, `torch.distributed.checkpoint.save`, a trainer's
`checkpoint-N` folder, each written (or found) whole, proven and ledgered as one record.

`save_folder(write, folder)` lets `write(tmp)` fill a temp folder beside the target, fsyncs
every file and the folder, re-reads it, then renames it into place; `record_folder(folder)`
ledgers a folder a trainer already wrote. Each file gets its manifest entry (size, SHA-256,
format, and the tensors of every checkpoint file); the tensors found are compared with the
in-memory state dict when one is given (a writer may drop tied names or add files of its own,
so only tensors present on both sides must agree). A DCP folder is read whole, as `verify`
reads it. `save_dcp` follows DCP's rank-0 rule: every rank writes its part, rank 0 alone
renames, proves and ledgers, and the ranks meet at a barrier before and after. A folder whose
state fails the health check (`ledger.health`) is placed as `NAME.unhealthy` and recorded
`unhealthy` (a folder a trainer wrote is renamed so, out of its own `checkpoint-N` pattern).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from inspector.core.atomic import fsync_path
from inspector.core.errors import CodedError
from inspector.core.vocabulary import Format, SaveOutcome
from inspector.formats import sniff
from inspector.integrity.hashing import sha256_file
from inspector.integrity.manifest import FileEntry, TensorEntry
from inspector.ledger.digests import (
    differences,
    disk_digests,
    expected_bytes,
    memory_digests,
    memory_tensors,
    proven_file,
)
from inspector.ledger.health import (
    evidence_path,
    health_problems,
    optimizer_problems,
    say_unhealthy,
    unhealthy_detail,
)
from inspector.ledger.identity import barrier, current_rank, world_size
from inspector.ledger.record import append_save, prior_ledger, relative
from inspector.ledger.rotate import rotate
from inspector.ledger.space import check_space, disk_full
from inspector.ledger.strays import clear_strays, temp_tag
from inspector.run.checkpoints import LedgerError, SaveRecord, checkpoint_files
from inspector.scan.dcp_folder import is_dcp_folder

TENSOR_FORMATS = frozenset({Format.SAFETENSORS, Format.ZIP, Format.PICKLE})
"""What `formats.sniff` calls the files whose tensors are read and recorded."""


def save_folder(
    write: Callable[[Path], Any],
    folder: str | os.PathLike[str],
    *,
    expected: Any = None,
    step: int | None = None,
    epoch: float | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    keep: int | None = None,
    writer: str = "folder",
) -> SaveRecord:
    """Let `write(tmp_folder)` write a checkpoint folder, then prove, place and ledger it."""
    target = Path(folder)
    run = Path(run_dir) if run_dir is not None else target.parent
    tmp = _prepare(target, expected, run)
    try:
        _write(write, tmp, target.parent)
        record = _commit(tmp, target, run, expected, step, epoch, writer)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if keep is not None and record.outcome != SaveOutcome.UNHEALTHY:
        rotate(run, record, keep)
    return record


def save_pretrained(model: Any, folder: str | os.PathLike[str], **options: Any) -> SaveRecord:
    """`model.save_pretrained(folder)`, proven and ledgered (options as for `save_folder`)."""
    ledger_keys = {"step", "epoch", "run_dir", "keep"}
    mine = {k: v for k, v in options.items() if k in ledger_keys}
    theirs = {k: v for k, v in options.items() if k not in ledger_keys}
    return save_folder(lambda tmp: model.save_pretrained(tmp, **theirs), folder,
                       expected=model.state_dict(), writer="save_pretrained", **mine)


def save_dcp(state_dict: Any, folder: str | os.PathLike[str], **options: Any) -> SaveRecord | None:
    """`torch.distributed.checkpoint.save` of `state_dict`, proven and ledgered by rank 0.

    Returns the record on rank 0 and None elsewhere. Rank 0 compares the folder with its own
    memory when that holds every tensor whole (one rank, or plain replicated tensors, which
    DCP writes once); a sharded tensor (DTensor, ShardedTensor) it holds only in part, so such
    a record is unverified (its hashes recorded)."""
    import torch.distributed.checkpoint as dcp

    target = Path(folder)
    run = Path(options.get("run_dir") or target.parent)
    whole = world_size() == 1 or _all_plain(state_dict)
    tmp = _temp_name(target, shared=True)
    if current_rank() == 0:
        _prepare(target, state_dict, run, tmp)
    barrier()
    record = None
    try:
        _write(lambda d: dcp.save(state_dict, checkpoint_id=d), tmp, target.parent)
        barrier()  # every rank's part is on disk, and rank 0 wrote .metadata
        if current_rank() == 0:
            record = _commit(tmp, target, run, state_dict if whole else None,
                             options.get("step"), options.get("epoch"), "dcp")
    except BaseException:
        if current_rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if (record is not None and options.get("keep") is not None
            and record.outcome != SaveOutcome.UNHEALTHY):
        rotate(run, record, options["keep"])
    barrier()
    return record


def _all_plain(state_dict: Any) -> bool:
    """True when every tensor leaf is a plain tensor (no DTensor or ShardedTensor)."""
    import torch

    from inspector.tensors.load import split_leaves

    plain = (torch.Tensor, torch.nn.Parameter)
    return all(type(t) in plain for _k, t in split_leaves(state_dict)[0])


def record_folder(
    folder: str | os.PathLike[str],
    *,
    expected: Any = None,
    step: int | None = None,
    epoch: float | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    writer: str = "folder",
    optimizer: Any = None,
    scheduler: Any = None,
) -> SaveRecord:
    """Ledger a checkpoint folder another writer already put in place (fsync'd first);
    `optimizer` and its LR `scheduler`, whose states the writer saved beside the model, are
    checked along.
    A folder not sealed verified is renamed `NAME.OUTCOME`, out of the writer's pattern."""
    target = Path(folder)
    run = Path(run_dir) if run_dir is not None else target.parent
    _fsync_tree(target)
    rel = relative(target, run)
    files, fmt, outcome, detail = measure_folder(target, rel, expected)
    problems = (health_problems(expected if expected is not None else {}, run)
                + optimizer_problems(optimizer, scheduler))
    if problems and outcome == SaveOutcome.VERIFIED:
        outcome, detail = SaveOutcome.UNHEALTHY, unhealthy_detail(problems)
    if outcome != SaveOutcome.VERIFIED:
        # renamed out of the trainer's own pattern (checkpoint-N), so its resume
        # (get_last_checkpoint, resume_from_checkpoint=True) skips it as `run latest` does
        asked, target = target, evidence_path(target, outcome)
        _place(asked, target)
        new_rel = relative(target, run)
        files = [dataclasses.replace(f, path=new_rel + f.path[len(rel):]) for f in files]
        say_unhealthy(asked, target, detail or str(outcome))
    return append_save(run, target, layout="folder", fmt=fmt, writer=writer, files=files,
                       outcome=outcome, detail=detail, step=step, epoch=epoch)


def _temp_name(target: Path, shared: bool = False) -> Path:
    # every rank must name the same folder; a lone writer gets one no other process uses
    tail = ".tmp" if shared else f".{temp_tag()}.tmp"
    return target.parent / f".{target.name}{tail}"


def _prepare(target: Path, expected: Any, run: Path, tmp: Path | None = None) -> Path:
    """Check the room and make an empty temp folder beside the target."""
    target.parent.mkdir(parents=True, exist_ok=True)
    clear_strays(target.parent)
    need = expected_bytes(expected) if expected is not None else _last_size(run)
    check_space(target.parent, need, need_inodes=8)
    tmp = tmp or _temp_name(target)
    shutil.rmtree(tmp, ignore_errors=True)  # left by a writer that was killed
    tmp.mkdir()
    return tmp


def _last_size(run: Path) -> int:
    ledger = prior_ledger(run)
    return ledger.saves[-1].size if ledger is not None and ledger.saves else 0


def _write(write: Callable[[Path], Any], tmp: Path, folder: Path) -> None:
    try:
        write(tmp)
    except Exception as exc:
        full = disk_full(exc, folder)
        if full is not None:
            raise full from exc
        raise


def _commit(tmp: Path, target: Path, run: Path, expected: Any, step: int | None,
            epoch: float | None, writer: str) -> SaveRecord:
    _fsync_tree(tmp)
    rel = relative(target, run)
    files, fmt, outcome, detail = measure_folder(tmp, rel, expected)
    if outcome == SaveOutcome.MISMATCH:
        append_save(run, target, layout="folder", fmt=fmt, writer=writer, files=files,
                    outcome=outcome, detail=detail, step=step, epoch=epoch)
        raise LedgerError("save_mismatch", f"{target}: {detail}; the folder was not put in "
                          "place and the previous checkpoint is kept: check the machine's "
                          "memory and disk (`ckpt-inspector report`)")
    problems = health_problems(expected if expected is not None else {}, run)
    if problems and outcome == SaveOutcome.VERIFIED:
        outcome, detail = SaveOutcome.UNHEALTHY, unhealthy_detail(problems)
        asked, target = target, evidence_path(target)
        new_rel = relative(target, run)
        files = [dataclasses.replace(f, path=new_rel + f.path[len(rel):]) for f in files]
        say_unhealthy(asked, target, detail)
    _place(tmp, target)
    return append_save(run, target, layout="folder", fmt=fmt, writer=writer, files=files,
                       outcome=outcome, detail=detail, step=step, epoch=epoch)


def _place(tmp: Path, target: Path) -> None:
    """Rename the proven folder into place; an old folder of that name goes only after."""
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        os.rename(target, old)
    os.rename(tmp, target)
    fsync_path(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def measure_folder(folder: Path, rel: str, expected: Any
                   ) -> tuple[list[FileEntry], str | None, SaveOutcome, str | None]:
    """Each file's manifest entry, the folder's format, and the comparison with memory: a
    DCP folder read whole and judged by digests; any other folder file by file, each tensor
    hashed and compared with memory in one pass (`proven_file`) while a thread takes the
    file's SHA-256."""
    if is_dcp_folder(folder):
        files = [FileEntry(_name(path, rel, folder), sha256_file(path), path.stat().st_size)
                 for path in checkpoint_files(folder)]
        try:
            found, unread = disk_digests(folder)[1], []
        except CodedError as exc:
            found, unread = [], [f"the folder ({exc.message})"]
        outcome, detail = _judge_whole(expected, found, rel)
        return files, "dcp", outcome, _with_unread(outcome, detail, unread)
    memory = memory_tensors(expected) if expected is not None else {}
    held = len(memory)
    files, differ, unread = [], [], []
    with ThreadPoolExecutor(1, thread_name_prefix="ledger-folder") as pool:
        for path in checkpoint_files(folder):
            file_hash = pool.submit(sha256_file, path)
            entry = FileEntry(_name(path, rel, folder), None, path.stat().st_size)
            if _kind(path) in TENSOR_FORMATS:
                try:
                    entry.format, entry.tensors, bad, extra = proven_file(path, memory)
                    differ += [k for k in bad if k not in extra]
                except CodedError as exc:
                    unread.append(f"{path.name} ({exc.message})")
            entry.sha256 = file_hash.result()
            files.append(entry)
    if expected is None:
        outcome, detail = SaveOutcome.UNVERIFIED, NO_MEMORY
    elif differ:
        outcome, detail = SaveOutcome.MISMATCH, _differs(differ)
    elif len(memory) == held:
        outcome, detail = SaveOutcome.UNVERIFIED, NOT_FOUND
    else:
        outcome, detail = SaveOutcome.VERIFIED, None
    return files, None, outcome, _with_unread(outcome, detail, unread)


NO_MEMORY = "hashes recorded; no state in memory to compare with"
NOT_FOUND = "no tensor of the state in memory was found on disk"


def _name(path: Path, rel: str, folder: Path) -> str:
    """A folder file's name in the record: the folder's, then its path inside."""
    return f"{rel}/{path.relative_to(folder).as_posix()}"


def _with_unread(outcome: SaveOutcome, detail: str | None, unread: list[str]) -> str | None:
    if unread and outcome != SaveOutcome.MISMATCH:
        return "; ".join(filter(None, [detail, "not read: " + ", ".join(unread)]))
    return detail


def _differs(keys: list[str]) -> str:
    shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
    return f"on disk, tensor {shown} differs from memory"


def _judge_whole(expected: Any, found: list[TensorEntry], rel: str
                 ) -> tuple[SaveOutcome, str | None]:
    """A DCP folder, read whole, against memory by digests (every tensor on both sides)."""
    if expected is None:
        return SaveOutcome.UNVERIFIED, NO_MEMORY
    want = memory_digests(expected)
    bad = differences(want, found, rel)
    if bad:
        return SaveOutcome.MISMATCH, _differs(bad)
    on_disk = {t.key for t in found}
    if not any(t.key in on_disk for t in want):
        return SaveOutcome.UNVERIFIED, NOT_FOUND
    return SaveOutcome.VERIFIED, None


def _kind(path: Path) -> str:
    with open(path, "rb") as fh:
        return sniff(fh.read(64), os.path.getsize(path))


def _fsync_tree(folder: Path) -> None:
    """fsync every file of a folder, its subfolders and the folder itself."""
    for path in sorted(folder.rglob("*"), reverse=True):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_path(folder)
