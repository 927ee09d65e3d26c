"""Checksum manifests: read every dialect found next to checkpoints, write three of them.

Read (dialect detected from the content, never the file name): GNU `sha256sum` output (text and
`*binary` markers, backslash-escaped names), BSD / `--tag` lines `SHA256 (name) = hex`, a TSV
with a header row, a Git LFS pointer, this project's schema-versioned JSON manifest (files and
per-tensor digests) and a sharded checkpoint's `*.index.json` (`weight_map`). Write: sha256sum,
TSV and JSON. Paths are stored relative to the manifest's folder, with `/` separators.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from inspector.core.atomic import write_bytes_atomic
from inspector.core.strict_json import no_repeats
from inspector.integrity.regular_file import UnfitFile, read_regular

SCHEMA = "ckpt-inspector-manifest"
SCHEMA_VERSION = 1

LFS_VERSION = "https://git-lfs.github.com/spec/v1"

_HEX64 = r"[0-9a-fA-F]{64}"
_GNU_LINE = re.compile(rf"^(\\?)({_HEX64}) ([ *])(.+)$", re.DOTALL)
_BSD_LINE = re.compile(rf"^(\\?)SHA(?:2-)?256 ?\((.+)\) ?= ?({_HEX64})$", re.DOTALL)
_ESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}

SHA256SUMS_NAMES = ("SHA256SUMS", "SHA256SUM", "CHECKSUMS")
"""Names that, without an extension, are sha256sum files by convention (Debian, Ubuntu)."""
WRITE_DIALECTS = {".sha256": "sha256sum", ".txt": "sha256sum", ".tsv": "tsv", ".json": "json"}


class ManifestError(ValueError):
    """A manifest that cannot be read or written; the message names the line at fault."""


@dataclass
class TensorEntry:
    """One tensor on record: its key and, where the manifest has them, dtype, shape and digest."""

    key: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    digest: str | None = None
    digest_algorithm: str | None = None
    unchecked: str | None = field(default=None, compare=False)
    """Set on a digest the jailed loader reported that the user's process could not check
    against the file's bytes: why not (the digest is then only the loader's word). Never
    written to a manifest."""

    def to_json(self) -> dict[str, Any]:
        """The JSON manifest's per-tensor record."""
        return {
            "key": self.key,
            "dtype": self.dtype,
            "shape": list(self.shape) if self.shape is not None else None,
            "digest": self.digest,
            "digest_algorithm": self.digest_algorithm,
        }


@dataclass
class FileEntry:
    """One file on record; `tensors` is None when the manifest says nothing about tensors."""

    path: str
    sha256: str | None = None
    size: int | None = None
    format: str | None = None
    tensors: list[TensorEntry] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON manifest's per-file record."""
        record: dict[str, Any] = {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "format": self.format,
        }
        if self.tensors is not None:
            record["tensors"] = [t.to_json() for t in self.tensors]
        return record


@dataclass
class Manifest:
    """A parsed manifest: its dialect, the files it lists and the folder their paths start from."""

    dialect: str
    files: list[FileEntry]
    base_dir: Path = field(default_factory=Path)
    source: Path | None = None

    @property
    def has_tensors(self) -> bool:
        """True when at least one file carries tensor records."""
        return any(f.tensors is not None for f in self.files)

    def resolve(self, entry: FileEntry) -> Path:
        """The on-disk location an entry names, relative to the manifest's folder."""
        return self.base_dir / Path(*entry.path.split("/"))


MAX_MANIFEST_BYTES = 64 << 20
"""A manifest larger than this is refused before it is read (a real one lists files in a few
hundred bytes each; a link to /dev/zero would otherwise be read until memory runs out)."""


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read a manifest file of any supported dialect (a regular file, at most
    `MAX_MANIFEST_BYTES`: a FIFO or a device is refused, never waited on)."""
    source = Path(path)
    try:
        data = read_regular(source, "manifest", MAX_MANIFEST_BYTES)
    except UnfitFile as exc:
        raise ManifestError(f"{source}: {exc.strerror}") from exc
    except OSError as exc:
        raise ManifestError(f"{source}: cannot read manifest: {exc.strerror or exc}") from exc
    text = data.decode("utf-8", errors="surrogateescape")
    manifest = parse_manifest(text, name=str(source), base_dir=source.parent)
    manifest.source = source
    return manifest


def parse_manifest(text: str, name: str = "<manifest>", base_dir: Path | None = None) -> Manifest:
    """Parse manifest text, detecting its dialect from the content."""
    text = text.removeprefix("\ufeff")
    base = base_dir if base_dir is not None else Path()
    lines = _split_lines(text)
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        raise ManifestError(f"{name}: manifest is empty")
    if first.lstrip().startswith("{"):
        files, dialect = _parse_json(text, name)
    elif first.strip() == f"version {LFS_VERSION}":
        files, dialect = [_parse_lfs(lines, name)], "git-lfs"
    elif "\t" in first and "sha256" in _header_columns(first):
        files, dialect = _parse_tsv(lines, name), "tsv"
    else:
        files, dialect = _parse_checksum_lines(lines, name)
    return Manifest(dialect=dialect, files=files, base_dir=base)


def _split_lines(text: str) -> list[str]:
    """Split on LF only (names may hold other control characters) and drop a CR before it."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def named_once(files: list[FileEntry], where: str) -> list[FileEntry]:
    """`files` with each name as a manifest reads it (`_clean_path`); ManifestError for a file
    listed twice however spelled, or a name no manifest may hold (absolute, a folder's)."""
    out: list[FileEntry] = []
    seen: dict[str, str] = {}
    for entry in files:
        _add_once(out, seen, replace(entry, path=_clean_path(entry.path, where)), where)
    return out


def _add_once(files: list[FileEntry], seen: dict[str, str], entry: FileEntry,
              where: str) -> None:
    """Append `entry`; ManifestError when it names a file listed before, however spelled
    (`sub/../a`): a folder's files are matched to one entry each, so a second would go
    unchecked. `seen`: each listed name, normalised, with its first spelling."""
    name = posixpath.normpath(entry.path)
    if name in seen:
        before = seen[name]
        raise ManifestError(f"{where}: {entry.path!r} is listed twice"
                            + (f" (as {before!r} before)" if before != entry.path else ""))
    seen[name] = entry.path
    files.append(entry)


def _parse_checksum_lines(lines: list[str], name: str) -> tuple[list[FileEntry], str]:
    files: list[FileEntry] = []
    seen: dict[str, str] = {}
    dialect = ""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        bsd = _BSD_LINE.match(line)
        gnu = None if bsd else _GNU_LINE.match(line)
        if bsd:
            escaped, raw_name, digest = bsd.groups()
            dialect = dialect or "bsd"
        elif gnu:
            escaped, digest, _marker, raw_name = gnu.groups()
            dialect = dialect or "sha256sum"
        else:
            raise ManifestError(
                f"{where}: not a SHA-256 checksum line (expected '<64 hex digits>  NAME', "
                f"'<64 hex digits> *NAME' or 'SHA256 (NAME) = <64 hex digits>'): {line[:80]!r}"
            )
        path = _unescape(raw_name, where) if escaped else raw_name
        entry = FileEntry(path=_clean_path(path, where), sha256=digest.lower())
        _add_once(files, seen, entry, where)
    return files, dialect


def _unescape(raw: str, where: str) -> str:
    """Undo coreutils' escaping of names holding a backslash, LF or CR."""
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\":
            nxt = raw[i + 1 : i + 2]
            if nxt not in _ESCAPES:
                raise ManifestError(f"{where}: invalid escape '\\{nxt}' in an escaped name")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _header_columns(line: str) -> list[str]:
    return [c.strip().lower() for c in line.split("\t")]


def _parse_tsv(lines: list[str], name: str) -> list[FileEntry]:
    header_index = next(i for i, line in enumerate(lines) if line.strip())
    columns = _header_columns(lines[header_index])
    if "path" not in columns:
        raise ManifestError(f"{name}:{header_index + 1}: TSV header has no 'path' column")
    col = {c: columns.index(c) for c in ("path", "sha256", "size", "format") if c in columns}
    files: list[FileEntry] = []
    seen: dict[str, str] = {}
    for lineno, line in enumerate(lines[header_index + 1 :], header_index + 2):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        cells = line.split("\t")
        if len(cells) != len(columns):
            raise ManifestError(
                f"{where}: expected {len(columns)} tab-separated columns, found {len(cells)}"
            )
        digest = cells[col["sha256"]].strip()
        if not re.fullmatch(_HEX64, digest):
            raise ManifestError(f"{where}: sha256 {digest[:80]!r} is not 64 hex digits")
        size = None
        if "size" in col and cells[col["size"]].strip():
            size = _parse_size(cells[col["size"]].strip(), where)
        at = col.get("format")
        fmt = (cells[at].strip() or None) if at is not None else None
        entry = FileEntry(
            path=_clean_path(cells[col["path"]], where),
            sha256=digest.lower(),
            size=size,
            format=fmt,
        )
        _add_once(files, seen, entry, where)
    return files


def _parse_size(text: str, where: str) -> int:
    """A size column's text as a count: ASCII digits only (`str.isdigit` takes "²", which
    `int` refuses, and "３", which no other reader of the manifest would take for 3)."""
    if not re.fullmatch(r"[0-9]+", text):
        raise ManifestError(f"{where}: size {text[:40]!r} is not a non-negative integer")
    return int(text)


def _parse_lfs(lines: list[str], name: str) -> FileEntry:
    """A Git LFS pointer describes the file of the same name in the repository."""
    values: dict[str, str] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        key, sep, value = line.partition(" ")
        if not sep or not key:
            raise ManifestError(f"{name}:{lineno}: Git LFS pointer line is not 'key value'")
        values[key] = value.strip()
    oid = values.get("oid", "")
    algo, _, digest = oid.partition(":")
    if algo != "sha256" or not re.fullmatch(_HEX64, digest):
        raise ManifestError(f"{name}: Git LFS pointer has no 'oid sha256:<64 hex digits>' line")
    if "size" not in values:
        raise ManifestError(f"{name}: Git LFS pointer has no 'size' line")
    size = _parse_size(values["size"], f"{name}: Git LFS pointer")
    return FileEntry(path=Path(name).name, sha256=digest.lower(), size=size)


def _parse_json(text: str, name: str) -> tuple[list[FileEntry], str]:
    try:
        doc = json.loads(text, object_pairs_hook=no_repeats)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{name}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
    except ValueError as exc:  # a key given twice: another reader could take the other value
        raise ManifestError(f"{name}: {exc}") from None
    except RecursionError:
        raise ManifestError(f"{name}: JSON nested too deeply to be a manifest") from None
    if not isinstance(doc, dict):
        raise ManifestError(f"{name}: JSON manifest must be an object")
    if "weight_map" in doc:
        return _parse_index(doc, name), "index"
    if doc.get("schema") != SCHEMA:
        raise ManifestError(
            f"{name}: JSON is neither a {SCHEMA} manifest nor a sharded checkpoint index"
        )
    version = doc.get("schema_version")
    if type(version) is not int or version > SCHEMA_VERSION:  # JSON's true is no version
        raise ManifestError(
            f"{name}: manifest schema_version {version!r} is not supported "
            f"(this version reads up to {SCHEMA_VERSION})"
        )
    records = doc.get("files")
    if not isinstance(records, list):
        raise ManifestError(f"{name}: JSON manifest has no 'files' list")
    files: list[FileEntry] = []
    seen: dict[str, str] = {}
    for i, record in enumerate(records):
        where = f"{name}: files[{i}]"
        entry = _json_file(record, where)
        _add_once(files, seen, entry, where)
    return files, "json"


def _json_file(record: Any, where: str) -> FileEntry:
    if not isinstance(record, dict) or not isinstance(record.get("path"), str):
        raise ManifestError(f"{where}: file record needs a 'path' string")
    digest = record.get("sha256")
    if digest is not None and not (isinstance(digest, str) and re.fullmatch(_HEX64, digest)):
        raise ManifestError(f"{where}: sha256 is not 64 hex digits")
    size = record.get("size")
    if size is not None and not (type(size) is int and size >= 0):  # true is no size
        raise ManifestError(f"{where}: size is not a non-negative integer")
    tensors = None
    if record.get("tensors") is not None:
        if not isinstance(record["tensors"], list):
            raise ManifestError(f"{where}: 'tensors' is not a list")
        tensors = [
            _json_tensor(t, f"{where}.tensors[{j}]") for j, t in enumerate(record["tensors"])
        ]
        seen: set[str] = set()
        for tensor in tensors:
            if tensor.key in seen:
                raise ManifestError(f"{where}: tensor {tensor.key!r} is listed twice")
            seen.add(tensor.key)
    if digest is None and not any(t.digest for t in tensors or ()):
        raise ManifestError(f"{where}: {record['path']!r} has neither a sha256 nor tensor "
                            "digests: nothing could be compared")
    return FileEntry(
        path=_clean_path(record["path"], where),
        sha256=digest.lower() if digest else None,
        size=size,
        format=record.get("format"),
        tensors=tensors,
    )


def file_entry(record: Any, where: str) -> FileEntry:
    """A file record of the JSON manifest format, read and checked (ManifestError names `where`)."""
    return _json_file(record, where)


def _json_tensor(record: Any, where: str) -> TensorEntry:
    if not isinstance(record, dict) or not isinstance(record.get("key"), str):
        raise ManifestError(f"{where}: tensor record needs a 'key' string")
    shape = record.get("shape")
    if shape is not None and not (
        isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
    ):
        raise ManifestError(f"{where}: shape is not a list of non-negative integers")
    return TensorEntry(
        key=record["key"],
        dtype=record.get("dtype"),
        shape=tuple(shape) if shape is not None else None,
        digest=record.get("digest"),
        digest_algorithm=record.get("digest_algorithm"),
    )


def _parse_index(doc: dict[str, Any], name: str) -> list[FileEntry]:
    """A sharded checkpoint's index names each key's shard but carries no hashes."""
    weight_map = doc["weight_map"]
    if not isinstance(weight_map, dict):
        raise ManifestError(f"{name}: 'weight_map' is not an object")
    shards: dict[str, FileEntry] = {}
    for key, shard in weight_map.items():
        if not isinstance(shard, str):
            raise ManifestError(f"{name}: weight_map[{key!r}] is not a file name")
        path = _clean_path(shard, f"{name}: weight_map[{key!r}]")
        entry = shards.setdefault(path, FileEntry(path=path, tensors=[]))
        entry.tensors.append(TensorEntry(key=key))
    return list(shards.values())


def _clean_path(path: str, where: str) -> str:
    """Normalise a stored path to `/` separators without `.` or empty segments (as the system
    reads it); refuse empty and absolute paths, and a name ending in `/` (a folder's)."""
    cleaned = path.replace("\\", "/") if os.sep == "\\" else path
    if "\0" in cleaned:  # no file name holds one, and the system calls refuse it
        raise ManifestError(f"{where}: path {path!r} holds a NUL byte, which no file name can")
    try:  # JSON's "\ud800": a lone surrogate no byte stands for, which no system call takes
        os.fsencode(cleaned)
    except UnicodeEncodeError as exc:
        raise ManifestError(f"{where}: path {path!r} holds {cleaned[exc.start]!r}, which no file "
                            "name can") from exc
    if cleaned.startswith("/") or re.match(r"^[A-Za-z]:[/\\]", cleaned):
        raise ManifestError(f"{where}: path {path!r} must be relative to the manifest")
    if cleaned.endswith("/"):
        raise ManifestError(f"{where}: path {path!r} names a folder; a manifest lists files")
    cleaned = "/".join(part for part in cleaned.split("/") if part not in ("", "."))
    if not cleaned:
        raise ManifestError(f"{where}: path {path!r} must be relative to the manifest")
    return cleaned


def relative_path(path: str | os.PathLike[str], manifest_dir: str | os.PathLike[str]) -> str:
    """A file's path relative to the manifest's folder, with `/` separators."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(manifest_dir))
    return Path(rel).as_posix()


def dialect_for_path(path: str | os.PathLike[str]) -> str:
    """The dialect to write, chosen from the manifest's extension (or its conventional name,
    `SHA256SUMS`)."""
    name = Path(path).name
    if name.upper() in SHA256SUMS_NAMES:
        return "sha256sum"
    suffix = Path(path).suffix.lower()
    if suffix not in WRITE_DIALECTS:
        known = ", ".join(sorted(WRITE_DIALECTS))
        raise ManifestError(f"{path}: cannot tell the manifest format from '{suffix}' ({known})")
    return WRITE_DIALECTS[suffix]


def format_sha256sum(files: list[FileEntry]) -> str:
    """sha256sum text output, escaping names the way coreutils does."""
    out = []
    for entry in files:
        if entry.sha256 is None:
            raise ManifestError(f"{entry.path}: no SHA-256 to write")
        name = entry.path
        prefix = ""
        if any(c in name for c in "\\\n\r"):
            prefix = "\\"
            name = name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        out.append(f"{prefix}{entry.sha256}  {name}\n")
    return "".join(out)


def format_tsv(files: list[FileEntry]) -> str:
    """A TSV manifest with a `path, sha256, size, format` header."""
    out = ["path\tsha256\tsize\tformat\n"]
    for entry in files:
        if any(c in entry.path for c in "\t\n\r"):
            raise ManifestError(f"{entry.path!r}: a TSV manifest cannot hold tabs or newlines")
        size = "" if entry.size is None else str(entry.size)
        out.append(f"{entry.path}\t{entry.sha256 or ''}\t{size}\t{entry.format or ''}\n")
    return "".join(out)


def format_json(files: list[FileEntry], created_by: str | None = None) -> str:
    """This project's JSON manifest: schema, version, then one record per file."""
    doc: dict[str, Any] = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION}
    if created_by:
        doc["created_by"] = created_by
    doc["files"] = [f.to_json() for f in files]
    # ASCII with \u escapes: the same JSON to every reader, and nothing a terminal-safe stream
    # (`manifest create -o -`) must rewrite: a C1 control in a name came out as text there
    return json.dumps(doc, indent=1) + "\n"


def write_manifest(
    path: str | os.PathLike[str],
    files: list[FileEntry],
    dialect: str | None = None,
    overwrite: bool = False,
    created_by: str | None = None,
) -> str:
    """Write a manifest atomically in the dialect its extension names; return the dialect."""
    dialect = dialect or dialect_for_path(path)
    if dialect == "sha256sum":
        text = format_sha256sum(files)
    elif dialect == "tsv":
        text = format_tsv(files)
    elif dialect == "json":
        text = format_json(files, created_by=created_by)
    else:
        raise ManifestError(f"cannot write manifests in the {dialect!r} dialect")
    # surrogateescape round-trips names that were not valid UTF-8 on disk
    write_bytes_atomic(path, text.encode("utf-8", "surrogateescape"), overwrite=overwrite)
    return dialect
