"""The signed statement of a verified signature, as this project reads it: the files and digests
the reference library expanded from it, how they were hashed, and the per-tensor digests this
project adds as an extra predicate field (v1.0 verifiers ignore fields they do not know). Also
the statement as a manifest: for `verify`, and as the entries `manifest create` writes."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from inspector.core.strict_json import no_repeats
from inspector.integrity.folder_walk import entry_location
from inspector.integrity.manifest import (
    FileEntry,
    Manifest,
    ManifestError,
    TensorEntry,
    named_once,
    relative_path,
)
from inspector.signing.errors import SignatureError

TENSORS_FIELD = "ckpt_inspector_tensors"
"""The predicate field holding `{file: [tensor records]}` (this project's JSON manifest's
per-tensor records): signed with the rest, read only by this project."""

SAVE_FIELD = "ckpt_inspector_save"
"""The predicate field a ledger's signature adds: the save's place in its run (`SavePlace`), so
a signed checkpoint copied under another name, step or journal line is not that save."""

GIT_PATHS = (".git", ".github", ".gitattributes", ".gitignore")
"""What the reference library leaves out of every signature unless told otherwise."""

DIALECT = "oms"


@dataclass(frozen=True)
class Resource:
    """One signed item: a file (or a shard `name:start:end`), its algorithm and digest."""

    name: str
    algorithm: str
    digest: str


@dataclass(frozen=True)
class SavePlace:
    """Which ledgered save a signature was made for: its path in the run folder, its step,
    its line's place in the journal's chain (`seq`), that journal's chain id (the hash of its
    first line: which run) and the save's outcome (how its bytes were proven). `chain` and
    `outcome` are None in a signature made before they were signed."""

    path: str
    step: int | None
    seq: int
    chain: str | None = None
    outcome: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The signed predicate field."""
        bound = {k: v for k, v in (("chain", self.chain), ("outcome", self.outcome))
                 if v is not None}
        return {"path": self.path, "step": self.step, "seq": self.seq, **bound}

    def said(self) -> str:
        """'step 1 at ckpt/step-1.pt (journal seq 0)'."""
        step = f"step {self.step}" if self.step is not None else "no step"
        return f"{step} at {self.path} (journal seq {self.seq})"

    def mismatch(self, record: SavePlace) -> str | None:
        """Why the save a record describes is not the one this signature was made for (None
        when it is); a part this signature does not name is not compared (`unbound`)."""
        if (self.path, self.step, self.seq) != (record.path, record.step, record.seq):
            return f"signed for {self.said()}, but the record is {record.said()}"
        if self.chain is not None and self.chain != record.chain:
            return (f"signed for {self.said()} in another run's journal (chain id "
                    f"{self.chain[:12]}…, this journal's is {str(record.chain)[:12]}…)")
        if self.outcome is not None and self.outcome != record.outcome:
            return (f"signed as a save {self.outcome} at its write, but the record says "
                    f"{record.outcome}")
        return None

    def unbound(self) -> str | None:
        """What an older signature leaves unsigned ("its run's journal and its outcome"), so
        a reader says it checked less; None when it names them all."""
        missing = [what for what, value in (("its run's journal", self.chain),
                                            ("its outcome", self.outcome)) if value is None]
        if not missing:
            return None
        return (f"made before signatures named {' and '.join(missing)}: a save copied from "
                "another run signed with the same key, or an edited outcome, is not told apart")

    def misplaced(self, target: Path) -> str | None:
        """Why `target` is not the save this signature was made for, read from its path alone
        (the signed path, relative to its run folder, must be how `target`'s path ends: a
        signed save copied over another save's name is that other save's rollback); None when
        it is."""
        # a save outside its run folder is named from it with leading `..` (os.path.relpath)
        signed = tuple(part for part in PurePosixPath(self.path).parts if part != "..")
        if signed and Path(os.path.abspath(target)).parts[-len(signed):] == signed:
            return None
        return (f"signed for {self.said()}, not for {target}: a copy of that save under "
                "another name")


@dataclass
class SignedStatement:
    """What a verified signature says about a folder."""

    model_name: str
    method: str
    hash_type: str
    allow_symlinks: bool
    ignore_paths: list[str]
    resources: list[Resource]
    tensors: dict[str, list[TensorEntry]] = field(default_factory=dict)
    shard_size: int | None = None
    save: SavePlace | None = None
    """The ledger save it was made for (None: a folder's signature, or one made before)."""

    @property
    def plain_sha256(self) -> bool:
        """True when each item is a whole file's SHA-256 (what `integrity.verify` checks)."""
        return self.method == "files" and self.hash_type == "sha256"


def from_library(manifest: Any, payload: bytes, source: Path) -> SignedStatement:
    """The statement from the library's verified manifest and the envelope's verified payload."""
    args = manifest.serialization_type
    tensors = _tensors(payload, source)
    save = _save(payload, source)
    return SignedStatement(
        model_name=manifest.model_name,
        method=str(args.get("method")),
        hash_type=str(args.get("hash_type")),
        allow_symlinks=bool(args.get("allow_symlinks")),
        ignore_paths=sorted(str(p) for p in args.get("ignore_paths", ())),
        resources=[Resource(rd.identifier, rd.digest.algorithm, rd.digest.digest_hex)
                   for rd in manifest.resource_descriptors()],
        tensors=tensors,
        shard_size=_shard_size(args.get("shard_size"), source),
        save=save,
    )


def _shard_size(value: Any, source: Path) -> int | None:
    """The signed shard size as an int (a protobuf Struct keeps every number as a double, and
    the library's hashing takes only an int); None for a statement by whole files."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value) or not float(value).is_integer() or value <= 0:
        raise SignatureError("bad-statement", f"{source}: the signed shard size {value!r} is "
                             "not a whole number of bytes")
    return int(value)


def _save(payload: bytes, source: Path) -> SavePlace | None:
    """The signed `SAVE_FIELD`, checked for the types a ledger writes (None when absent)."""
    record = json.loads(payload, object_pairs_hook=no_repeats).get("predicate", {}).get(SAVE_FIELD)
    if record is None:
        return None
    if not isinstance(record, dict):
        record = {}
    # the statement's predicate is a protobuf Struct: its numbers come back as floats
    whole = {k: v for k in ("step", "seq") if isinstance(v := record.get(k), (int, float))
             and not isinstance(v, bool) and math.isfinite(v) and float(v).is_integer()}
    if (not isinstance(record.get("path"), str) or "seq" not in whole
            or ("step" not in whole and record.get("step") is not None)):
        raise SignatureError("not-a-bundle", f"{source}: the signed {SAVE_FIELD} field is "
                             "malformed")
    words = {k: record.get(k) for k in ("chain", "outcome")}
    if any(not isinstance(v, (str, type(None))) for v in words.values()):
        raise SignatureError("not-a-bundle", f"{source}: the signed {SAVE_FIELD} field is "
                             "malformed")
    step = int(whole["step"]) if "step" in whole else None
    return SavePlace(record["path"], step, int(whole["seq"]), **words)


def _tensors(payload: bytes, source: Path) -> dict[str, list[TensorEntry]]:
    try:
        statement = json.loads(payload, object_pairs_hook=no_repeats)
        records = statement.get("predicate", {}).get(TENSORS_FIELD) or {}
        return {name: [TensorEntry(key=t["key"], dtype=t.get("dtype"),
                                   shape=_shape(t.get("shape")),
                                   digest=t.get("digest"),
                                   digest_algorithm=t.get("digest_algorithm"))
                       for t in items]
                for name, items in records.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SignatureError("not-a-bundle", f"{source}: the signed {TENSORS_FIELD} field is "
                             f"malformed: {exc}") from exc


def _shape(shape: Any) -> tuple[int, ...] | None:
    """A signed shape back as ints (a protobuf Struct keeps every number as a double)."""
    if shape is None:
        return None
    if not all(isinstance(n, int | float) and float(n).is_integer() and n >= 0 for n in shape):
        raise ValueError(f"a shape of non-negative integers, not {shape!r}")
    return tuple(int(n) for n in shape)


def tensor_predicate(tensors: dict[str, list[TensorEntry]]) -> dict[str, Any]:
    """The predicate field written for `tensors` (`{file: [tensor records]}`)."""
    return {name: [t.to_json() for t in items] for name, items in sorted(tensors.items())}


def to_manifest(statement: SignedStatement, folder: Path, source: Path | None) -> Manifest:
    """The statement as a manifest read against `folder` (plain SHA-256 file statements); a
    SignatureError when it names one file twice, however spelled, which would go unchecked."""
    try:
        files = named_once([FileEntry(path=r.name, sha256=r.digest)
                            for r in statement.resources], f"{source}: the signed statement")
    except ManifestError as exc:
        raise SignatureError("bad-statement", str(exc)) from None
    return Manifest(dialect=DIALECT, files=files, base_dir=folder, source=source)


def refuse_one_file(statement: SignedStatement, signature: Path | None) -> None:
    """SignatureError when the statement signs one file alone (its items are `.`, or its
    shards `.:start:end`): read against a folder, `.` would name the folder itself."""
    if statement.resources and all(r.name == "." or r.name.startswith(".:")
                                   for r in statement.resources):
        raise SignatureError("not-this-folder", f"{signature}: signs one file, not a folder: "
                             "name the file it signs")


def to_entries(statement: SignedStatement, folder: Path, manifest_dir: Path,
               source: Path | None = None) -> list[FileEntry]:
    """The signed files as a manifest's entries, named from `manifest_dir` (the signed tensors
    with them), for `manifest create --signature` (`source`: the signature, for errors)."""
    refuse_one_file(statement, source)
    if not statement.plain_sha256:
        raise SignatureError("unsupported-statement", f"the statement lists {statement.method} "
                             f"hashed with {statement.hash_type}; a manifest holds whole files' "
                             "SHA-256")
    return [FileEntry(path=relative_path(folder / r.name, manifest_dir), sha256=r.digest,
                      tensors=statement.tensors.get(r.name))
            for r in statement.resources]


def beside(target: Path) -> Path:
    """Where a checkpoint's own signature lies: `NAME.sig` next to the file or folder (outside a
    folder, so the folder's files are exactly those signed)."""
    return target.with_name(target.name + ".sig")


def name_inside(folder: Path, path: Path) -> str | None:
    """`path`'s name relative to `folder` when it lies inside it, the links above it resolved
    on both sides (a signature written through a linked path into the folder it signs is in
    that folder; a name that is itself a link is the folder's entry); None when outside."""
    real = entry_location(path)
    root = Path(os.path.realpath(folder))
    return real.relative_to(root).as_posix() if real.is_relative_to(root) else None


def signed_name(target: Path, path: Path) -> str:
    """A file's name in a statement over `target`, as the reference library names it: a
    single-file target is `.`, a folder's files are relative to it with `/`."""
    return Path(os.path.relpath(path, target)).as_posix() if target.is_dir() else "."
