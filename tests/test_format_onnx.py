"""ONNX: the wire-format reader against the `onnx` package on models its helpers build,
recognition by the bytes only, external data that leaves the model's folder, custom-op
domains, and folder scans that no longer skip ONNX files."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import overwrite_bytes
from safetensors.torch import save_file

from inspector.core.vocabulary import Format, Severity, Verdict
from inspector.formats import HEAD_BYTES, detect
from inspector.formats import onnx as onnx_format
from inspector.scan.advice import advise
from inspector.scan.engine import scan_file, scan_paths


@pytest.fixture(scope="module")
def onnx():
    """The onnx package, for the tests that build or load models with it: imported when the
    first of them runs, not at collection (about a second of every collection otherwise).
    The helpers below import from it where they use it."""
    return pytest.importorskip("onnx", reason="onnx is in the dev extra")


def _value(name: str, shape: list[int]):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _rich_model():
    """Every place a node or tensor can hide: subgraphs of an If, a local function, a
    Constant's tensor attribute, a sparse initializer, training info."""
    from onnx import TensorProto, helper, numpy_helper

    then_g = helper.make_graph([helper.make_node("Scale", ["x"], ["t"], domain="com.example")],
                               "then", [], [_value("t", [4])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                               [_value("e", [4])])
    fn = helper.make_function("my.fns", "Twice", ["a"], ["b"],
                              [helper.make_node("Add", ["a", "a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "sp"),
        numpy_helper.from_array(np.array([0, 3], np.int64), "sp_idx"), [4])
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
            np.arange(4, dtype=np.float32), "cval")),
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Twice", ["m"], ["tw"], domain="my.fns"),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
        helper.make_node("LinearClassifier", ["x"], ["lab", "sc"], domain="ai.onnx.ml",
                         coefficients=[1.0] * 8, intercepts=[0.0, 0.0]),
        helper.make_node("FusedGemm", ["x", "w"], ["fg"], domain="com.microsoft"),
    ]
    graph = helper.make_graph(
        nodes, "rich", [_value("x", [4, 4]), helper.make_tensor_value_info("cond", TensorProto.BOOL,
                                                                           [])],
        [_value("y", [4])],
        [numpy_helper.from_array(np.ones((4, 4), np.float32), "w"),
         numpy_helper.from_array(np.full(64, 2.0, np.float32), "big")],
        sparse_initializer=[sparse])
    model = helper.make_model(graph, producer_name="tests", functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3),
        helper.make_opsetid("com.example", 1), helper.make_opsetid("my.fns", 1),
        helper.make_opsetid("com.microsoft", 1)])
    model.training_info.append(helper.make_training_info(
        helper.make_graph([helper.make_node("Relu", ["x"], ["r"], domain="org.training")],
                          "init", [], [_value("r", [4])]), [], None, []))
    return model


def _text(value: str | bytes) -> str:
    """protobuf hands a proto2 string that is not UTF-8 back as bytes; ours keeps surrogates."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def _reference(model) -> tuple[dict, dict, list]:
    """Opsets, ops by domain and external entries, walked through onnx's own objects."""
    from onnx import TensorProto

    ops: dict[str, set[str]] = {}
    external = []

    def tensor(t) -> None:
        if t.data_location == TensorProto.EXTERNAL:
            entries = {_text(e.key): _text(e.value) for e in t.external_data}
            offset, length = entries.get("offset", "0"), entries.get("length")
            external.append((_text(t.name), entries.get("location", ""),
                             int(offset) if offset.isdigit() else 0,
                             int(length) if length is not None and length.isdigit() else None))

    def graph(g) -> None:
        for t in g.initializer:
            tensor(t)
        for s in g.sparse_initializer:
            tensor(s.values)
            tensor(s.indices)
        nodes(g.node)

    def nodes(ns) -> None:
        for n in ns:
            ops.setdefault(_text(n.domain), set()).add(_text(n.op_type))
            for a in n.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    graph(g)
                for t in ([a.t] if a.HasField("t") else []) + list(a.tensors):
                    tensor(t)

    graph(model.graph)
    for f in model.functions:
        nodes(f.node)
    for info in model.training_info:
        graph(info.initialization)
        graph(info.algorithm)
    return {_text(o.domain): o.version for o in model.opset_import}, ops, sorted(external)


@pytest.mark.parametrize("external", [False, True])
def test_reader_agrees_with_onnx(tmp_path, external, onnx) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(_rich_model(), path, save_as_external_data=external,
              all_tensors_to_one_file=True, location="model.data", size_threshold=0)
    ref = onnx.load(path, load_external_data=False)
    opsets, ops, ext = _reference(ref)
    ours = onnx_format.read_model(path.read_bytes())
    assert ours.ir_version == ref.ir_version and ours.producer == ref.producer_name == "tests"
    assert ours.opsets == opsets
    assert ours.ops == ops
    assert ours.functions == {f.domain for f in ref.functions} == {"my.fns"}
    assert sorted((e.tensor, e.location, e.offset, e.length) for e in ours.external) == ext
    assert bool(ext) is external


def test_scan_recognises_onnx_by_its_bytes(tmp_path, onnx) -> None:
    from onnx import helper, numpy_helper

    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [_value("x", [2])], [_value("y", [2])],
        [numpy_helper.from_array(np.ones(300, np.float32), "w")]))
    path = tmp_path / "weights.bin"  # the name says nothing
    onnx.save(model, path)
    res = scan_file(path)
    assert res.format == Format.ONNX and res.verdict == Verdict.SAFE, res.to_json()
    assert not res.findings and res.error is None
    advice = advise(res)
    assert advice.case == "safe:onnx" and "onnxruntime" in advice.action
    assert "torch.load" not in advice.action and "pickle" in advice.meaning


def test_external_data_beside_the_model_is_info_and_loads(tmp_path, onnx) -> None:
    from onnx import numpy_helper

    path = tmp_path / "model.onnx"
    onnx.save(_rich_model(), path, save_as_external_data=True, location="model.data",
              size_threshold=0)
    res = scan_file(path)
    codes = {f.code: f.severity for f in res.findings}
    assert codes["onnx-external-data"] == Severity.INFO
    assert "onnx-external-outside" not in codes and "onnx-external-missing" not in codes
    loaded = onnx.load(path)  # the real loader reads it
    assert numpy_helper.to_array(loaded.graph.initializer[1]).sum() == 128.0


def _external_model(location: str):
    from onnx import TensorProto, helper

    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4],
                    data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        t.external_data.add(key=key, value=value)
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                              [_value("y", [4])], [t])
    return helper.make_model(graph)


@pytest.mark.parametrize("where", ["dotdot", "absolute", "link"])
def test_external_data_outside_the_folder_is_dangerous(tmp_path, where, onnx) -> None:
    secret = tmp_path / "outside" / "secret.bin"
    secret.parent.mkdir()
    secret.write_bytes(b"PRIVATE KEY 1234")
    folder = tmp_path / "model"
    folder.mkdir()
    location = {"dotdot": "../outside/secret.bin", "absolute": str(secret),
                "link": "weights.bin"}[where]
    if where == "link":
        (folder / "weights.bin").symlink_to(secret)
    path = folder / "model.onnx"
    onnx.save(_external_model(location), path)
    # the entry reaches the secret for any loader that joins the path as given, as onnx
    # before 1.16 did (CVE-2022-25882, CVE-2024-27318)
    assert (folder / location).read_bytes() == secret.read_bytes()
    res = scan_file(path)
    assert res.format == Format.ONNX and res.verdict == Verdict.DANGEROUS, res.to_json()
    hit = next(f for f in res.findings if f.code == "onnx-external-outside")
    assert hit.member == "w" and location in hit.message
    # the pinned onnx reads the same entry and refuses it: it is the field loaders act on
    with pytest.raises(onnx.checker.ValidationError):
        onnx.load(path)


def test_custom_op_domains_are_suspicious_and_named(tmp_path, onnx) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(_rich_model(), path)
    res = scan_file(path)
    custom = [f for f in res.findings if f.code == "onnx-custom-op"]
    named = {f.message.split("'")[1] for f in custom}
    # the model's own function domain, ONNX-ML and onnxruntime's contrib ops are built in
    assert named == {"com.example", "org.training"}
    assert all(f.severity == Severity.SUSPICIOUS for f in custom)
    assert "Scale" in next(f.message for f in custom if "com.example" in f.message)
    assert res.verdict == Verdict.SUSPICIOUS
    # what to do is ONNX's own: no pickle globals to allow
    advice = advise(res)
    assert advice.case == "suspicious:onnx" and "custom-op libraries" in advice.action
    assert "--allow-global" not in advice.action and "torch.load" not in advice.action


def _sentencepiece_like() -> bytes:
    """A protobuf whose first field is a message (as a tokenizer.model's pieces are)."""
    piece = b"\x0a\x03abc" + b"\x15\x00\x00\x80\x3f"
    return b"".join(b"\x0a" + bytes([len(piece)]) + piece for _ in range(100))


def _other_formats(tmp_path: Path) -> dict[str, bytes]:
    buf = io.BytesIO()
    torch.save({"w": torch.ones(3)}, buf)
    save_file({"w": torch.ones(3)}, tmp_path / "x.safetensors")
    npy = io.BytesIO()
    np.save(npy, np.ones(3))
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr("a.txt", "x")
    return {"torch": buf.getvalue(), "safetensors": (tmp_path / "x.safetensors").read_bytes(),
            "pickle": pickle.dumps({"a": 1}, protocol=2), "pickle0": pickle.dumps([1], 0),
            "npy": npy.getvalue(), "zip": zipped.getvalue(),
            "gzip": gzip.compress(pickle.dumps([1])), "sentencepiece": _sentencepiece_like(),
            "text": b"hello world\n" * 100, "json": b'{"a": [1, 2, 3]}'}


def test_sniff_claims_no_other_format(tmp_path) -> None:
    for name, data in _other_formats(tmp_path).items():
        spec = detect(data[:HEAD_BYTES], len(data))
        assert spec is None or spec.format != Format.ONNX, name


def test_folder_scan_reads_onnx_files_instead_of_skipping_them(tmp_path, onnx) -> None:
    onnx.save(_rich_model(), tmp_path / "decoder.onnx")
    onnx.save(_external_model("../../etc/passwd"), tmp_path / "encoder.onnx")
    (tmp_path / "tokenizer.model").write_bytes(_sentencepiece_like())
    whole = (tmp_path / "decoder.onnx").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(whole[: len(whole) * 2 // 3])
    results = {Path(r.path).name: r for r in scan_paths([tmp_path])}
    assert results["tokenizer.model"].verdict == Verdict.SKIPPED  # a protobuf, not a model
    assert results["decoder.onnx"].format == Format.ONNX
    assert results["decoder.onnx"].verdict == Verdict.SUSPICIOUS  # its custom domains
    assert results["encoder.onnx"].verdict == Verdict.DANGEROUS
    # a model cut short is an unreadable ONNX file, never safe or skipped
    assert results["cut.onnx"].verdict == Verdict.ERROR
    assert results["cut.onnx"].error.startswith("not a readable onnx file")
    assert os.path.getsize(tmp_path / "cut.onnx") > HEAD_BYTES


def test_mutants_are_models_exactly_when_protobuf_reads_them_as_models(onnx) -> None:
    """3,000 seeded mutants of a real model: ours is a model (a complete ModelProto with a
    graph) exactly when protobuf's own parser reads one, and then names the same opsets, ops
    and external data; no mutant raises anything else."""
    import random

    from google.protobuf.message import DecodeError

    from inspector.formats.protowire import WireBudget, WireError

    original = _rich_model().SerializeToString()
    rng = random.Random(22)
    disagreements, models = [], 0
    for i in range(3000):
        data = overwrite_bytes(original, rng, 4)
        onnx_format.sniff(data[:HEAD_BYTES], len(data))
        try:
            ours = onnx_format.read_model(data)
        except (WireError, WireBudget):
            ours = None
        ref = onnx.ModelProto()
        try:
            ref.ParseFromString(data)
            ref_ok = ref.HasField("graph")
        except DecodeError:
            ref_ok = False
        if (ours is not None) != ref_ok:
            disagreements.append(i)
        elif ours is not None:
            models += 1
            opsets, ops, ext = _reference(ref)
            if (ours.opsets, ours.ops) != (opsets, ops) or sorted(
                    (e.tensor, e.location, e.offset, e.length) for e in ours.external) != ext:
                disagreements.append(i)
    assert disagreements == []
    assert 100 < models < 2900  # both answers occur


def test_schema_covers_every_field_of_the_installed_onnx_proto(onnx) -> None:
    """Each message field of onnx.proto (as the installed onnx builds it) is read as protobuf
    reads it: messages as messages (merged where not repeated), strings as bytes, repeated
    numbers packed or not. A field the schema missed would be skipped here but parsed, and
    possibly refused, by protobuf."""
    from google.protobuf.descriptor import FieldDescriptor as F
    from onnx import onnx_ml_pb2

    todo, seen, wrong = [(onnx_ml_pb2.ModelProto.DESCRIPTOR, "Model")], set(), []
    while todo:
        descriptor, name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for f in descriptor.fields:
            kind = onnx_format.SCHEMA[name].get(f.number)
            where = f"{descriptor.name}.{f.name}"
            if f.type == F.TYPE_MESSAGE:
                if kind is None or kind == "bytes" or kind.startswith("packed:"):
                    wrong.append((where, kind))
                    continue
                if (not f.is_repeated) != ((name, f.number) in onnx_format.SINGULAR):
                    wrong.append((where, "singular?"))
                todo.append((f.message_type, kind))
            elif f.type in (F.TYPE_STRING, F.TYPE_BYTES):
                if kind != "bytes":
                    wrong.append((where, kind))
            elif f.is_repeated and not (kind or "").startswith("packed:"):
                wrong.append((where, kind))
    assert wrong == []


def _field(number: int, payload: bytes | int) -> bytes:
    def varint(n: int) -> bytes:
        out = b""
        while True:
            out += bytes([n & 0x7F | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                return out
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_a_tensor_split_over_two_occurrences_is_merged_as_protobuf_merges_it(tmp_path,
                                                                             onnx) -> None:
    """The Constant's tensor written twice: its location in the first, EXTERNAL in the second.
    protobuf merges a singular message's occurrences, so the loader sees one external tensor
    reading from outside the folder; read occurrence by occurrence, neither is."""
    from onnx import TensorProto

    entry = _field(1, b"location") + _field(2, b"../../secret.bin")
    first = _field(8, b"cval") + _field(2, 1) + _field(1, 4) + _field(13, entry)
    second = _field(14, 1)
    attribute = _field(1, b"value") + _field(20, 4) + _field(5, first) + _field(5, second)
    node = _field(2, b"c") + _field(4, b"Constant") + _field(5, attribute)
    graph = _field(1, node) + _field(2, b"g")
    data = _field(1, 9) + _field(7, graph) + _field(8, _field(1, b"") + _field(2, 17))
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    ref = onnx.load(path, load_external_data=False)
    t = ref.graph.node[0].attribute[0].t
    assert t.data_location == TensorProto.EXTERNAL and t.external_data[0].value.startswith("..")
    res = scan_file(path)
    assert res.verdict == Verdict.DANGEROUS, res.to_json()
    hit = next(f for f in res.findings if f.code == "onnx-external-outside")
    assert "'../../secret.bin', a path with a '..' part" in hit.message and hit.member == "cval"
