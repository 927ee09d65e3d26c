"""GGUF: the header reader against llama.cpp's own Python reader (`gguf.GGUFReader`) on files
its writer builds, crafted headers as findings, chat templates that carry code (proven to run
under a plain Jinja2 render), and tensor statistics through the jailed worker."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import overwrite_bytes

from inspector.cli import main
from inspector.core.vocabulary import Format, Severity, Verdict
from inspector.formats import chat_template, gguf_header, spec_of
from inspector.gui.explain import code_safety_explanation
from inspector.sandbox.host.client import inspect_file
from inspector.scan.engine import scan_bytes, scan_file, scan_paths

pytest_plugins = ("sandbox_fixtures",)  # fixture: unchanged

gguf = pytest.importorskip("gguf", reason="gguf (llama.cpp's Python package) is in the dev extra")
Q = gguf.GGMLQuantizationType

BENIGN_TEMPLATE = (
    "{{- bos_token }}{%- set ns = namespace(system='') %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}{%- set ns.system = message['content'] | trim %}"
    "{%- elif message['role'] not in ['user', 'assistant'] %}"
    "{{- raise_exception('Conversation roles must be user or assistant') }}"
    "{%- else %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{- message['content'] | trim }}{{- '<|eot_id|>' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)


def _write(path: Path, alignment: int | None = None, big: bool = False,
           template: str | None = BENIGN_TEMPLATE, extra_kv: dict | None = None) -> dict:
    """A GGUF file from llama.cpp's writer: pairs of every value type, arrays, and tensors of
    every dense type plus two quantized ones; returns the dense tensors' values."""
    endian = gguf.GGUFEndian.BIG if big else gguf.GGUFEndian.LITTLE
    w = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -3)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -300)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 0.5)
    w.add_bool("t.bool", True)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**40))
    w.add_float64("t.f64", 1e-300)
    w.add_string("t.str", "héllo")
    w.add_array("t.ints", [1, -2, 3])
    w.add_array("t.floats", [0.25, -1.5])
    w.add_array("t.strings", ["<s>", "</s>", "ü"])
    w.add_array("t.bools", [True, False, True])
    w.add_array("t.empty", [])
    if template is not None:
        w.add_chat_template(template)
    for key, value in (extra_kv or {}).items():
        w.add_string(key, value)
    rng = np.random.default_rng(0)
    dense = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal(7).astype(np.float16),
        "f64": rng.standard_normal((2, 2)).astype(np.float64),
        "i8": np.arange(-5, 5, dtype=np.int8), "i16": np.arange(9, dtype=np.int16) * -7,
        "i32": np.arange(6, dtype=np.int32).reshape(2, 3) * 1000,
        "i64": np.array([2**40, -1], dtype=np.int64),
    }
    for name, arr in dense.items():
        w.add_tensor(name, arr)
    bf16 = torch.tensor([[1.5, -2.0, 3.25, 0.0]], dtype=torch.bfloat16)
    w.add_tensor("bf16", bf16.view(torch.uint8).numpy(), raw_dtype=Q.BF16)
    values = np.linspace(-1, 1, 2 * 64, dtype=np.float32).reshape(2, 64)
    w.add_tensor("q8", gguf.quants.quantize(values, Q.Q8_0), raw_dtype=Q.Q8_0)
    w.add_tensor("q4", gguf.quants.quantize(values, Q.Q4_0), raw_dtype=Q.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {**{k: torch.from_numpy(v) for k, v in dense.items()}, "bf16": bf16}


def _reference(path: Path) -> tuple[dict, dict, list, int]:
    """Pairs (contents), their type lists, tensor infos and alignment as GGUFReader reads them."""
    reader = gguf.GGUFReader(str(path))
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    values = {k: f.contents() for k, f in fields.items()}
    types = {k: tuple(int(t) for t in f.types) for k, f in fields.items()}
    tensors = [(t.name, tuple(int(d) for d in t.shape), int(t.tensor_type), int(t.data_offset),
                int(t.n_bytes)) for t in reader.tensors]
    return values, types, tensors, reader.alignment


@pytest.mark.parametrize(("alignment", "big"), [(None, False), (64, False), (1024, False),
                                                (None, True)])
def test_reader_agrees_with_gguf_reader(tmp_path, alignment, big) -> None:
    path = tmp_path / "model.gguf"
    _write(path, alignment, big)
    values, types, tensors, align = _reference(path)
    ours = gguf_header.read(path.read_bytes())
    assert ours.complete and not ours.problems, ours.problems
    assert ours.big_endian is big and ours.version == 3
    assert ours.alignment == align == (alignment or 32)
    got = {k: list(v) if not isinstance(v, (str, int, float, bool)) else v
           for k, v in ours.kv.items()}
    assert got.keys() == values.keys()
    for key, value in values.items():
        assert got[key] == pytest.approx(value) if isinstance(value, float) else \
            got[key] == value, key
    assert ours.kv_types == types
    assert [(t.name, t.dims, t.type_code, t.data_offset, t.n_bytes)
            for t in ours.tensors] == tensors
    assert {t.name: t.type_name for t in ours.tensors}["q4"] == "Q4_0"


def test_scan_recognises_gguf_by_its_bytes_and_finds_nothing_in_a_benign_file(tmp_path) -> None:
    path = tmp_path / "weights.bin"  # the name says nothing
    _write(path)
    res = scan_file(path)
    assert res.format == Format.GGUF and res.verdict == Verdict.SAFE, res.to_json()
    assert not res.findings and res.error is None
    assert spec_of("gguf").tensors and ".gguf" in spec_of("gguf").suffixes


def test_inspect_shows_statistics_of_dense_tensors_and_lists_quantized_ones(
        tmp_path, unchanged, capsys) -> None:
    path = tmp_path / "model.gguf"
    dense = _write(path)
    unchanged(path)
    report = inspect_file(path)
    assert report.error is None, report.error
    assert report.format == "gguf"
    by_key = {t.key: t for t in report.tensors}
    assert by_key.keys() == {*dense, "q8", "q4"}
    for key, t in dense.items():
        rec = by_key[key]
        assert rec.shape == list(t.shape) and rec.dtype == str(t.dtype).removeprefix("torch.")
        assert rec.min == pytest.approx(float(t.min())) and rec.max == pytest.approx(
            float(t.max()))
        assert rec.mean == pytest.approx(float(t.double().mean()))
    # quantized tensors: their raw blocks, with a digest and a note instead of statistics
    q4 = by_key["q4"]
    assert q4.dtype == "bits8" and q4.shape == [2, 36] and q4.stats_on is None
    assert q4.extra["note"].startswith("no statistics") and len(q4.digest) == 64
    listed = {o.key: o.repr for o in report.objects}
    assert listed.keys() == {"q8::ggml", "q4::ggml"}
    assert listed["q4::ggml"].startswith("Q4_0 tensor, shape [2, 64], 72 bytes")
    assert "no statistics" in listed["q4::ggml"]
    # the CLI's normal pipeline, as a user runs it
    assert main(["inspect", str(path), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert {t["key"] for t in cli["tensors"]} == {*dense, "q8", "q4"}
    # and its advice is GGUF's own, never torch.load's
    assert main(["inspect", str(path)]) == 0
    [advice] = [line for line in capsys.readouterr().out.splitlines()
                if line.startswith("advice:")]
    assert "llama.cpp" in advice and "torch.load" not in advice, advice
    gui = code_safety_explanation(report.scan)
    assert gui.headline.startswith("Safe — no code found in the GGUF")
    assert "chat template" in gui.meaning and "torch.load" not in gui.action


def test_diff_sees_a_flipped_bit_in_a_quantized_tensor(tmp_path) -> None:
    from inspector.sandbox.host.client import diff_files

    path, flipped = tmp_path / "a.gguf", tmp_path / "b.gguf"
    _write(path)
    q4 = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "q4")
    data = bytearray(path.read_bytes())
    data[q4.data_offset + 5] ^= 0x10
    flipped.write_bytes(bytes(data))
    report = diff_files(path, flipped)
    assert report["identical"] is False
    changed = [t["key"] for t in report["tensors"] if t["status"] != "identical"]
    assert changed == ["q4"], report["tensors"]


# -- chat templates that carry code ---------------------------------------------------------

def _payloads(canary: Path) -> dict[str, str]:
    cmd = f"touch {canary}"
    return {
        "cycler-globals": f"{{{{ cycler.__init__.__globals__.os.popen('{cmd}').read() }}}}",
        "lipsum-attr-concat": "{{ (lipsum|attr('__glo' ~ 'bals__'))['os'].popen('" + cmd +
                              "').read() }}",
        "escaped-underscores": "{{ (joiner|attr('\\x5f\\x5finit\\x5f\\x5f')|attr("
                               "'\\x5f\\x5fglobals\\x5f\\x5f'))['os'].popen('" + cmd +
                               "').read() }}",
    }


RENDER = """
import sys, gguf, jinja2
reader = gguf.GGUFReader(sys.argv[1])
template = reader.fields[sys.argv[2]].contents()
# what llama-cpp-python before 0.2.72 did with the file's template (CVE-2024-34359)
env = jinja2.Environment(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True)
env.from_string(template).render(messages=[], bos_token="", eos_token="")
"""


@pytest.mark.parametrize("variant", ["cycler-globals", "lipsum-attr-concat",
                                     "escaped-underscores"])
@pytest.mark.parametrize("key", ["tokenizer.chat_template", "tokenizer.chat_template.tool_use"])
def test_chat_template_payload_is_dangerous_and_runs_under_a_plain_render(
        tmp_path, canary, variant, key) -> None:
    path = tmp_path / "model.gguf"
    payload = _payloads(canary)[variant]
    if key == "tokenizer.chat_template":
        _write(path, template=payload)
    else:
        _write(path, extra_kv={key: payload})
    res = scan_file(path)
    inspect_file(path)  # reading the tensors never renders the template either
    assert not canary.exists(), "our scan rendered the template"
    assert res.verdict == Verdict.DANGEROUS, res.to_json()
    hits = [f for f in res.findings if f.code == "gguf-chat-template"]
    assert hits and hits[0].member == key and hits[0].severity == Severity.DANGEROUS
    # the template's real consumer runs it: a throwaway process writes the canary
    subprocess.run([sys.executable, "-c", RENDER, str(path), key], check=True, timeout=120,
                   capture_output=True)
    assert canary.exists()
    canary.unlink()


@pytest.mark.parametrize(("text", "severity"), [
    (BENIGN_TEMPLATE, None),
    ("{% for m in messages %}{{ m.content }}{% endfor %}", None),
    ("{{ cycler }}", Severity.SUSPICIOUS),
    ("{% include 'other.jinja' %}", Severity.SUSPICIOUS),
    ("{{ x|attr('content') }}", Severity.SUSPICIOUS),
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", Severity.DANGEROUS),
    ("{{ x['__globals__'] }}", Severity.DANGEROUS),
    ("{{ x|attr(name) }}", Severity.DANGEROUS),
    ("{{ self._TemplateReference__context }}", Severity.DANGEROUS),
    ("{{ m.popen }}", Severity.DANGEROUS),
    # Jinja2 cannot parse it, so it is searched
    ("{% generation %}{{ cycler.__init__.__globals__ }}", Severity.DANGEROUS),
    ("{% generation %}{{ lipsum }}", Severity.SUSPICIOUS),
])
def test_chat_template_check(text, severity) -> None:
    issues = chat_template.check(text)
    worst = issues[0].severity if issues else None
    assert worst == severity, issues


# -- crafted headers: each a finding, never a traceback -------------------------------------

def _s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _header(kvs: list[bytes], infos: list[bytes], version: int = 3,
            tensor_count: int | None = None, kv_count: int | None = None) -> bytes:
    return (b"GGUF" + struct.pack("<IQQ", version, len(infos) if tensor_count is None
                                  else tensor_count, len(kvs) if kv_count is None else kv_count)
            + b"".join(kvs) + b"".join(infos))


def _kv_u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, value)


def _info(name: str, dims: list[int], ggml_type: int = 0, offset: int = 0,
          n_dims: int | None = None) -> bytes:
    return (_s(name) + struct.pack("<I", len(dims) if n_dims is None else n_dims)
            + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ggml_type, offset))


def _with_data(header: bytes, nbytes: int, alignment: int = 32) -> bytes:
    return header + b"\0" * (-len(header) % alignment) + b"\x01" * nbytes


CRAFTED = {
    "huge kv count": (_header([], [], kv_count=2**62), "gguf-header-bounds"),
    "huge tensor count": (_header([], [], tensor_count=2**63 - 1), "gguf-header-bounds"),
    "huge key length": (b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**63) + b"x" * 16,
                        "gguf-header-bounds"),
    "huge array count": (_header([_s("a") + struct.pack("<IIQ", 9, 4, 2**60)], []),
                         "gguf-header-bounds"),
    "huge string array": (_header([_s("a") + struct.pack("<IIQ", 9, 8, 2**61)], []),
                          "gguf-header-bounds"),
    "n_dims past ggml's four": (_header([], [_info("t", [1] * 5)]), "gguf-header-bounds"),
    "n_dims 2**32-1": (_header([], [_info("t", [], n_dims=2**32 - 1)]), "gguf-header-bounds"),
    "element count overflow": (_with_data(_header([], [_info("t", [2**32, 2**32])]), 64),
                               "gguf-header-bounds"),
    "unknown value type": (_header([_s("a") + struct.pack("<I", 77)], []), "gguf-unknown-type"),
    "array of arrays": (_header([_s("a") + struct.pack("<IIQ", 9, 9, 1)], []),
                        "gguf-nested-array"),
    "unknown tensor type": (_with_data(_header([], [_info("t", [4], ggml_type=99)]), 32),
                            "gguf-unknown-tensor-type"),
    "data past the end": (_with_data(_header([], [_info("t", [1000])]), 16),
                          "gguf-data-truncated"),
    "overlapping tensors": (_with_data(_header([], [_info("a", [16]), _info("b", [8])]), 64),
                            "gguf-overlap"),
    "gap between tensors": (_with_data(_header([], [_info("a", [8]), _info("b", [8], offset=64)]),
                                       96), "gguf-layout"),
    "misaligned offset": (_with_data(_header([], [_info("a", [4], offset=4)]), 32),
                          "gguf-misaligned"),
    "alignment not a power of two": (_header([_kv_u32("general.alignment", 48)], []),
                                     "gguf-alignment"),
    "duplicate key": (_header([_kv_u32("a", 1), _kv_u32("a", 2)], []), "gguf-duplicate-key"),
    "duplicate tensor": (_with_data(_header([], [_info("a", [8]), _info("a", [8], offset=32)]),
                                    64), "gguf-duplicate-tensor"),
    "block size": (_with_data(_header([], [_info("q", [33], ggml_type=2)]), 64),
                   "gguf-block-size"),
    "cut inside a pair": (_header([_kv_u32("a", 1)], [])[:-2], "gguf-truncated"),
    "version 1": (b"GGUF" + struct.pack("<IIII", 1, 0, 0, 0), "gguf-version"),
    "version 99": (b"GGUF" + struct.pack("<IQQ", 99, 0, 0), "gguf-version"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_header_is_a_finding(case) -> None:
    data, code = CRAFTED[case]
    res = scan_bytes(data, "crafted.gguf")
    assert res.format == Format.GGUF
    assert res.error is None, res.error  # no parser exception reached the scan
    assert code in {f.code for f in res.findings}, res.to_json()
    assert res.verdict != Verdict.SAFE
    if code == "gguf-header-bounds":
        assert res.verdict == Verdict.DANGEROUS


@pytest.mark.parametrize("case", ["huge kv count", "n_dims 2**32-1", "data past the end",
                                  "overlapping tensors", "unknown tensor type"])
def test_the_worker_refuses_or_bounds_crafted_headers(tmp_path, case) -> None:
    from inspector.tensors.gguf_load import load_gguf
    from inspector.tensors.load import LoadError

    path = tmp_path / "crafted.gguf"
    path.write_bytes(CRAFTED[case][0])
    try:
        loaded = load_gguf(str(path))
    except LoadError as exc:
        assert exc.code == "load_failed" and "bad GGUF file" in exc.message
        return
    # what it still reads lies inside the file
    for t in loaded.values():
        if isinstance(t, torch.Tensor):
            assert t.untyped_storage().nbytes() == path.stat().st_size


def test_folder_scan_reads_gguf_files_instead_of_skipping_them(tmp_path) -> None:
    _write(tmp_path / "model-q4.gguf")
    (tmp_path / "mmproj.gguf").write_bytes(CRAFTED["huge kv count"][0])
    (tmp_path / "README.md").write_text("# a model\n")
    results = {Path(r.path).name: r for r in scan_paths([tmp_path])}
    assert results["README.md"].verdict == Verdict.SKIPPED
    assert results["model-q4.gguf"].verdict == Verdict.SAFE
    assert results["model-q4.gguf"].format == Format.GGUF
    assert results["mmproj.gguf"].verdict == Verdict.DANGEROUS


def test_mutated_headers_never_raise(tmp_path) -> None:
    """2,000 seeded mutants of a real file: each reads to problems or a header, never an
    exception (the scan would otherwise fall back to other readings and lose the findings)."""
    import random

    path = tmp_path / "model.gguf"
    _write(path)
    original = path.read_bytes()
    rng = random.Random(22)
    problems = 0
    for _ in range(2000):
        data = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        header = gguf_header.read(bytes(data))
        problems += bool(header.problems)
    assert problems > 100  # the mutants do reach the checks


def test_mutants_read_as_gguf_reader_reads_them(tmp_path) -> None:
    """800 seeded mutants of a real file, against llama.cpp's Python reader: where both read
    the header they agree on every pair's types, every tensor info and the alignment; where
    the reference refuses a mutant, ours reports at least one problem. Mutants with a
    header-bounds finding are not handed to the reference: it loops over declared counts."""
    import random
    import warnings

    path, mutant = tmp_path / "model.gguf", tmp_path / "mutant.gguf"
    _write(path)
    original = path.read_bytes()
    rng = random.Random(3)
    disagreements, agreed = [], 0
    for i in range(800):
        data = overwrite_bytes(original, rng, 3)
        ours = gguf_header.read(data)
        if any(p.code == "gguf-header-bounds" for p in ours.problems):
            continue
        mutant.write_bytes(data)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _, types, tensors, alignment = _reference(mutant)
        except (ValueError, KeyError, IndexError, UnicodeDecodeError):
            if not ours.problems:
                disagreements.append((i, "refused by the reference, no problem here"))
            continue
        if not ours.complete:
            disagreements.append((i, "read by the reference, not here"))
            continue
        agreed += 1
        mine = [(t.name, t.dims, t.type_code, t.data_offset, t.n_bytes) for t in ours.tensors]
        if (ours.kv_types, mine, ours.alignment) != (types, tensors, alignment):
            disagreements.append((i, "different reading"))
    assert disagreements == []
    assert agreed > 100
