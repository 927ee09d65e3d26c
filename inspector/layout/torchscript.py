"""The weights of TorchScript (`torch.jit.save`) and `torch.export.save` archives, read without
torch, plus the code each carries, shown for a person to judge.

`torch.jit.load` compiles and runs an archive's `code/` and `torch.export.load` rebuilds its
graph, so neither is ever called. The weights themselves are plain records:

- TorchScript: `data.pkl` builds the module tree from `__torch__` class objects whose
  attributes hold the parameters and buffers (`_rebuild_tensor_v2` over `data/N` records).
  `layout.torch_save.walk_pickle(script=True)` reads it as data; tensors are keyed by their
  attribute path, as `state_dict()` names them. `constants.pkl` (tensors the code uses as
  literals, records under `constants/`) is walked too and counted, not listed: it is not
  part of the weights. Every other member must be code, debug info, traced inputs, extra
  files or torch's bookkeeping. A class whose code defines `__setstate__` rebuilds itself
  from its state by running that code on load, so such an archive is refused.
- `torch.export` (`.pt2`): `data/weights/model_weights_config.json` names, for each
  state_dict key, a raw record `data/weights/<path_name>` with dtype (the serialized schema's
  ScalarType number), sizes, strides and storage offset; pickled weights are not read here.

Anything outside that raises `NotCovered`, so a caller refuses instead of guessing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from inspector.core.dtypes import EXPORT_CODES
from inspector.core.flatten import flatten, unique_keys
from inspector.core.termtext import escape
from inspector.formats import zip_kind
from inspector.formats.archives import zipread
from inspector.formats.archives.script_code import op_uses
from inspector.layout.torch_save import (
    V3_DTYPES,
    NotCovered,
    ScriptModule,
    TensorLayout,
    archive_members,
    main_pickle,
    tensor_layouts,
    walk_pickle,
)

CODE_ARCHIVES = ("torchscript", "torch-export")
"""Scanned formats whose weights are read from their records and whose code is only shown."""
CODE_TEXT_LIMIT = 64 * 1024
"""Characters of each code file's text an inspect result carries."""
MAX_CONFIG_BYTES = 64 << 20
MAX_CODE_BYTES = 16 << 20
"""A code file judged whole; a larger one is refused (NotCovered)."""
# torch._export.serde.schema.ScalarType (tests check it against the installed torch).
EXPORT_DTYPES = EXPORT_CODES
_STRIDED = 7  # torch._export.serde.schema.Layout.Strided
_SCRIPT_BOOKKEEPING = ("version", ".data/version", "byteorder", ".data/serialization_id",
                       ".format_version", ".storage_alignment")
_EXPORT_BOOKKEEPING = ("archive_format", "archive_version", "version", ".data/version",
                       "byteorder", ".data/serialization_id")
# What code that torch runs on load should never need: Python's escape hatches; the operators
# that reach files or the network, and those outside torch's own namespaces (a custom op runs
# whatever native library registered it), are `script_code.op_uses`'.
_FLAGS = (
    (re.compile(r"\b(os|sys|subprocess|importlib|socket|shutil|ctypes|pickle)\s*\."),
     "names the Python module {0}"),
    # not getattr: TorchScript reaches numbered submodules with getattr(self, "0")
    (re.compile(r"\b(eval|exec|compile|open|__import__)\s*\("),
     "calls {0}()"),
)


@dataclass(frozen=True, slots=True)
class CodeFile:
    """One file of code the archive carries: torch runs it (or its graph) when loading."""

    name: str
    size: int
    text: str
    truncated: bool
    flags: list[str]

    def to_json(self, with_text: bool = True) -> dict:
        """The inspect contract's `code` entry (text escaped, up to CODE_TEXT_LIMIT)."""
        out = {"name": self.name, "size": self.size, "flags": self.flags,
               "truncated": self.truncated}
        if with_text:
            out["text"] = self.text
        return out


@dataclass(slots=True)
class ArchiveLayout:
    """A code-carrying archive: its kind, weights, code files and tensors that are not weights."""

    kind: str
    """`torchscript` or `torch-export`."""
    tensors: list[TensorLayout]
    code: list[CodeFile] = field(default_factory=list)
    constants: int = 0
    """Tensors kept beside the weights (TorchScript constants, export's lifted constants)."""

    def code_report(self) -> dict:
        """The `code` part of an inspect result: what torch would run on loading, and its
        flags."""
        return {"code": [c.to_json() for c in self.code],
                "code_archive": {"kind": self.kind, "constants": self.constants,
                                 "flags": sum(len(c.flags) for c in self.code)}}


def judge_code(text: str) -> list[str]:
    """What in a code file's text could reach beyond tensor maths (empty when nothing)."""
    found = []
    for pattern, message in _FLAGS:
        for name in sorted({m.group(1) for m in pattern.finditer(text)}):
            found.append(message.format(name))
    for use in op_uses(text):
        found.append(f"calls {use.op}, which reaches {use.reaches} (line {use.line})"
                     if use.reaches else f"calls {use.op}, an operator outside torch's own")
    return found


def _code_file(buf, member: zipread.Member, name: str) -> CodeFile:
    try:
        raw = zipread.member_bytes(buf, member, MAX_CODE_BYTES)
    except ValueError as exc:
        raise NotCovered(f"code member {name!r} unreadable: {exc}") from None
    text = raw.decode("utf-8", errors="replace")
    truncated = len(text) > CODE_TEXT_LIMIT
    # escaped line by line (control characters, BiDi overrides), so lines stay lines
    shown = "\n".join(escape(line) for line in text[:CODE_TEXT_LIMIT].split("\n"))
    return CodeFile(escape(name), member.size, shown, truncated, judge_code(text))


def _tensor_leaves(root: object) -> list[tuple[str, object]]:
    """Keyed leaves less plain values and empty containers (module settings such as
    `training`: not weights, and plain data); `tensor_layouts` refuses any other non-tensor."""
    return [(key, leaf) for key, leaf in unique_keys(flatten(root))
            if not (leaf is None or type(leaf) in (bool, int, float, str)
                    or (type(leaf) in (ScriptModule, dict, list, tuple) and not leaf))]


def describe_torchscript(buf) -> ArchiveLayout:
    """The parameters and buffers of a `torch.jit.save` archive and its code files."""
    by_name = archive_members(buf, compressed=("code/",))  # torch deflates code files
    code = [_code_file(buf, member, name) for name, member in by_name.items()
            if name.startswith("code/") and not name.endswith(".debug_pkl")]
    if not code:
        raise NotCovered("TorchScript archive without code/")
    # A class with its own __setstate__ rebuilds itself from its state as its code says (it
    # runs on load), so that state's names and tensors are not known to be its weights.
    own = next((c.name for c in code if "def __setstate__(" in c.text), None)
    if own is not None:
        raise NotCovered(f"{own} defines __setstate__: a class restores itself with its own "
                         "code, so its state is not plain attributes")
    root, storages = walk_pickle(main_pickle(buf, by_name, "data.pkl"), script=True)
    if type(root) is not ScriptModule:
        raise NotCovered("data.pkl does not hold a TorchScript module")
    layouts = tensor_layouts(_tensor_leaves(root), storages, by_name, "data/")
    constants, const_storages = 0, {}
    if "constants.pkl" in by_name:
        consts, const_storages = walk_pickle(main_pickle(buf, by_name, "constants.pkl"),
                                             script=True)
        if type(consts) is not tuple:
            raise NotCovered("constants.pkl does not hold a tuple")
        constants = len(tensor_layouts(_tensor_leaves(consts), const_storages, by_name,
                                       "constants/"))
    known = {f"data/{k}" for k in storages} | {f"constants/{k}" for k in const_storages}
    for name in by_name:
        if not (name in known or name in _SCRIPT_BOOKKEEPING
                or name in ("data.pkl", "constants.pkl", "traced_inputs.pkl")
                or name.startswith(("code/", "extra/", "traced_inputs/"))):
            raise NotCovered(f"archive member {name!r} is not a TorchScript archive's")
    return ArchiveLayout("torchscript", layouts, code, constants)


def _as_ints(items: object, what: str) -> tuple[int, ...]:
    if type(items) is not list or any(type(i) is not dict or set(i) != {"as_int"}
                                      or type(i["as_int"]) is not int or i["as_int"] < 0
                                      for i in items):
        raise NotCovered(f"{what} that are not plain non-negative ints")
    return tuple(i["as_int"] for i in items)


def _config(buf, by_name: dict[str, zipread.Member], name: str) -> dict:
    member = by_name.get(name)
    if member is None:
        raise NotCovered(f"no {name}")
    try:
        config = json.loads(zipread.member_bytes(buf, member, MAX_CONFIG_BYTES))
    except ValueError as exc:
        raise NotCovered(f"{name} is not readable JSON: {exc}") from None
    if type(config) is not dict or type(config.get("config")) is not dict:
        raise NotCovered(f"{name} has no config mapping")
    return config["config"]


def _export_layout(key: str, entry: object, by_name: dict[str, zipread.Member]
                   ) -> TensorLayout:
    if type(entry) is not dict or entry.get("use_pickle") is not False:
        raise NotCovered(f"weight {key} is pickled or described in an unknown way")
    meta = entry.get("tensor_meta")
    record = by_name.get(f"data/weights/{entry.get('path_name')}")
    if type(meta) is not dict or record is None or "/" in str(entry.get("path_name")):
        raise NotCovered(f"weight {key} has no tensor_meta or no record")
    dtype = EXPORT_DTYPES.get(meta.get("dtype"))
    if dtype not in V3_DTYPES or meta.get("layout") != _STRIDED:
        raise NotCovered(f"weight {key} has dtype {meta.get('dtype')} or a layout not strided")
    shape = _as_ints(meta.get("sizes"), f"sizes of {key}")
    stride = _as_ints(meta.get("strides"), f"strides of {key}")
    (offset,) = _as_ints([meta.get("storage_offset")], f"storage offset of {key}")
    if len(shape) != len(stride):
        raise NotCovered(f"weight {key}: sizes and strides differ in length")
    itemsize = V3_DTYPES[dtype]
    if all(shape):  # the view must lie inside its record, as torch's set_ checks
        last = offset + sum((d - 1) * s for d, s in zip(shape, stride, strict=True))
        if (last + 1) * itemsize > record.size:
            raise NotCovered(f"weight {key} reaches past its record")
    return TensorLayout(key, dtype, itemsize, shape, stride,
                        record.data_offset + offset * itemsize)


def describe_export(buf) -> ArchiveLayout:
    """The weights of a `torch.export.save` archive (one model) and its serialized graph."""
    by_name = archive_members(buf)
    fmt = by_name.get("archive_format")
    if fmt is None or zipread.member_bytes(buf, fmt, 16) != b"pt2":
        raise NotCovered("not a pt2 archive")
    models = [n for n in by_name if n.startswith("models/")]
    if models != ["models/model.json"]:
        raise NotCovered(f"archive holds the models {models}, not one named model")
    weights = _config(buf, by_name, "data/weights/model_weights_config.json")
    constants = _config(buf, by_name, "data/constants/model_constants_config.json")
    layouts = [_export_layout(key, entry, by_name) for key, entry in weights.items()]
    used = {f"data/weights/{e['path_name']}" for e in weights.values()} | {
        "data/weights/model_weights_config.json"}
    for name in by_name:
        if not (name in used or name in _EXPORT_BOOKKEEPING or name == "models/model.json"
                or name.startswith(("data/constants/", "data/sample_inputs/"))):
            raise NotCovered(f"archive member {name!r} is not a torch.export archive's")
    code = [_code_file(buf, by_name["models/model.json"], "models/model.json")]
    return ArchiveLayout("torch-export", layouts, code, len(constants))


def code_archive_kind(buf) -> str | None:
    """`torchscript` or `torch-export` when the zip in `buf` is one, by its member names."""
    try:
        names = [m.name for m in zipread.read_zip(buf).members]
    except (zipread.NotAZip, ValueError, IndexError):
        return None
    kind = zip_kind(names)
    return kind if kind in ("torchscript", "torch-export") else None


def describe_code_archive(buf, kind: str) -> ArchiveLayout:
    """`describe_torchscript` or `describe_export` by the scanned format name."""
    if kind == "torchscript":
        return describe_torchscript(buf)
    if kind == "torch-export":
        return describe_export(buf)
    raise NotCovered(f"format {kind} carries no code archive")
