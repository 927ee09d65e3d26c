"""A model folder (or `*.index.json`) converted to the safetensors files transformers writes:
the plan (`plan_folder`), the conversion of every shard and the new index (`convert_folder`).

One shard becomes `model.safetensors`; several become `model-0000X-of-0000N.safetensors` with
the input's shard boundaries, plus a `model.safetensors.index.json` whose map is built from
what each conversion wrote and then checked against the written headers. `pytorch_model.bin`
becomes `model.safetensors`, the name transformers looks for (another `X.bin` becomes
`X.safetensors`). Each shard goes through the jailed worker's verified conversion, a function
the caller injects (`convert_one`, the sandbox client's), as is the runner that takes several
shards at once (`run`: `sandbox.host.parallel.run_parallel`); a key two shards share (tied
weights, stored once within a shard) is written once, as transformers' own loader expects.
Outputs go beside the path the user gave, never beside a link's target, so a snapshot in a
Hugging Face cache gets its outputs in the snapshot folder and never in `blobs/`; nothing is
overwritten unless forced, and a link is never written through. Other files (config,
tokenizer) are left alone. A failure or a cancel removes every file the run created. The CLI
(`convert DIR`) and the desktop app's Convert both run this.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from inspector.checkpoint.results import ConversionResult, FolderConversion
from inspector.core.errors import CodedError
from inspector.core.progress import CancelToken, check
from inspector.integrity.hfcache import repo_folder
from inspector.integrity.shard_index import (
    INDEX_SUFFIX,
    Problem,
    ShardError,
    ShardIndex,
    check_contents,
    check_files,
    is_index,
    read_index,
    safetensors_contents,
    shard_name,
    write_index,
)
from inspector.scan.dcp_folder import is_dcp_folder
from inspector.shards.shard_set import (
    SAFETENSORS_INDEX,
    FolderChoiceError,
    folder_checkpoint,
    is_safetensors_choice,
)

Runner = Callable[..., list[ConversionResult]]
"""`run(fn, items, jobs, cancel)`: `fn(item, cancel)` per item, results in input order
(`sandbox.host.parallel.run_parallel`)."""


class FolderError(CodedError):
    """A folder conversion that cannot go ahead; `code` chooses the exit status."""

    def __init__(self, code: str, message: str, problems: list[Problem] | None = None) -> None:
        super().__init__(code, message)
        self.problems = problems or []


@dataclass
class FolderJob:
    """Inputs (as the user reaches them) paired with outputs, and the index to write."""

    source: Path
    index: ShardIndex | None
    pairs: list[tuple[Path, Path]]
    output_index: Path | None
    reports: list[ConversionResult] = field(default_factory=list)


def safetensors_name(name: str) -> str:
    """The safetensors file transformers would look for in place of a torch file."""
    if name == "pytorch_model.bin":
        return "model.safetensors"
    return name.rpartition(".")[0] + ".safetensors" if "." in name else name + ".safetensors"


def default_output(path: Path) -> Path:
    """A single file's output: beside the path given (a link's folder, not its target's)."""
    return Path(os.path.abspath(path)).parent / safetensors_name(path.name)


def is_folder_input(path: Path) -> bool:
    """True for a folder or an index, which `convert` treats as one sharded checkpoint; a
    torch.distributed.checkpoint folder is one input the worker reads whole (`tensors.dcp`)."""
    return (path.is_dir() and not is_dcp_folder(path)) or is_index(path)


def plan_folder(path: Path, output: Path | None) -> FolderJob:
    """Find the checkpoint in a folder (or index) and name every output.

    `output` is a folder, or a `.safetensors` file when the checkpoint is one file.
    """
    job = _plan(path, None if output is None or output.suffix == ".safetensors" else output)
    if output is not None and output.suffix == ".safetensors":
        if len(job.pairs) != 1:
            raise FolderError("output_unwritable", f"{path} is {len(job.pairs)} shards; "
                              "-o takes a folder for them")
        job.pairs = [(job.pairs[0][0], Path(os.path.abspath(output)))]
    _refuse_cache_blobs(job.pairs[0][1].parent)
    return job


def _plan(path: Path, output_dir: Path | None) -> FolderJob:
    index_path, single = _find_input(Path(os.path.abspath(path)))
    source = index_path or single
    out_dir = Path(os.path.abspath(output_dir or source.parent))
    if index_path is None:
        return FolderJob(source, None, [(source, out_dir / safetensors_name(source.name))], None)
    try:
        index = read_index(index_path)
    except ShardError as exc:
        raise FolderError("bad_index", str(exc)) from None
    shards = index.shards()
    target = safetensors_name(index.single_name)
    if len(shards) == 1:
        return FolderJob(source, index, [(index.folder / shards[0], out_dir / target)], None)
    pairs = [
        (index.folder / shard, out_dir / shard_name(target, number, len(shards)))
        for number, shard in enumerate(shards, 1)
    ]
    return FolderJob(source, index, pairs, out_dir / (target + INDEX_SUFFIX))


def _find_input(path: Path) -> tuple[Path, None] | tuple[None, Path]:
    """(index, None) for a sharded checkpoint, (None, file) for a folder with one file."""
    if is_index(path):
        if path.name.endswith(SAFETENSORS_INDEX):
            raise FolderError("already_safetensors", f"{path} indexes safetensors shards already")
        return path, None
    try:
        found = folder_checkpoint(path)
    except FolderChoiceError as exc:
        raise FolderError(exc.code, str(exc)) from None
    # a Trainer's output folder keeps training_args.bin and optimizer.pt beside the weights
    if is_safetensors_choice(found):
        raise FolderError("already_safetensors", f"{path} holds safetensors weights already")
    return (found, None) if is_index(found) else (None, found)


def _refuse_cache_blobs(out_dir: Path) -> None:
    """Blobs are content-addressed: a file written there would be a blob with a wrong name."""
    for folder in (out_dir, Path(os.path.realpath(out_dir))):
        repo = repo_folder(folder)
        if repo is not None and (folder == repo / "blobs" or repo / "blobs" in folder.parents):
            raise FolderError(
                "output_unwritable",
                f"{out_dir} is in a Hugging Face cache's blobs/; convert through the snapshot "
                "folder or pass -o DIR",
            )


def check_outputs(paths: list[Path], force: bool) -> None:
    """Refuse to replace a file unless forced, and never write through a link."""
    for path in paths:
        if path.is_symlink():
            raise FolderError("output_exists", f"{path} is a link; refusing to write through it")
        if path.exists() and not force:
            raise FolderError("output_exists",
                              f"{path} exists; refusing to overwrite it (--force replaces it)")


def convert_folder(job: FolderJob, convert_one, force: bool, on_shard=None, jobs: int = 1,
                   run: Runner | None = None,
                   cancel: CancelToken | None = None) -> FolderConversion:
    """Convert every shard (`jobs` at once through `run`; one after another without it),
    then write and check the index; the folder's conversion report.

    `convert_one(src, out, overwrite, cancel=token)` is the jailed conversion of one file (its
    `ConversionResult`); `on_shard(number, count, src)` is told as each shard starts, from its
    job's thread. The first failing shard cancels the others; a failure or `cancel` removes
    every file this run created.
    """
    outputs = [out for _src, out in job.pairs] + ([job.output_index] if job.output_index else [])
    check_outputs(outputs, force)
    if job.index is not None:
        _raise_fatal(check_files(job.index))
    created: list[Path] = []
    found: dict[str, list[str]] = {}
    lock = threading.Lock()  # `created` and `found` are shared by the shards' threads

    def in_order() -> dict[str, list[str]]:
        # the checks name shards in the index's order, whichever finished first
        return {src.name: found[src.name] for src, _out in job.pairs if src.name in found}

    def convert_shard(item: tuple[int, tuple[Path, Path]], cancel) -> ConversionResult:
        number, (src, out) = item
        if on_shard is not None:
            on_shard(number, len(job.pairs), src)
        existed = out.exists()
        report = convert_one(src, out, force, cancel=cancel)
        report.input = str(src)  # the worker names the link's target
        with lock:
            if not existed:
                created.append(out)
                if report.sidecar:
                    created.append(Path(report.sidecar))
            # every key the shard held, written or not, checked at once so a bad set stops early
            found[src.name] = [*report.digests, *report.aliases,
                               *(s["key"] for s in report.tensors_skipped)]
            if job.index is not None:
                _raise_fatal(check_contents(job.index, in_order()))
        return report

    if job.output_index is not None and not job.output_index.exists():
        created.append(job.output_index)  # removed with the shards if the run fails
    job.pairs[0][1].parent.mkdir(parents=True, exist_ok=True)
    try:
        # run_parallel returns or raises only once every shard's job has stopped
        items = list(enumerate(job.pairs, 1))
        job.reports = (run(convert_shard, items, jobs, cancel) if run is not None
                       else [convert_shard(item, cancel) for item in items])
        report = _finish(job, in_order(), force)
        check(cancel)  # a cancel that came while the index was written still removes it all
        return report
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        raise


def _raise_fatal(problems: list[Problem]) -> None:
    fatal = [p for p in problems if p.fatal]
    if fatal:
        raise FolderError("coverage", "the shards do not match their index", fatal)


def _finish(job: FolderJob, found: dict[str, list[str]], force: bool) -> FolderConversion:
    """Check `total_size` against the data written; write the new index and check it."""
    pairs = list(zip(job.pairs, job.reports, strict=True))
    written = {out.name: list(r.digests) for (_s, out), r in pairs}
    data_bytes = sum(r.bytes_written for r in job.reports)
    problems: list[Problem] = []
    if job.index is not None:
        problems = check_contents(job.index, found, data_bytes)
        _raise_fatal(problems)
    if job.output_index is not None:
        metadata = dict(job.index.metadata) if job.index is not None else {}
        weight_map = {key: name for name, keys in written.items() for key in keys}
        write_index(job.output_index, weight_map, data_bytes, metadata, overwrite=force)
        try:
            _check_written(job.output_index)
        except BaseException:
            job.output_index.unlink(missing_ok=True)
            raise
    return FolderConversion(
        input=str(job.source),
        index=str(job.index.path) if job.index is not None else None,
        output_index=str(job.output_index) if job.output_index else None,
        outputs=[str(out) for _src, out in job.pairs],
        tensors_written=sum(r.tensors_written for r in job.reports),
        bytes_written=data_bytes,
        problems=[p.to_json() for p in problems],
        shards=job.reports,
    )


def _check_written(index_path: Path) -> None:
    """The index just written must describe the shards just written, key for key."""
    index = read_index(index_path)
    found, data = {}, 0
    for shard in index.shards():
        keys, size = safetensors_contents(index.folder / shard)
        found[shard] = keys
        data += size
    problems = check_files(index) + check_contents(index, found, data)
    if problems:
        raise FolderError("verify_failed", "the written index does not match the written "
                          "shards: " + "; ".join(p.message for p in problems[:4]))
