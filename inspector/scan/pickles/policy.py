"""What a pickle import means: torch's weights_only allowlist, a curated deny list, the rest.

The allowlist and opcode set come from the installed torch's `torch/_weights_only_unpickler.py`,
read with `ast` (torch is never imported) and cached per torch version in the user cache
folder. Entries torch builds in loops over its own runtime objects (dtypes, storage and tensor
classes, quantization schemes) cannot be read from the source without running it, so they come
from the built-in table below; when torch is not installed the whole built-in list is used.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

from inspector.core.vocabulary import Severity
from inspector.scan.pickles.calls import (
    CALL_ALLOWED,
    DATA_CLASSES,
    DEFERRED_CALLS,
    LITERAL_CALLS,
    CalledArgument,
    words,
)
from inspector.scan.pickles.class_source import is_enum_class, source_bases
from inspector.scan.pickles.joblib_arrays import WRAPPER as JOBLIB_WRAPPER
from inspector.scan.pickles.opcodes import OPCODE_BYTES, WEIGHTS_ONLY_OPCODES_DEFAULT
from inspector.scan.pickles.presets import PRESET_GLOBALS, PRESETS
from inspector.scan.pickles.presets import numpy_dtype_class as numpy_dtype_class
from inspector.scan.pickles.presets import numpy_dtype_classes as numpy_dtype_classes
from inspector.scan.pickles.static_source import cache_dir, resolve

_DTYPES = words(
    "float16 float32 float64 bfloat16 complex32 complex64 complex128 bool uint8 int8 int16 int32 "
    "int64 uint16 uint32 uint64 quint8 qint8 qint32 quint4x2 quint2x4 bits1x8 bits2x4 bits4x2 "
    "bits8 bits16 float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float8_e8m0fnu "
    "float4_e2m1fn_x2"
) + [f"{p}int{i}" for p in ("", "u") for i in range(1, 8)]
_DENSE = words("BFloat16 Bool Byte Char Double Float Half Int Long Short")
_STORAGE_ONLY = words("ComplexDouble ComplexFloat")
_QUANT_STORAGE = words("QInt32 QInt8 QUInt2x4 QUInt4x2 QUInt8")
_QSCHEMES = words(
    "per_tensor_affine per_tensor_symmetric per_channel_affine per_channel_symmetric "
    "per_channel_affine_float_qparams"
)
_REBUILD = words(
    "_rebuild_parameter _rebuild_parameter_with_state _rebuild_qtensor _rebuild_tensor "
    "_rebuild_tensor_v2 _rebuild_tensor_v3 _rebuild_sparse_tensor _rebuild_meta_tensor_no_storage "
    "_rebuild_nested_tensor _rebuild_wrapper_subclass _rebuild_device_tensor_from_numpy "
    "_rebuild_device_tensor_from_cpu_tensor"
)
_LITERAL = words(
    "collections.OrderedDict collections.Counter torch.nn.parameter.Parameter "
    "torch.serialization._get_layout torch.Size torch.Tensor torch.device _codecs.encode "
    "builtins.bytearray builtins.set builtins.complex torch._tensor._rebuild_from_type_v2"
)

# Built by torch in loops over runtime objects; not readable from its source without running it.
DYNAMIC_ALLOWED = frozenset(
    [f"torch.{d}" for d in _DTYPES]
    + [f"torch.{q}" for q in _QSCHEMES]
    + [f"torch.{k}Storage" for k in _DENSE + _STORAGE_ONLY + _QUANT_STORAGE]
    + [f"torch.cuda.{k}Storage" for k in _DENSE + _STORAGE_ONLY]
    + [f"{m}.{k}Tensor" for m in ("torch", "torch.cuda") for k in _DENSE]
    + [f"{m}.{k}Tensor" for m in ("torch.sparse", "torch.cuda.sparse") for k in _DENSE
       if k != "Bool"]
    + ["torch.storage.TypedStorage", "torch.storage.UntypedStorage"]
)
BUILTIN_ALLOWED = DYNAMIC_ALLOWED | frozenset(_LITERAL + [f"torch._utils.{f}" for f in _REBUILD])
BUILTIN_BLOCKED_MODULES = frozenset({"sys", "os", "posix", "nt"})

# The deny list, by capability: (reason, whole modules with every submodule, single callables).
# A reviewer adds an entry under the capability it gives a pickle; the finding quotes the reason.
CAPABILITIES: dict[str, tuple[str, str, str]] = {
    "run code": ("runs programs, shell commands or Python code", """
        os posix nt subprocess _posixsubprocess runpy pty multiprocessing concurrent asyncio
        asyncore asynchat threading _thread signal atexit pdb bdb code codeop doctest idlelib
        timeit cProfile profile _lsprof trace webbrowser antigravity pip ensurepip setuptools
        distutils venv _osx_support _aix_support platform uuid test pydoc _pyrepl sysconfig
        site torch.utils.collect_env torch.utils.cpp_extension torch._inductor torch._dynamo
        torch.compiler torch.export torch.fx torch.ops torch._C torch.library torch.classes
        torch.multiprocessing torch.distributed.rpc torch.utils._config_module numpy.testing
        numpy.f2py numpy.distutils torch.distributed.run torch.distributed.launch
        torch.distributed.launcher torch.distributed.elastic torch.distributed.debug
        torch.distributed.checkpoint._experimental.checkpoint_process
        torch.distributed._symmetric_memory._nvshmem_triton torch.backends.xeon
        torch.testing._internal torch._strobelight torch.utils._strobelight
        torch.utils._get_clean_triton torch.utils.benchmark.utils.valgrind_wrapper
        torch._vendor.quack torch.cuda._memory_viz
    """, """
        builtins.exec builtins.breakpoint builtins.input builtins.exit builtins.quit
        builtins.help builtins.__build_class__ builtins.apply builtins.execfile torch.compile
        torch.jit.load torch.jit._load_for_lite_interpreter torch.jit.CompilationUnit
    """),
    "evaluate text": ("evaluates text as Python code or a template", """
        annotationlib sympy.parsing numexpr pandas.core.computation jinja2 mako
    """, """
        builtins.eval builtins.compile typing._eval_type typing.ForwardRef._evaluate
        typing.evaluate_forward_ref typing.get_type_hints sympy.sympify
        sympy.core.sympify.sympify pandas.eval dataclasses._create_fn
    """),
    "write files": ("writes, deletes, maps or opens files", """
        io _io _pyio pathlib shutil tempfile tarfile zipfile zipapp compileall py_compile mmap
        fcntl shelve dbm glob fileinput linecache logging codecs numpy.lib.format
        numpy.lib._format_impl numpy.lib.npyio numpy.lib._npyio_impl numpy.core.memmap
        numpy._core.memmap numpy.lib._datasource torch.utils.tensorboard torch.onnx
        torch.utils.hipify
    """, """
        builtins.open numpy.save numpy.savez numpy.savez_compressed numpy.savetxt numpy.memmap
        numpy.ndarray.tofile numpy.ndarray.dump torch.save
        torch.from_file torch.UntypedStorage.from_file
        torch.TypedStorage.from_file torch.storage.UntypedStorage.from_file
        torch.storage.TypedStorage.from_file torch.profiler.profiler.tensorboard_trace_handler
    """),
    "open sockets or databases": ("opens sockets, network connections or databases", """
        socket _socket ssl select selectors socketserver http urllib urllib3 requests httpx
        aiohttp httplib2 xmlrpc wsgiref smtplib ftplib poplib imaplib nntplib telnetlib sqlite3
        _sqlite3 psycopg psycopg2 pymysql MySQLdb sqlalchemy redis pymongo paramiko
        torch.distributed.rendezvous
    """, """
        torch.distributed.distributed_c10d.init_process_group
        torch.distributed.device_mesh.init_device_mesh
    """),
    "import modules": ("imports modules or loads code by name", """
        importlib imp zipimport pkgutil torch.hub torch.package
    """, """
        builtins.__import__ torch.utils.data.datapipes.utils.decoder.basichandlers
    """),
    "load nested data": ("unpickles or loads data that can itself run code", """
        marshal pickle _pickle cPickle dill cloudpickle jsonpickle joblib yaml pandas.io
        torch.serialization
    """, """
        numpy.load numpy.loadtxt numpy.fromfile pandas.read_pickle
        pandas.read_csv torch.load torch.storage._load_from_bytes
    """),
    "reach the interpreter": ("reaches sys, memory or interpreter internals (a gadget for any "
                              "of the above)", """
        sys gc inspect types operator _operator ctypes _ctypes cffi resource termios tty
        readline rlcompleter mailcap cgi cgitb
    """, """
        builtins.getattr builtins.setattr builtins.delattr builtins.globals builtins.locals
        builtins.vars builtins.type builtins.super builtins.memoryview functools.partial
        functools.reduce _functools.partial _functools.reduce copyreg.add_extension
        copyreg.pickle copyreg._inverted_registry
        copyreg._extension_registry
    """),
}
# The gadget or advisory behind a deny entry, kept beside it as data; the finding quotes it.
# Entries without a note of their own are there for their capability alone.
DENY_NOTES: dict[str, str] = {
    "os": "os.system / os.popen: the classic pickle payload (REDUCE of a shell command)",
    "posix": "what pickle.dumps(os.system) writes on Linux",
    "nt": "what pickle.dumps(os.system) writes on Windows",
    "subprocess": "Popen/run/check_output: CVE-2025-32434-style payloads once weights_only "
                  "was bypassed",
    "runpy": "run_path/run_module execute a file or module by name",
    "timeit": "timeit.Timer(stmt).timeit() compiles and runs its statement",
    "cProfile": "cProfile.run(code) executes its text",
    "profile": "profile.run(code) executes its text",
    "pdb": "pdb.run(code) executes its text",
    "pip": "pip.main(['install', URL]) installs and runs a package's setup code",
    "_osx_support": "helpers that run compiler commands through os.popen",
    "uuid": "uuid._get_command_stdout runs a program (picklescan bypass report)",
    "torch.utils.collect_env": "collect_env.run(cmd) runs a shell command",
    "torch.utils.cpp_extension": "load_inline compiles and loads C++ code",
    "torch._inductor": "its code cache compiles and runs generated code",
    "torch.distributed.run": "torchrun's entry point: main(['--no-python', PROGRAM, ...]) "
                             "starts any program (round 56)",
    "torch.distributed.launch": "the older torchrun entry point, the same launcher",
    "torch.distributed.launcher": "elastic_launch starts worker processes of any entry point",
    "torch.distributed.elastic": "its agents and multiprocessing start processes "
                                 "(start_processes, SubprocessHandler's Popen, etcd_server)",
    "torch.backends.xeon": "run_cpu launches a program under numactl or taskset",
    "torch.testing._internal": "test helpers that run shell commands (common_utils.shell)",
    "torch.cuda._memory_viz": "downloads flamegraph.pl and runs it",
    "torch.distributed.distributed_c10d.init_process_group":
        "its init_method listens on or connects to tcp:// addresses and creates file:// "
        "stores (round 57)",
    "torch.distributed.rendezvous": "the rendezvous handlers behind init_process_group: "
                                    "TCP stores and file stores",
    "torch.onnx": "export(model, args, path) writes a file anywhere",
    "torch.utils.tensorboard": "SummaryWriter(logdir) creates the folder and an event file",
    "torch.utils.hipify": "hipify rewrites the source files of a project folder",
    "torch.jit.load": "loading TorchScript runs scripted __setstate__ code",
    "builtins.exec": "executes Python source",
    "builtins.eval": "evaluates Python source",
    "builtins.compile": "compiles source for a later exec",
    "typing._eval_type": "evaluates a ForwardRef's text (round 12 review)",
    "typing.ForwardRef._evaluate": "evaluates the reference's text",
    "sympy.sympify": "sympify(str) parses with eval",
    "builtins.open": "opens or creates any file for writing",
    "numpy.memmap": "mode 'w+' creates and sizes a file",
    "numpy.ndarray.tofile": "writes an array to any path",
    "torch.save": "writes a file anywhere",
    "torch.UntypedStorage.from_file": "shared=True maps and writes a file",
    "shutil": "copyfile/rmtree copy over or delete files",
    "logging": "FileHandler creates the file it is given",
    "pathlib": "Path.touch / write_text / unlink (data classes are allowed separately)",
    "sqlite3": "connect(path) creates a database file",
    "socket": "connects out: exfiltration or a reverse shell",
    "importlib": "import_module reaches any module, then getattr reaches any callable",
    "builtins.__import__": "the usual first step of a getattr gadget",
    "pickle": "pickle.loads of an inner payload hides it from one-level scanners",
    "_pickle": "the C module behind pickle.loads",
    "marshal": "marshal.loads of code objects, run through types.FunctionType",
    "torch.serialization": "torch.load(weights_only=False) of an inner archive",
    "builtins.getattr": "getattr(module, 'system'): reaches a callable the scanner never sees "
                        "imported",
    "operator": "attrgetter/methodcaller call methods by name",
    "functools.partial": "wraps any callable with its arguments for a later call",
    "copyreg.add_extension": "EXT opcodes import through the extension registry",
    "ctypes": "calls native functions by address",
}


@dataclass(frozen=True)
class DenyEntry:
    """One deny-list entry: the capability it gives a pickle, why, and the gadget behind it."""

    entry: str
    capability: str
    reason: str
    note: str

    @property
    def text(self) -> str:
        """The finding's wording: `can CAPABILITY: REASON (NOTE)`."""
        note = f" ({self.note})" if self.note else ""
        return f"can {self.capability}: {self.reason}{note}"


DENY: dict[str, DenyEntry] = {}
for _capability, (_reason, _modules, _names) in CAPABILITIES.items():
    for _entry in words(_modules) + words(_names):
        DENY[_entry] = DenyEntry(_entry, _capability, _reason, DENY_NOTES.get(_entry, ""))
_DENY: dict[str, str] = {entry: d.text for entry, d in DENY.items()}
# The entries that name a whole module (the second column): a module object whose attributes are
# the capability, as opposed to one callable
DENY_MODULES = frozenset(m for _, modules, _ in CAPABILITIES.values() for m in words(modules))
# A final name like these (or starting with one of them and "_") is dangerous in any module
# outside the allowlist: loaders, runners and shell helpers hide under many module names.
DENY_LEAF_NAMES = frozenset(words("""
system popen popen2 popen3 popen4 spawn spawnl spawnv spawnve execv execve execl execvp
eval exec execfile compile __import__ import_module load loads run run_path run_module
check_call check_output call getoutput getstatusoutput runstring runsource runcode
open urlopen urlretrieve from_file tofile rmtree unlink write_text write_bytes save savez
savetxt dump to_pickle to_csv
"""))
# Modules whose C implementation a pickle may name instead: the finding names the real import.
REAL_MODULES = {"posix": "os", "nt": "os", "_io": "io", "_pickle": "pickle", "_socket": "socket",
                "_functools": "functools",
                "_operator": "operator", "_codecs": "codecs", "_posixsubprocess": "subprocess",
                "_sqlite3": "sqlite3", "__builtin__": "builtins"}
# Plain data classes of stock files outside torch's weights_only allowlist:
# torch.distributed.checkpoint's `.metadata` (pickled with plain pickle) and the paths in it
# and in Lightning checkpoints.
_DCP_DATA = frozenset(words("""
torch.distributed.checkpoint.metadata.Metadata
torch.distributed.checkpoint.metadata.MetadataIndex
torch.distributed.checkpoint.metadata.ChunkStorageMetadata
torch.distributed.checkpoint.metadata.TensorStorageMetadata
torch.distributed.checkpoint.metadata.BytesStorageMetadata
torch.distributed.checkpoint.metadata.TensorProperties
torch.distributed.checkpoint.metadata.StorageMeta
torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING
torch.distributed.checkpoint.filesystem._StorageInfo
torch.distributed.checkpoint.planner.LoadItemType
torch.distributed.checkpoint.planner.WriteItemType
torch.strided torch.contiguous_format torch.channels_last
"""))
_PATHS = frozenset(words("""
pathlib.PosixPath pathlib.PurePosixPath pathlib.WindowsPath pathlib.PureWindowsPath pathlib.Path
pathlib._local.PosixPath pathlib._local.PurePosixPath pathlib._local.WindowsPath
pathlib._local.PureWindowsPath pathlib._local.Path
"""))
KNOWN_DATA = _DCP_DATA | _PATHS
_LEAF_PREFIX_RE = re.compile(r"(?:load|exec|eval|run|spawn|popen|system|compile)(?:_|[A-Z])")
_SAFE_DUNDERS = frozenset({"__main__", "__builtin__", "__torch__", "__new__"})

@dataclass(frozen=True)
class WeightsOnlyRules:
    """torch.load(weights_only=True) as far as a static scan can tell."""

    allowed: frozenset[str]
    blocked_modules: frozenset[str]
    opcodes: frozenset[int]
    source: str


@dataclass(frozen=True)
class Classification:
    """How one import is classified, and why."""

    severity: str
    reason: str


def _torch_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


def _torch_version(torch_dir: Path) -> str | None:
    try:
        text = (torch_dir / "version.py").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match.group(1) if match else None


def _function(tree: ast.AST, name: str) -> ast.AST | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _method(tree: ast.Module, cls: str, name: str) -> ast.AST | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return _function(node, name)
    return None


def parse_unpickler_source(source: str) -> dict:
    """Read the allowlist's literal entries, blocked modules and opcode set from torch's source."""
    tree = ast.parse(source)
    allowed: set[str] = set()
    allowed_fn = _function(tree, "_get_allowed_globals")
    for node in ast.walk(allowed_fn) if allowed_fn else ():
        if isinstance(node, ast.Dict):
            allowed.update(k.value for k in node.keys
                           if isinstance(k, ast.Constant) and isinstance(k.value, str))
        elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
              and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            allowed.add(node.slice.value)
    rebuild_fn = _function(tree, "_tensor_rebuild_functions")
    for node in ast.walk(rebuild_fn) if rebuild_fn else ():
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "torch._utils":
            allowed.add(f"torch._utils.{node.attr}")
    blocked: list[str] = []
    for node in tree.body:
        if (isinstance(node, ast.Assign | ast.AnnAssign) and "_blocklisted_modules"
                in ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target)):
            blocked = [e.value for e in ast.walk(node.value)
                       if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    load_fn = _method(tree, "Unpickler", "load")
    opcodes = sorted({OPCODE_BYTES[n.id] for n in ast.walk(load_fn) if isinstance(n, ast.Name)
                      and n.id in OPCODE_BYTES}) if load_fn else []
    if not allowed or not opcodes:
        raise ValueError("unrecognised _weights_only_unpickler.py layout")
    return {"allowed": sorted(allowed), "blocked_modules": blocked, "opcodes": opcodes}


def _builtin_rules(why: str) -> WeightsOnlyRules:
    return WeightsOnlyRules(BUILTIN_ALLOWED, BUILTIN_BLOCKED_MODULES, WEIGHTS_ONLY_OPCODES_DEFAULT,
                            f"built-in list ({why})")


@functools.cache
def weights_only_rules() -> WeightsOnlyRules:
    """The installed torch's rules (cached per version on disk), else the built-in list."""
    torch_dir = _torch_dir()
    if torch_dir is None:
        return _builtin_rules("torch not installed")
    src = torch_dir / "_weights_only_unpickler.py"
    version = _torch_version(torch_dir)
    try:
        stat = src.stat()
    except OSError:
        return _builtin_rules("torch has no _weights_only_unpickler.py")
    stamp = f"{version}|{stat.st_size}|{stat.st_mtime_ns}"
    safe_version = re.sub(r"[^\w.+-]", "_", str(version))
    cache = cache_dir() / f"weights-only-{safe_version}.json"
    parsed = None
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if cached.get("stamp") == stamp:
            parsed = cached
    except (OSError, ValueError):
        pass
    if parsed is None:
        try:
            parsed = parse_unpickler_source(src.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError) as exc:
            return _builtin_rules(f"could not read torch {version}: {exc}")
        parsed["stamp"] = stamp
        try:
            from inspector.core.atomic import write_text_atomic

            cache.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(cache, json.dumps(parsed), overwrite=True)
        except OSError:
            pass  # a read-only home only costs a re-parse next time
    return WeightsOnlyRules(
        frozenset(parsed["allowed"]) | DYNAMIC_ALLOWED,
        frozenset(parsed["blocked_modules"]),
        frozenset(parsed["opcodes"]),
        f"torch {version}",
    )


def _candidates(module: str, name: str) -> list[list[str]]:
    """Dotted paths an import can reach: the full path and each walk from a name component."""
    mod_parts = module.split(".")
    name_parts = name.split(".")
    full = mod_parts + name_parts
    return [full] + [name_parts[i:] for i in range(len(name_parts) - 1)]


def _deny_reason(path: list[str]) -> str | None:
    for i in range(1, len(path) + 1):
        prefix = ".".join(path[:i])
        reason = _DENY.get(prefix)
        if reason is not None:
            return f"{prefix} {reason}"
    return None


def real_name(module: str, name: str) -> str:
    """The import as a user would write it: `os.system` for a pickle's `posix.system`."""
    head, _, rest = module.partition(".")
    real = REAL_MODULES.get(head, head)
    return f"{real}{'.' if rest else ''}{rest}.{name}"


@functools.lru_cache(maxsize=4096)
def classify(module: str, name: str, rules: WeightsOnlyRules | None = None) -> Classification:
    """Classify `module.name`: safe (weights_only allows it), dangerous, or suspicious."""
    rules = rules or weights_only_rules()
    key = f"{module}.{name}"
    safe, dangerous, suspicious = Severity.SAFE, Severity.DANGEROUS, Severity.SUSPICIOUS
    if module not in rules.blocked_modules and key in rules.allowed:
        return Classification(safe, "allowed by torch.load(weights_only=True)")
    if key in _DCP_DATA:
        return Classification(safe, "plain data class of torch.distributed.checkpoint metadata; "
                                    "torch.load(weights_only=True) does not allow it")
    if key in _PATHS:
        return Classification(safe, "a filesystem path (plain data), as torch.distributed."
                                    "checkpoint metadata and Lightning checkpoints hold; "
                                    "torch.load(weights_only=True) does not allow it, "
                                    f"{preset_flags().get(key, '--allow-global ' + key)} "
                                    "loads it")
    if key == JOBLIB_WRAPPER:
        return Classification(suspicious, "joblib's stand-in for a NumPy array, judged as one: "
                                          "joblib.load reads the array's bytes after it, and so "
                                          "does this scan (an object array's own pickle is "
                                          "scanned); torch.load(weights_only=True) does not "
                                          "allow it")
    parts = module.split(".") + name.split(".")
    if any(p.startswith("__") and p.endswith("__") and p not in _SAFE_DUNDERS for p in parts):
        return Classification(dangerous,
                              "reaches interpreter internals through a dunder attribute")
    if key in DATA_CLASSES:
        return Classification(suspicious, f"{DATA_CLASSES[key]}; not allowed by torch.load("
                                          "weights_only=True), the file only loads with "
                                          "weights_only=False")
    for path in _candidates(module, name):
        reason = _deny_reason(path)
        if reason:
            if path is not parts and len(path) < len(parts):
                reason += f" (reached by attribute walk: {key})"
            return Classification(dangerous, reason)
    # Python's names are case-sensitive, but `Popen` is `popen`'s class: leaf names match
    # whatever their case
    if parts[-1].lower() in DENY_LEAF_NAMES or _LEAF_PREFIX_RE.match(parts[-1]):
        return Classification(dangerous, f"'{parts[-1]}' names a callable that runs code, "
                                         "loads data or opens, writes or deletes files")
    # what the name IS: a module that re-exports a denied callable (`from subprocess import
    # Popen`) hands out that callable under its own, longer name (read from source, not run)
    real_module, real = resolve(module, name)
    if (real_module, real) != (module, name):
        behind = classify(real_module, real, rules)
        if behind.severity == dangerous:
            return Classification(dangerous, f"is {real_module}.{real}, which {key}'s module "
                                             f"re-exports: {behind.reason}")
    if module in rules.blocked_modules:
        return Classification(dangerous, f"module {module} is blocked by torch")
    if key in preset_flags():
        return Classification(suspicious, "not allowed by torch.load(weights_only=True); "
                                          f"{preset_flags().get(key, '--allow-global ' + key)}"
                                          " loads it")
    if "." in name:
        return Classification(suspicious, "dotted name resolved by attribute walk; not allowed "
                                          "by torch.load(weights_only=True)")
    return Classification(suspicious, "not allowed by torch.load(weights_only=True); the file "
                                      "only loads with weights_only=False")


# An enum member rebuilt by value: Class('steps'), Class(2); only where the class's source shows
# it is an enum (`class_source.is_enum_class`), never for any capitalised callable
_ENUM_CALL_RE = re.compile(r"\((?:'[\w.-]{0,64}'|\"[\w.-]{0,64}\"|-?\d{1,20})\)")
_LITERAL_CALL_RES = {target: re.compile(pattern) for target, pattern in LITERAL_CALLS.items()}


def _literal_call(target: str, texts: list[str]) -> bool:
    """Whether every shown call of `target` has the literal arguments `LITERAL_CALLS` admits."""
    pattern = _LITERAL_CALL_RES.get(target)
    return pattern is not None and bool(texts) and all(
        t.startswith(target) and pattern.fullmatch(t[len(target):]) for t in texts)


def call_allowed(target: str, rules: WeightsOnlyRules | None = None) -> bool:
    """Whether calling `target` (dotted) is something benign saves do."""
    rules = rules or weights_only_rules()
    head, _, rest = target.partition(".")
    real = f"{REAL_MODULES.get(head, head)}.{rest}"
    return any(t in CALL_ALLOWED or t in rules.allowed or t in PRESET_GLOBALS or t in KNOWN_DATA
               or t.startswith("torch._utils._rebuild_") for t in (target, real))


def call_verdict(target: str | None, computed: bool, texts: list[str],
                 rules: WeightsOnlyRules | None = None) -> Classification | None:
    """Why a pickle's call of `target` is not what benign saves do (None when it is)."""
    if computed or not target:
        return Classification(Severity.DANGEROUS, "calls a computed callable (the result of "
                              "another call or attribute walk), which no benign save does")
    if call_allowed(target, rules) or _literal_call(target, texts):
        return None
    leaf = target.rsplit(".", 1)[-1]
    module, _, name = target.rpartition(".")
    denied = classify(module, name, rules) if module else None
    if denied is not None and denied.severity == Severity.DANGEROUS:
        return Classification(Severity.DANGEROUS, f"calls {target}: {denied.reason}")
    if leaf[:1].isupper() and texts and all(
            _ENUM_CALL_RE.fullmatch(t[len(target):]) for t in texts if t.startswith(target)
    ) and module and is_enum_class(module, name):
        return Classification(Severity.SUSPICIOUS, f"rebuilds {target} from one plain value "
                              "(an enum member's pattern): the class is called")
    return Classification(Severity.DANGEROUS, f"calls {target}, which no benign save calls "
                          "(outside torch's, NumPy's and scikit-learn's rebuilds, the "
                          "weights_only allowlist and the --allow presets)")


@functools.lru_cache(maxsize=4096)
def deferred_calls(module: str, name: str) -> tuple[CalledArgument, ...]:
    """What a type built as `module.name` calls later among its arguments (`DEFERRED_CALLS`):
    looked up by the name, the walks from its parts, what its module re-exports it as, and
    the bases its source names (`class Lazy(map)` is built by map's `__new__`)."""
    names = [".".join(p) for p in _candidates(module, name)]
    names.append(".".join(resolve(module, name)))
    for dotted in names:
        if dotted in DEFERRED_CALLS:
            return DEFERRED_CALLS[dotted]
    return next((DEFERRED_CALLS[b] for b in source_bases(module, name) if b in DEFERRED_CALLS),
                ())


@functools.cache
def preset_flags() -> dict[str, str]:
    """The `--allow PRESET` words that admit each global a preset lists (`allow_presets`)."""
    flags: dict[str, list[str]] = {}
    for preset, (_, members) in PRESETS.items():
        for name in members:
            flags.setdefault(name, []).append(f"--allow {preset}")
    return {name: " or ".join(words) for name, words in flags.items()}
