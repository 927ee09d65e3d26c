"""Files read as the real readers read them (issue 22, "closed magic-number lists"): zlib with
any window size, gzip with reserved flag bits, LZMA-alone with any properties, npy headers
NumPy's own parser accepts (Python 2 longs), a legacy tar whose storage element size comes
from the right item, and a file that is a benign pickle and a zlib stream of a payload at once.

Each sample is first proven malicious: its payload runs under its target reader in a throwaway
process and creates its canary. Then the scan calls it dangerous and shows os.system, and
nothing of ours ran it."""

from __future__ import annotations

import gzip
import lzma
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from factories import _legacy_tar, call, p_global, p_string, touch_cmd
from proofs import canary_folders, payload_runs_test, proof, run_each_forked, scan_runs_nothing

from inspector import formats
from inspector.scan.engine import scan_file

LOADER = r"""
import gzip, io, lzma, pickle, sys, zlib
kind, path = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
try:
    if kind == "zlib":
        pickle.loads(zlib.decompress(raw))
    elif kind == "gzip":
        pickle.load(gzip.open(path))
    elif kind == "lzma":
        pickle.load(lzma.open(path))
    elif kind == "lzma-alone":
        pickle.loads(lzma.decompress(raw, format=lzma.FORMAT_ALONE))
    elif kind == "numpy":
        import numpy
        out = numpy.load(path, allow_pickle=True)
        if hasattr(out, "files"):
            [out[name] for name in out.files]
    elif kind == "torch":
        import torch
        torch.load(path, weights_only=False)
except Exception as exc:
    print("loader raised", type(exc).__name__, str(exc)[:200])
"""


def _payload(canary: Path) -> bytes:
    return call("os", "system", touch_cmd(canary))


def _proto0_payload(canary: Path) -> bytes:
    """os.system in protocol 0 (no PROTO opcode, so no search for one finds it)."""
    return p_global("os", "system") + b"(" + p_string(touch_cmd(canary)) + b"tR."


def zlib_window(wbits: int) -> Callable[[Path], bytes]:
    def build(canary: Path) -> bytes:
        c = zlib.compressobj(9, zlib.DEFLATED, wbits)
        return c.compress(_payload(canary)) + c.flush()
    return build


def gzip_reserved_flags(canary: Path) -> bytes:
    data = bytearray(gzip.compress(_payload(canary), mtime=0))
    data[3] |= 0xE0  # the reserved FLG bits: Python's gzip ignores them, zlib refuses them
    return bytes(data)


def lzma_alone(lc: int, lp: int, pb: int, dict_size: int = 1 << 20) -> Callable[[Path], bytes]:
    def build(canary: Path) -> bytes:
        filters = [{"id": lzma.FILTER_LZMA1, "lc": lc, "lp": lp, "pb": pb,
                    "dict_size": dict_size}]
        return lzma.compress(_payload(canary), format=lzma.FORMAT_ALONE, filters=filters)
    return build


def _npy(header: str, data: bytes) -> bytes:
    text = header.encode("latin-1")
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    return formats.NPY_MAGIC + b"\x01\x00" + struct.pack("<H", len(text)) + text + data


def npy_python2_long(canary: Path) -> bytes:
    return _npy("{'descr': '|O', 'fortran_order': False, 'shape': (1L,), }", _payload(canary))


def npz_python2_long(canary: Path) -> bytes:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("a.npy", _npy("{'descr': '|O', 'fortran_order': False, 'shape': (2L,), }",
                                  _payload(canary)))
    return out.getvalue()


def legacy_tar_wrong_global(canary: Path) -> bytes:
    """A storage whose (key, location, storage_type) pickle also imports HalfStorage (2-byte
    elements) before its real type DoubleStorage (8): read with the first global's size the
    walk lands inside the data and never reaches the protocol 0 payload torch reads next."""
    args = (b"\x80\x02" + p_global("torch", "HalfStorage") + b"0" + b"X\x01\x00\x00\x000"
            + b"X\x03\x00\x00\x00cpu" + p_global("torch", "DoubleStorage") + b"\x87.")
    storages = (b"\x80\x02K\x02." + args + struct.pack("<q", 64) + bytes(64 * 8)
                + _proto0_payload(canary))
    return _legacy_tar(storages, b"\x80\x02K\x00.", b"\x80\x02}.")


def zlib_benign_pickle_polyglot(canary: Path) -> bytes:
    """A benign pickle (frozenset, (), None, a big int) that is also a zlib stream whose
    content runs os.system: the zlib header is MARK FROZENSET, the first stored block's header
    MARK TUPLE NONE LONG4, and the LONG4's digits run over the whole stream."""
    content = b"M\x05\x000" + _proto0_payload(canary)  # BININT2 5, POP, the payload
    length = 0x4E74  # stored block length: its bytes read 't' 'N'; their complement 0x8b 0xb1
    block = content.ljust(length, b"N")
    stream = (b"\x28\x91" + b"\x28" + struct.pack("<HH", length, length ^ 0xFFFF) + block
              + b"\x01\x00\x00\xff\xff" + struct.pack(">I", zlib.adler32(block)))
    digits = struct.unpack("<I", stream[6:10])[0]  # LONG4's length: 0xb1 and the first content
    stop = 10 + digits
    assert stop > len(stream)
    return stream + bytes(stop - len(stream)) + b"."


SAMPLES: dict[str, tuple[str, Callable[[Path], bytes]]] = {
    **{f"zlib_window_{w}": ("zlib", zlib_window(w)) for w in (9, 10, 12, 13, 14)},
    "gzip_reserved_flags": ("gzip", gzip_reserved_flags),
    "lzma_alone_lp2": ("lzma", lzma_alone(0, 2, 0)),
    "lzma_alone_lc0": ("lzma", lzma_alone(0, 0, 0)),
    "lzma_alone_odd_dict": ("lzma-alone", lzma_alone(1, 1, 1, (1 << 20) + 12345)),
    "npy_python2_long": ("numpy", npy_python2_long),
    "npz_python2_long": ("numpy", npz_python2_long),
    "legacy_tar_wrong_global": ("torch", legacy_tar_wrong_global),
    "zlib_benign_pickle_polyglot": ("zlib", zlib_benign_pickle_polyglot),
}


@pytest.fixture(scope="module")
def proven(tmp_path_factory, python_exe):
    """Every sample built and run under its reader in a throwaway process: {name: (path,
    canary folder, files the run created, its output)}; the canaries are removed after."""
    work = tmp_path_factory.mktemp("readers")
    with canary_folders("rdr", sorted(SAMPLES)) as (short, canaries):
        paths = {name: work / f"{name}.bin" for name in canaries}
        for name, path in paths.items():
            path.write_bytes(SAMPLES[name][1](canaries[name] / "c"))
        runs = [[SAMPLES[name][0], str(path)] for name, path in paths.items()]
        outputs = run_each_forked(python_exe, LOADER, runs, short, ("numpy", "torch"))
        yield {name: proof(path, canaries[name], output)
               for (name, path), (_, output) in zip(paths.items(), outputs, strict=True)}


test_the_payload_runs_under_its_reader = payload_runs_test(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_scan_reads_it_as_its_reader_does(proven, name):
    res = scan_runs_nothing(*proven[name][:2])
    assert res.verdict == "dangerous", res.to_json()
    assert any(g.import_name == "os.system" for g in res.globals), res.to_json()


def test_the_polyglot_is_also_a_benign_pickle_to_pickle_load(proven):
    import pickle

    path = proven["zlib_benign_pickle_polyglot"][0]
    with open(path, "rb") as fh:
        value = pickle.load(fh)  # frozenset, (), None, then the LONG4 the STOP returns
    assert isinstance(value, int)
    assert "polyglot" in {f.code for f in scan_file(path).findings}


def test_benign_streams_with_those_headers_stay_unflagged(tmp_path):
    import pickle

    benign = pickle.dumps({"step": 3, "lr": 0.1}, protocol=2)
    for name, data in {
        "zlib9": _compressed_window(benign, 9),
        "gzip": _reserved(gzip.compress(benign, mtime=0)),
        "lzma": lzma.compress(benign, format=lzma.FORMAT_ALONE, filters=[
            {"id": lzma.FILTER_LZMA1, "lc": 0, "lp": 2, "pb": 0}]),
        "npy": _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2L,), }", bytes(8)),
    }.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(data)
        res = scan_file(path)
        assert res.error is None and res.verdict in ("safe", "suspicious"), (name, res.to_json())
        assert not res.globals, (name, res.to_json())


def _compressed_window(data: bytes, wbits: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return c.compress(data) + c.flush()


def _reserved(data: bytes) -> bytes:
    out = bytearray(data)
    out[3] |= 0xE0
    return bytes(out)


def _numpy_reads(buf: bytes):
    """(NpyHeader, data offset) as NumPy's own header reader takes them, or its error's type."""
    import io
    import warnings

    from numpy.lib import _format_impl

    fp = io.BytesIO(buf)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            version = _format_impl.read_magic(fp)
            shape, fortran, dtype = _format_impl._read_array_header(
                fp, version, max_header_size=2**64)
    except Exception as exc:
        return type(exc).__name__
    return formats.NpyHeader(shape, fortran, bool(dtype.hasobject)), fp.tell()


def test_headers_read_without_numpy_are_read_as_numpy_reads_them():
    """The npy headers `parse_npy_header` reads without importing NumPy (those `numpy.save`
    writes for numeric and object arrays) give NumPy's own answer, on headers NumPy wrote for
    every kind of dtype, shape, order and version and on 30,000 mutants of them; the rest go
    to NumPy."""
    import io
    import random

    import numpy as np
    from numpy.lib import _format_impl

    from inspector.formats import sniffing

    seeds = []
    for dtype in ("b1", "i1", "u1", "<i2", ">u4", "i8", "f2", "<f4", ">f8", "c8", "c16", "O",
                  "M8[ns]", "V4", "S3", "U2", [("a", "<f4"), ("b", "O")]):
        for shape in ((), (0,), (3,), (2, 3), (1, 2, 3, 4), (10**5,)):
            for order in "CF":
                array = np.empty(shape, dtype=dtype, order=order)
                for version in (None, (2, 0), (3, 0)):
                    out = io.BytesIO()
                    _format_impl._write_array_header(
                        out, _format_impl.header_data_from_array_1_0(array), version)
                    seeds.append(out.getvalue())
    rng = random.Random(7)
    fast = []
    for i in range(len(seeds) + 30_000):
        buf = bytearray(seeds[i % len(seeds)])
        for _ in range(0 if i < len(seeds) else rng.randint(1, 3)):
            j = rng.randrange(len(buf))
            choice = rng.random()
            if choice < 0.5:
                buf[j] = rng.choice(b"0123456789 ,()'<>|TrueFalsifbcO\n\x00xL_")
            elif choice < 0.75:
                del buf[j]
            else:
                buf.insert(j, rng.choice(b"0123456789 ,()'\n_L"))
        if len(buf) < 12 or bytes(buf[:6]) != sniffing.NPY_MAGIC:
            continue
        start = 10 if buf[6] == 1 else 12
        (hlen,) = struct.unpack_from("<H" if start == 10 else "<I", buf, 8)
        got = sniffing._as_numpy_writes_it(buf, start, hlen)
        if got is not None:
            fast.append(i)
            assert got == _numpy_reads(bytes(buf)), bytes(buf[:120])
    # every numeric and object header NumPy wrote took the path, and mutants that kept its
    # form did too
    assert sum(i < len(seeds) for i in fast) == 12 * 6 * 2 * 3
    assert sum(i >= len(seeds) for i in fast) > 50
