"""ONNX models: recognised only when the bytes parse completely as an `onnx.ModelProto` with a
graph (`protowire` against the fields of onnx.proto), and checked for their own risks.

- External data (`data_location: EXTERNAL`): `onnx.load` and onnxruntime read each tensor's
  `location` file beside the model. A location that is absolute, has a `..` part, or resolves
  through a link to outside the model's folder reads any file the user can read into the
  model's tensors (and writes it back out on `onnx.save`): CVE-2022-25882, and its bypass
  CVE-2024-27318 in onnx before 1.16. Dangerous.
- Custom operators: a node whose domain is not one onnxruntime implements itself runs only
  from a native library registered for that domain (`register_custom_ops_library`), which
  runs as native code in the serving process. Suspicious, with the domain and ops named.

The model's tensors are not read for statistics (no tensor reader is registered).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inspector.core.vocabulary import Format, Severity
from inspector.formats.protowire import (
    BYTES,
    VARINT,
    Message,
    Reader,
    WireBudget,
    WireError,
    varint,
)
from inspector.formats.registry import FormatAdvice, FormatSpec, register

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

# onnx.proto's fields that lead to names, domains, graphs and tensors; the rest are skipped
SCHEMA: dict[str, dict[int, Any]] = {
    "Model": {1: "varint", 2: "bytes", 3: "bytes", 4: "bytes", 5: "varint", 6: "bytes",
              7: "Graph", 8: "OperatorSetId", 14: "StringString", 20: "TrainingInfo",
              25: "Function", 26: "DeviceConfiguration"},
    "DeviceConfiguration": {1: "bytes", 2: "varint", 3: "bytes"},
    "OperatorSetId": {1: "bytes", 2: "varint"},
    "Graph": {1: "Node", 2: "bytes", 5: "Tensor", 10: "bytes", 11: "ValueInfo", 12: "ValueInfo",
              13: "ValueInfo", 14: "TensorAnnotation", 15: "SparseTensor", 16: "StringString"},
    "ValueInfo": {1: "bytes", 2: "Type", 3: "bytes", 4: "StringString"},
    "Type": {1: "TensorType", 4: "ElemType", 5: "MapType", 6: "bytes", 7: "Opaque",
             8: "TensorType", 9: "ElemType"},
    "Opaque": {1: "bytes", 2: "bytes"},
    "TensorType": {1: "varint", 2: "Shape"},
    "ElemType": {1: "Type"},
    "MapType": {1: "varint", 2: "Type"},
    "Shape": {1: "Dimension"},
    "Dimension": {1: "varint", 2: "bytes", 3: "bytes"},
    "TensorAnnotation": {1: "bytes", 2: "StringString"},
    "Segment": {1: "varint", 2: "varint"},
    "Node": {1: "bytes", 2: "bytes", 3: "bytes", 4: "bytes", 5: "Attribute", 6: "bytes",
             7: "bytes", 8: "bytes", 9: "StringString", 10: "NodeDeviceConfiguration"},
    "NodeDeviceConfiguration": {1: "bytes", 2: "ShardingSpec", 3: "varint"},
    "ShardingSpec": {1: "bytes", 2: "packed:0", 3: "IntIntList", 4: "ShardedDim"},
    "IntIntList": {1: "varint", 2: "packed:0"},
    "ShardedDim": {1: "varint", 2: "SimpleShardedDim"},
    "SimpleShardedDim": {1: "varint", 2: "bytes", 3: "varint"},
    "Attribute": {1: "bytes", 2: "fixed32", 3: "varint", 4: "bytes", 5: "Tensor", 6: "Graph",
                  7: "packed:5", 8: "packed:0", 9: "bytes", 10: "Tensor", 11: "Graph",
                  13: "bytes", 14: "Type", 15: "Type", 20: "varint", 21: "bytes",
                  22: "SparseTensor", 23: "SparseTensor"},
    "Tensor": {1: "packed:0", 2: "varint", 3: "Segment", 4: "packed:5", 5: "packed:0",
               6: "bytes", 7: "packed:0", 8: "bytes", 9: "bytes", 10: "packed:1",
               11: "packed:0", 12: "bytes", 13: "StringString", 14: "varint",
               16: "StringString"},
    "SparseTensor": {1: "Tensor", 2: "Tensor", 3: "packed:0"},
    "StringString": {1: "bytes", 2: "bytes"},
    "Function": {1: "bytes", 4: "bytes", 5: "bytes", 6: "bytes", 7: "Node", 8: "bytes",
                 9: "OperatorSetId", 10: "bytes", 11: "Attribute", 12: "ValueInfo", 13: "bytes",
                 14: "StringString"},
    "TrainingInfo": {1: "Graph", 2: "Graph", 3: "StringString", 4: "StringString"},
}
# message fields that are not repeated: protobuf merges their occurrences
SINGULAR = frozenset({
    ("Model", 7), ("Attribute", 5), ("Attribute", 6), ("Attribute", 14), ("Attribute", 22),
    ("SparseTensor", 1), ("SparseTensor", 2), ("Tensor", 3), ("TrainingInfo", 1),
    ("TrainingInfo", 2), ("ValueInfo", 2), ("Type", 1), ("Type", 4), ("Type", 5), ("Type", 7),
    ("Type", 8), ("Type", 9), ("TensorType", 2), ("ElemType", 1), ("MapType", 2),
})
EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL

# domains onnxruntime implements itself; any other needs a custom-op library
BUILTIN_DOMAINS = frozenset({
    "", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.training",
    "com.microsoft", "com.microsoft.nchwc", "com.microsoft.experimental",
    "com.ms.internal.nhwc", "org.pytorch.aten",
})
ADVISORIES = "CVE-2022-25882, and its bypass CVE-2024-27318 in onnx before 1.16"


@dataclass(frozen=True)
class ExternalData:
    """One tensor's external data entry."""

    tensor: str
    location: str
    offset: int
    length: int | None


@dataclass
class OnnxModel:
    """What an ONNX model's bytes say about its risks."""

    ir_version: int | None
    producer: str
    opsets: dict[str, int]
    ops: dict[str, set[str]] = field(default_factory=dict)
    """Domain -> op types of every node: the graph's, its subgraphs', functions' and training's."""
    functions: set[str] = field(default_factory=set)
    """Domains of the model's own functions (their ops are the model's, not a library's)."""
    tensors: int = 0
    external: list[ExternalData] = field(default_factory=list)


def read_model(buf, size: int | None = None) -> OnnxModel:
    """The model in `buf`; WireError where the bytes are not a whole ModelProto with a graph,
    WireBudget where it has more fields than are read."""
    end = len(buf) if size is None else size
    reader = Reader(SCHEMA, SINGULAR)
    model = reader.read("Model", buf, 0, end)
    if not model.all(7):
        raise WireError("a ModelProto without a graph")
    text = reader.text
    out = OnnxModel(model.one(1), text(buf, model.one(2, (0, 0))),
                    {text(buf, o.one(1, (0, 0))): o.one(2, 0) for o in model.all(8)})
    graphs = list(model.all(7)) + [g for t in model.all(20) for g in t.all(1) + t.all(2)]
    for fn in model.all(25):
        out.functions.add(text(buf, fn.one(10, (0, 0))))
        _nodes(buf, fn.all(7), out, graphs)
    while graphs:
        graph = graphs.pop()
        _nodes(buf, graph.all(1), out, graphs)
        for t in graph.all(5):
            _tensor(buf, t, out)
        for s in graph.all(15):
            for t in s.all(1) + s.all(2):
                _tensor(buf, t, out)
    return out


def _nodes(buf, nodes: list[Message], out: OnnxModel, graphs: list[Message]) -> None:
    for node in nodes:
        domain = Reader.text(buf, node.one(7, (0, 0)))
        out.ops.setdefault(domain, set()).add(Reader.text(buf, node.one(4, (0, 0))))
        for attr in node.all(5):
            graphs += attr.all(6) + attr.all(11)
            for t in attr.all(5) + attr.all(10):
                _tensor(buf, t, out)
            for s in attr.all(22) + attr.all(23):
                for t in s.all(1) + s.all(2):
                    _tensor(buf, t, out)


def _tensor(buf, t: Message, out: OnnxModel) -> None:
    out.tensors += 1
    # an enum is read as protobuf reads it: the varint cut to 32 bits
    if t.one(14, 0) & 0xFFFFFFFF != EXTERNAL:
        return  # onnx and onnxruntime read external data only for EXTERNAL tensors
    entries = {Reader.text(buf, e.one(1, (0, 0))): Reader.text(buf, e.one(2, (0, 0)))
               for e in t.all(13)}
    offset, length = entries.get("offset", "0"), entries.get("length")
    out.external.append(ExternalData(
        Reader.text(buf, t.one(8, (0, 0))), entries.get("location", ""),
        int(offset) if offset.isdigit() else 0,
        int(length) if length is not None and length.isdigit() else None))


def sniff(head: bytes, size: int) -> bool:
    """Whether the first bytes read as a ModelProto: a file no longer than the head parses
    whole; a longer one's head holds only known fields of their wire types, and the messages
    among them that end inside it parse as theirs (`scan` then reads the whole file, and only
    a complete model is ONNX)."""
    if size <= len(head):
        try:
            read_model(head, size)
        except (WireError, WireBudget, RecursionError):
            return False
        return True
    reader = Reader(SCHEMA, SINGULAR, max_fields=10_000)
    pos, seen = 0, 0
    try:
        while pos < len(head):
            key, pos = varint(head, pos, len(head))
            kind = SCHEMA["Model"].get(key >> 3)
            if kind is None or key & 7 != (VARINT if kind == "varint" else BYTES):
                return False
            if kind == "varint":
                _, pos = varint(head, pos, len(head))
            else:
                length, pos = varint(head, pos, len(head))
                if pos + length > size:
                    return seen > 0  # a model cut short: its scan says so
                if kind != "bytes" and pos + length <= len(head):
                    reader.read(kind, head, pos, pos + length)
                pos += length
            seen += 1
    except WireError:
        return seen > 0 and pos + 10 > len(head)  # cut by the head's end, inside a varint
    except (WireBudget, RecursionError):
        return False
    return seen > 0


def scan(ctx: FormatContext, buf) -> None:
    """Report external data that leaves the model's folder and custom-op domains."""
    try:
        model = read_model(buf)
    except WireBudget as exc:
        ctx.not_fully_read("onnx-size", f"the model's graph was not read to its end ({exc})")
        return
    except RecursionError:
        raise WireError("messages nested too deep") from None
    path = ctx.result.path
    folder = os.path.dirname(os.path.abspath(path)) if os.path.isfile(path) else None
    _external(ctx, model, folder)
    for domain, ops in sorted(model.ops.items()):
        if domain in BUILTIN_DOMAINS or domain in model.functions:
            continue
        names = ", ".join(sorted(ops)[:8]) + (", ..." if len(ops) > 8 else "")
        ctx.find(Severity.SUSPICIOUS, "onnx-custom-op",
                 f"nodes of the custom domain {domain!r} ({names}): onnxruntime runs them only "
                 "from a native library registered for that domain, which runs as native code "
                 "in the serving process; load the model only with a library you trust")


def _external(ctx: FormatContext, model: OnnxModel, folder: str | None) -> None:
    inside: dict[str, int] = {}
    for ref in model.external:
        why = outside(ref.location, folder)
        if why is not None:
            ctx.find(Severity.DANGEROUS, "onnx-external-outside",
                     f"tensor {ref.tensor!r} reads its data from {ref.location!r}, {why}: "
                     "onnx.load and loaders that join the path as given read any file there "
                     f"into the model ({ADVISORIES})", member=ref.tensor)
            continue
        inside[ref.location] = inside.get(ref.location, 0) + 1
        if folder is None:
            continue
        target = os.path.join(folder, ref.location)
        if not os.path.isfile(target):
            ctx.find(Severity.SUSPICIOUS, "onnx-external-missing",
                     f"tensor {ref.tensor!r} reads its data from {ref.location!r}, which is not "
                     "beside the model: it cannot be loaded", member=ref.tensor)
        elif ref.length is not None and ref.offset + ref.length > os.path.getsize(target):
            ctx.find(Severity.SUSPICIOUS, "onnx-external-bounds",
                     f"tensor {ref.tensor!r} reads bytes {ref.offset}..{ref.offset + ref.length} "
                     f"of {ref.location!r}, past its end: onnx refuses it", member=ref.tensor)
    if inside:
        files = ", ".join(sorted(inside)[:5]) + (", ..." if len(inside) > 5 else "")
        ctx.find(Severity.INFO, "onnx-external-data",
                 f"{sum(inside.values())} tensors keep their data in files beside the model "
                 f"({files}); scan those with it")


def outside(location: str, folder: str | None) -> str | None:
    """Why an external-data location leaves the model's folder, or None where it stays in."""
    if not location:
        return "an empty location (the model's folder itself)"
    name = location.replace("\\", "/")
    if name.startswith("/") or os.path.isabs(location) or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    if ".." in name.split("/"):
        return "a path with a '..' part"
    if folder is not None:
        real, base = os.path.realpath(os.path.join(folder, location)), os.path.realpath(folder)
        if os.path.commonpath([real, base]) != base:
            return f"a link that resolves to {real}, outside the model's folder"
    return None


SAFE = FormatAdvice(
    "Safe — an ONNX graph with nothing outside its folder",
    "An ONNX model is a protobuf graph with no pickle; its external data stays in its folder "
    "and it needs no custom operators.",
    "Load it with onnx or onnxruntime; record its SHA-256 in a manifest so later copies can "
    "be checked.")
SUSPICIOUS = FormatAdvice(
    "Suspicious — custom operators or external data to check",
    "It names custom-operator domains, whose native library runs with your privileges when "
    "the model loads, or external data that is missing or out of bounds.",
    "Load it only with custom-op libraries you trust, and check that the external data files "
    "beside it are the publisher's; otherwise get the model again from its source.")

SPEC = register(FormatSpec(
    Format.ONNX, "ONNX model", (".onnx",), "application/x-onnx",
    loaders=("onnx.load", "onnxruntime.InferenceSession"), sniff=sniff, scan=scan,
    pickled=False, safe_advice=SAFE, suspicious_advice=SUSPICIOUS))
