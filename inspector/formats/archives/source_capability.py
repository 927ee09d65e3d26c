"""What a name that Python source calls or hands on at load reaches: a deny-list capability or not.

Source an artifact ships (a torch.package's interned modules, Hugging Face remote code) is
judged by the deny list's capabilities (`scan.pickles.policy.DENY`), every one of them, "reach
the interpreter" (ctypes, operator, inspect's frames) included. Under a module the deny list
names whole, every name is its capability unless the short allow-list below names it as a
read-only use (`os.path.join`, `logging.getLogger`, `sys.version_info`): a list of what harms
lags the module (`ctypes.CDLL(None).system`, `asyncio.create_subprocess_shell`,
`logging.config.dictConfig`), a list of what is harmless costs at worst a false alarm. A file
opener outside the deny list (`gzip.open`, `lzma.open`, `bz2.open`) writes where its mode says
so; `open` with a read-only literal mode only reads. A resolver of a literal dotted name
(`pkgutil.resolve_name('os:system')`, `importlib.import_module`, `__import__`) is judged as
what it names, and with a name computed at load as what it may name: anything.
"""

from __future__ import annotations

import ast
import glob
import inspect
import operator
import os
import posixpath
import shutil

from inspector.scan.pickles.calls import words
from inspector.scan.pickles.policy import DENY, DENY_LEAF_NAMES, DENY_MODULES

# os's process runners, read from its own names (every exec*, spawn*, posix_spawn*, popen*, and
# Windows' startfile, which this platform's os may lack), and shutil's functions but the few
# that only read (every other one copies, moves, deletes, packs or unpacks files)
_OS_RUNNERS = frozenset(n for n in dir(os) if n.startswith(
    ("exec", "spawn", "posix_spawn", "popen"))) | {"startfile"}
_SHUTIL_READERS = frozenset(words("which disk_usage get_archive_formats get_unpack_formats "
                                  "get_terminal_size ignore_patterns"))
_SHUTIL_WRITERS = frozenset(n for n in shutil.__all__ if n not in _SHUTIL_READERS and
                            inspect.isfunction(getattr(shutil, n, None)))
# Final names of calls that run, load, open, write or delete, beside the policy's own: what
# `legacy_denied` reads under a denied module (the pickle's implicit methods, installed code)
_SOURCE_LEAVES = DENY_LEAF_NAMES | _OS_RUNNERS | _SHUTIL_WRITERS | frozenset(words("""
    Popen FileHandler FileIO remove rmdir rename replace mkdir makedirs chmod chown kill fork
    forkpty connect create_connection socket touch write mkstemp mkdtemp NamedTemporaryFile
    TemporaryFile symlink link truncate putenv"""))
_INTERPRETER = "reach the interpreter"
# Read-only uses of modules the deny list names whole, exactly as written (a call of one, or
# the name as a value); what lies under one of these is not read-only unless listed too. A
# Thread, a Timer and atexit.register only hand on a callable, which is judged where it is
# named (`Thread(target=os.system)` is os.system named as a value).
_PATH_CLASSES = words("Path PurePath PosixPath PurePosixPath WindowsPath PureWindowsPath")
_PATH_READERS = words("""exists is_file is_dir is_symlink read_text read_bytes resolve absolute
    parent parents name stem suffix suffixes parts joinpath with_name with_suffix with_stem
    relative_to is_absolute as_posix glob rglob iterdir stat expanduser home cwd match""")
READ_ONLY = frozenset(words("""
    os.getenv os.environ os.getcwd os.getpid os.getppid os.getuid os.geteuid os.getgid
    os.cpu_count os.sched_getaffinity os.fspath os.fsencode os.fsdecode os.listdir os.scandir
    os.stat os.lstat os.walk os.access os.isatty os.get_terminal_size os.urandom os.uname
    os.PathLike os.DirEntry os.sep os.altsep os.extsep os.pathsep os.linesep os.curdir
    os.pardir os.devnull os.name os.path os.F_OK os.R_OK os.W_OK os.X_OK os.error
    sys.modules sys.argv sys.executable sys.path sys.version sys.hexversion sys.platform
    sys.maxsize sys.maxunicode sys.byteorder sys.getsizeof sys.getrecursionlimit
    sys.setrecursionlimit sys.getdefaultencoding sys.getfilesystemencoding sys.getrefcount
    sys.exc_info sys.prefix sys.base_prefix sys.builtin_module_names sys.stdlib_module_names
    logging.getLogger logging.getLoggerClass logging.Logger logging.LoggerAdapter
    logging.Handler logging.StreamHandler logging.NullHandler logging.Formatter logging.Filter
    logging.LogRecord logging.captureWarnings logging.disable logging.getLevelName
    logging.addLevelName logging.debug logging.info logging.warning logging.warn logging.error
    logging.critical logging.exception logging.log logging.root logging.NOTSET logging.DEBUG
    logging.INFO logging.WARNING logging.WARN logging.ERROR logging.CRITICAL logging.FATAL
    inspect.signature inspect.Signature inspect.Parameter inspect.getfullargspec inspect.getmro
    inspect.getdoc inspect.cleandoc inspect.getmodule inspect.getfile inspect.getsourcefile
    inspect.getsource inspect.unwrap inspect.getmembers inspect.getattr_static inspect.isclass
    inspect.isfunction inspect.ismethod inspect.ismodule inspect.isroutine inspect.isbuiltin
    inspect.isabstract inspect.iscoroutinefunction inspect.isgeneratorfunction
    inspect.isdatadescriptor inspect.isgenerator inspect.iscoroutine inspect.isawaitable
    types.SimpleNamespace types.MethodType types.MappingProxyType types.ModuleType
    types.GeneratorType types.NoneType types.BuiltinFunctionType types.GenericAlias
    types.UnionType types.TracebackType
    threading.Lock threading.RLock threading.Event threading.Condition threading.Semaphore
    threading.BoundedSemaphore threading.Barrier threading.local threading.get_ident
    threading.current_thread threading.main_thread threading.active_count threading.Thread
    threading.Timer atexit.register atexit.unregister multiprocessing.cpu_count
    io.BytesIO io.StringIO io.TextIOWrapper io.BufferedReader io.IOBase io.RawIOBase
    io.BufferedIOBase io.TextIOBase io.UnsupportedOperation io.SEEK_SET io.SEEK_CUR io.SEEK_END
    io.DEFAULT_BUFFER_SIZE codecs.encode codecs.decode codecs.lookup codecs.getencoder
    codecs.getdecoder codecs.getincrementalencoder codecs.getincrementaldecoder codecs.getreader
    codecs.iterencode codecs.iterdecode codecs.BOM_UTF8 codecs.BOM_UTF16 codecs.BOM_UTF16_LE
    codecs.BOM_UTF16_BE codecs.BOM_UTF32 codecs.BOM_UTF32_LE codecs.BOM_UTF32_BE
    tempfile.gettempdir linecache.getline zipfile.is_zipfile tarfile.is_tarfile
    importlib.util importlib.util.find_spec importlib.metadata importlib.metadata.version
    importlib.metadata.PackageNotFoundError importlib.metadata.metadata
    platform.system platform.machine platform.release platform.node platform.python_version
    platform.python_version_tuple platform.python_implementation
    uuid.uuid4 uuid.uuid3 uuid.uuid5 uuid.UUID uuid.NAMESPACE_DNS uuid.NAMESPACE_URL
    gc.collect gc.enable gc.disable gc.isenabled
    torch._dynamo.is_compiling torch._dynamo.disable torch._dynamo.allow_in_graph
    torch._dynamo.mark_static_address torch.compiler.is_compiling torch.compiler.disable
    torch.compiler.is_dynamo_compiling torch.compiler.allow_in_graph torch.fx.wrap
    torch.fx.Proxy torch._C._get_tracing_state
""")) | {f"os.path.{n}" for n in posixpath.__all__} | {f"glob.{n}" for n in glob.__all__} | {
    f"shutil.{n}" for n in _SHUTIL_READERS} | {
    f"operator.{n}" for n in operator.__all__ if n not in ("attrgetter", "methodcaller", "call")
} | {f"pathlib.{c}" for c in _PATH_CLASSES} | {
    f"pathlib.{c}.{m}" for c in _PATH_CLASSES for m in _PATH_READERS}
# Read-only data objects: anything under one is read-only too
READ_ONLY_UNDER = ("sys.version_info.", "sys.float_info.", "sys.int_info.", "sys.flags.",
                   "sys.implementation.", "sys.stdout.", "sys.stderr.", "os.environ.",
                   "logging.getLogger.", "inspect.signature.", "urllib.parse.")
# Callables that open a file, with the mode as their second argument or `mode=`
_OPENERS = frozenset(words("open GzipFile BZ2File LZMAFile"))
_READ_OPENERS = frozenset(words("builtins.open io.open _io.open codecs.open"))
# Callables that hand out what a dotted name names: its literal is judged as that name
RESOLVERS = frozenset(words("importlib.import_module builtins.__import__ pkgutil.resolve_name"))


def reads_only(call: ast.Call) -> bool:
    """Whether an opener's call opens for reading only: no mode, or a literal one without w,
    a, x or +; a mode computed at load may be any."""
    mode = next((k.value for k in call.keywords if k.arg == "mode"),
                call.args[1] if len(call.args) > 1 else None)
    if mode is None:
        return not any(isinstance(a, ast.Starred) for a in call.args) and not any(
            k.arg is None for k in call.keywords)
    return (isinstance(mode, ast.Constant) and isinstance(mode.value, str)
            and not set(mode.value) & set("wax+"))


def literal_of(call: ast.Call) -> str | None:
    """The dotted name a resolver's literal argument names (`'os:system'` as `os.system`)."""
    first = call.args[0] if call.args else next(
        (k.value for k in call.keywords if k.arg in ("name", "mod")), None)
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value.replace(":", ".")
    return None


def denied(target: str, call: ast.Call | None = None) -> str | None:
    """Why code that runs at load reaches a capability when it calls `target` (`call`: the
    call, where it is one) or hands it on as a value; None where it does not."""
    parts = target.split(".")
    if parts[0] == "builtins" and len(parts) > 2:
        return legacy_denied(target)  # a local name's attribute: its object is unknown
    if call is not None and target in RESOLVERS:
        named = literal_of(call)
        if named is None:
            return f"{target} with a name computed at load: it may hand out any callable"
        return denied(named) if target == "pkgutil.resolve_name" else None
    if call is not None and parts[-1] in _OPENERS and (
            target in _READ_OPENERS or not _under_deny(parts)):
        if reads_only(call):
            return None
        if target not in _READ_OPENERS:
            return f"{target}: opens a file to write it (its mode writes, or is computed)"
    if target in ("builtins.__dict__", "builtins.__builtins__"):
        return f"{target}: hands out the interpreter's builtins (exec, eval, __import__)"
    return _strict(target, parts)


def _under_deny(parts: list[str]) -> bool:
    """Whether a dotted name lies under an entry of the deny list."""
    return any(".".join(parts[:i]) in DENY for i in range(1, len(parts) + 1))


def _strict(target: str, parts: list[str]) -> str | None:
    """The deny list read for source: a single denied callable, or any name under a module it
    names whole but the read-only ones."""
    for i in range(len(parts), 0, -1):
        entry = DENY.get(".".join(parts[:i]))
        if entry is None:
            continue
        if entry.entry not in DENY_MODULES:  # one callable: getattr, type, partial are
            # everyday source, unlike in a pickle (a computed getattr is judged apart)
            if entry.capability == _INTERPRETER and parts[0] in ("builtins", "functools"):
                return None
            return f"{target}: {entry.text}"
        if target in READ_ONLY or target.startswith(READ_ONLY_UNDER):
            return None
        return f"{target}: {entry.text}"
    return None


def legacy_denied(target: str) -> str | None:
    """Why a call of `target` reaches a deny-list capability, judged by its final name: the
    target is a single callable the deny list names, or under a module it names whole its final
    name runs, loads, opens, writes or deletes. The pickle's implicit methods judge installed
    code so (`scan.context`), and source judges so the attributes of an object it cannot name."""
    parts = target.split(".")
    if parts[0] == "builtins" and len(parts) > 2:
        parts = parts[1:]  # a local name's attribute: `x.system` is no builtin
    for i in range(len(parts), 0, -1):
        entry = DENY.get(".".join(parts[:i]))
        if entry is None or entry.capability == _INTERPRETER:
            continue
        if i == len(parts) or parts[-1] in _SOURCE_LEAVES or parts[-1] == "__dict__":
            return f"{target}: {entry.text}"
        return None
    return None


def holds_capability(module: str) -> bool:
    """Whether a module's attributes, looked up by a name computed at load, may be a
    capability: builtins, or a module under one the deny list names whole."""
    parts = module.split(".")
    return module == "builtins" or any(
        ".".join(parts[:i]) in DENY_MODULES for i in range(1, len(parts) + 1))


# modules that hold a denied callable (torch.load, numpy.save): one looked up by a computed
# name and called at once may be it
HOLDERS = frozenset(k.rsplit(".", 1)[0] for k, e in DENY.items()
                    if k not in DENY_MODULES and "." in k and e.capability != _INTERPRETER)
