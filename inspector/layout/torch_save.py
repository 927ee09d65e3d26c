"""Where every tensor of a plain `torch.save` zip archive lies, read without torch or unpickling.

A weights-only load needs `import torch` (seconds) only to turn the main pickle into tensors.
For the common archive — nested dicts / OrderedDicts with str keys, lists and tuples whose
leaves are all `_rebuild_tensor_v2/_v3` over `('storage', type, key, location, numel)`
persistent ids — the pickle is fully described by each tensor's record, dtype, offset, size and
stride. This module emulates exactly that subset of torch's weights-only unpickler on values it
builds itself (opcodes decoded by the standard library's `pickletools.genops`; nothing is
imported or called) and raises `NotCovered` at the first thing outside it: another global or
opcode, a non-tensor leaf, a storage record that is compressed, flagged, missing, unreferenced
or not exactly the declared size, a big-endian archive, a view outside its storage, TorchScript,
quantized or sparse tensors. A caller then loads the file with torch instead; this path never
guesses. Tensor keys are the ones `core.flatten` gives the torch-loaded object. The scanner's
walker (`scan.pickles.walker`) is not reused for this: it records imports and calls, not the values
built, and its hot loop is tuned for scanning; this path must build values exactly.
"""

from __future__ import annotations

import math
import pickletools
import sys
import zlib
from collections import OrderedDict
from dataclasses import dataclass

from inspector.core.dtypes import REGISTRY
from inspector.core.flatten import flatten, unique_keys
from inspector.formats.archives import zipread

# Storage classes torch.save names (dtype, itemsize); quantized storages are left to torch.
STORAGE_DTYPES = {
    f"torch.{d.storage}": (d.name, d.itemsize) for d in REGISTRY
    if d.storage and d.kind != "quantized"
} | {"torch.storage.UntypedStorage": ("uint8", 1)}
# dtypes `_rebuild_tensor_v3` names as its last argument (over an UntypedStorage).
V3_DTYPES = {d.name: d.itemsize for d in REGISTRY
             if d.in_torch and d.kind not in ("quantized", "packed")}
_REBUILD_V2 = "torch._utils._rebuild_tensor_v2"
_REBUILD_V3 = "torch._utils._rebuild_tensor_v3"
_ORDERED_DICT = "collections.OrderedDict"
_GLOBALS = frozenset(STORAGE_DTYPES) | {_REBUILD_V2, _REBUILD_V3, _ORDERED_DICT} | {
    f"torch.{name}" for name in V3_DTYPES}
# Everything else in an archive must be one of torch's own bookkeeping records.
# TorchScript's data.pkl (`script=True`): module objects of `__torch__` classes, typed lists
# and type tags, all of them plain data to this walk (nothing is imported or called).
_SCRIPT_LISTS = frozenset(f"torch.jit._pickle.build_{kind}list"
                          for kind in ("int", "float", "bool", "double", "tensor"))
_TYPE_TAG = "torch.jit._pickle.restore_type_tag"
_BOOKKEEPING = frozenset({"version", ".data/version", "byteorder", ".data/serialization_id",
                          ".format_version", ".storage_alignment"})
_PLAIN = (int, float, str, bool)
MAX_PICKLE_BYTES = 256 << 20


class NotCovered(Exception):
    """The archive holds something this reader does not fully understand: load it with torch."""


@dataclass(frozen=True, slots=True)
class TensorLayout:
    """One tensor: its flattened key and where its elements lie in the file."""

    key: str
    dtype: str
    itemsize: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    data_offset: int
    """Byte offset in the file of the tensor's first element (record start + offset*itemsize)."""
    storage_offset: int = 0
    """Its first element's index in its storage (the pickle's offset, what torch's
    `storage_offset()` gives once loaded)."""

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def contiguous(self) -> bool:
        """Whether the elements are one row-major run (dimensions of size 1 do not count)."""
        expected = 1
        for d, s in zip(reversed(self.shape), reversed(self.stride), strict=True):
            if d != 1 and s != expected:
                return False
            expected *= d
        return True


@dataclass(frozen=True, slots=True)
class _Global:
    key: str


@dataclass(frozen=True, slots=True)
class _Storage:
    stype: str
    key: str
    nbytes: int


class ScriptModule(dict):
    """A `__torch__` class object of a TorchScript archive: its attributes as items."""

    def __init__(self, cls: str) -> None:
        super().__init__()
        self.cls = cls


@dataclass(slots=True, eq=False)
class _Tensor:
    dtype: str
    itemsize: int
    storage: _Storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def _ints(value: object, what: str) -> tuple[int, ...]:
    if type(value) is not tuple or any(type(v) is not int or v < 0 for v in value):
        raise NotCovered(f"{what} is not a tuple of non-negative ints")
    return value


def _rebuild(func: str, args: object, script: bool = False) -> _Tensor:
    """The tensor `_rebuild_tensor_v2/_v3(*args)` makes, if torch would make it (TorchScript
    parameters keep requires_grad=True)."""
    n = 7 if func == _REBUILD_V3 else 6
    if type(args) is not tuple or len(args) != n:
        raise NotCovered(f"{func} with {len(args) if type(args) is tuple else '?'} arguments")
    storage, offset, shape, stride, requires_grad, hooks = args[:6]
    if type(storage) is not _Storage or type(offset) is not int or offset < 0:
        raise NotCovered("tensor storage or offset of an unexpected kind")
    shape, stride = _ints(shape, "size"), _ints(stride, "stride")
    if len(shape) != len(stride):
        raise NotCovered("size and stride differ in length")
    if requires_grad not in ((False, True) if script else (False,)) or (
            type(hooks) is not OrderedDict or hooks):
        raise NotCovered("tensor with requires_grad or backward hooks")
    if func == _REBUILD_V3:
        if type(args[6]) is not _Global or storage.stype != "torch.storage.UntypedStorage":
            raise NotCovered("_rebuild_tensor_v3 without a dtype over an untyped storage")
        dtype = args[6].key.removeprefix("torch.")
        itemsize = V3_DTYPES[dtype]
    else:
        dtype, itemsize = STORAGE_DTYPES[storage.stype]
        if storage.stype == "torch.storage.UntypedStorage":
            raise NotCovered("_rebuild_tensor_v2 over an untyped storage")
    if all(shape):  # torch's set_ checks the view lies inside its storage unless it is empty
        last = offset + sum((d - 1) * s for d, s in zip(shape, stride, strict=True))
        if (last + 1) * itemsize > storage.nbytes:
            raise NotCovered("tensor view reaches past its storage")
    return _Tensor(dtype, itemsize, storage, offset, shape, stride)


def _persistent(pid: object, storages: dict[str, _Storage], legacy: bool = False) -> _Storage:
    # a legacy stream's ids have a sixth field, a view into another storage (None for none)
    size = 6 if legacy else 5
    if type(pid) is not tuple or len(pid) != size or pid[0] != "storage" or (
            legacy and pid[5] is not None):
        raise NotCovered("persistent id that is not a storage")
    _, stype, key, location, numel = pid[:5]
    if type(stype) is not _Global or type(key) is not str or type(location) is not str:
        raise NotCovered("storage id fields of an unexpected kind")
    if type(numel) is not int or numel < 0 or stype.key not in STORAGE_DTYPES:
        raise NotCovered(f"storage of type {getattr(stype, 'key', '?')} or bad element count")
    storage = _Storage(stype.key, key, numel * STORAGE_DTYPES[stype.key][1])
    # torch reuses the first storage loaded under a key; any disagreement is left to it
    if storages.setdefault(key, storage) != storage:
        raise NotCovered(f"storage {key!r} declared twice differently")
    return storage


def walk_pickle(data: bytes, script: bool = False, floats: bool = False, legacy: bool = False,
                int_keys: bool = False) -> tuple[object, dict[str, _Storage]]:
    """The object a weights-only load of `data` builds (tensors as layouts) and its storages.

    `script` also reads a TorchScript data.pkl: `__torch__` objects become `ScriptModule`s,
    typed lists and type tags their plain values, floats are admitted (as with `floats`).
    `legacy`: storage ids as a legacy stream writes them (`layout.torch_legacy`). `int_keys`
    admits int dict keys (an optimizer's state, keyed by parameter index; `core.flatten`
    names them as the loaded object's)."""
    stack: list = []
    marks: list[list] = []
    memo: dict[int, object] = {}
    storages: dict[str, _Storage] = {}
    ordered: set[int] = set()
    keep: list = []  # keeps every id() above alive for the walk
    try:
        for op, arg, _pos in pickletools.genops(data):
            name = op.name  # every opcode handled below is one torch's weights-only loader has
            if name in ("BINPUT", "LONG_BINPUT"):
                memo[arg] = stack[-1]
            elif name in ("BINGET", "LONG_BINGET"):
                stack.append(memo[arg])
            elif name == "MARK":
                marks.append(stack)
                stack = []
            elif name in ("BININT", "BININT1", "BININT2", "LONG1", "BINUNICODE") or (
                    (script or floats) and name == "BINFLOAT"):
                stack.append(arg)
            elif name in ("NEWTRUE", "NEWFALSE", "NONE", "EMPTY_TUPLE"):
                stack.append({"NEWTRUE": True, "NEWFALSE": False, "NONE": None}.get(name, ()))
            elif name == "TUPLE":
                items, stack = stack, marks.pop()
                stack.append(tuple(items))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                k = int(name[-1])
                items = tuple(stack[-k:])
                if len(items) != k:
                    raise NotCovered("tuple of missing items")
                del stack[-k:]
                stack.append(items)
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "GLOBAL":
                stack.append(_global(arg, script))
            elif name == "BINPERSID":
                stack.append(_persistent(stack.pop(), storages, legacy))
            elif name == "NEWOBJ" and script:
                args = stack.pop()
                value = _script_module(stack.pop(), args)
                keep.append(value)
                stack.append(value)
            elif name == "REDUCE":
                args = stack.pop()
                value = _reduce(stack.pop(), args, script, ordered)
                keep.append(value)
                stack.append(value)
            elif name == "SETITEM":
                items = stack[-2:]
                del stack[-2:]
                _set_items(stack[-1], items, int_keys)
            elif name == "SETITEMS":
                items, stack = stack, marks.pop()
                _set_items(stack[-1], items, int_keys)
            elif name == "APPEND":
                item = stack.pop()
                _append(stack[-1], [item])
            elif name == "APPENDS":
                items, stack = stack, marks.pop()
                _append(stack[-1], items)
            elif name == "BUILD":
                state = stack.pop()
                _build(stack[-1], state, ordered)
            elif name == "PROTO":
                if arg != 2:
                    raise NotCovered(f"pickle protocol {arg}")
            elif name == "STOP":
                if len(stack) != 1 or marks:
                    raise NotCovered("pickle stops with a stack that is not one object")
                return stack[0], storages
            else:
                raise NotCovered(f"opcode {name}")
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise NotCovered(f"pickle not understood: {exc}") from None
    raise NotCovered("pickle ends without STOP")


def _global(arg: str, script: bool) -> _Global:
    """The global a GLOBAL opcode names (`module name`), if torch's weights-only loader allows
    it (in a TorchScript data.pkl also `__torch__` classes, typed lists and type tags)."""
    key = arg.replace(" ", ".", 1)
    if key not in _GLOBALS and not (script and (
            key.startswith("__torch__.") or key in _SCRIPT_LISTS or key == _TYPE_TAG)):
        raise NotCovered(f"global {key}")
    return _Global(key)


def _script_module(cls: object, args: object) -> ScriptModule:
    """The object NEWOBJ makes of a TorchScript class: empty until BUILD gives its attributes."""
    if type(cls) is not _Global or not cls.key.startswith("__torch__.") or args != ():
        raise NotCovered("NEWOBJ of something that is not a TorchScript class")
    return ScriptModule(cls.key)


def _reduce(func: object, args: object, script: bool, ordered: set[int]) -> object:
    """What REDUCE makes of `func(*args)`: a typed list's or type tag's plain value (`script`),
    an empty OrderedDict (its id joins `ordered`) or a rebuilt tensor."""
    if script and type(func) is _Global and (func.key in _SCRIPT_LISTS or func.key == _TYPE_TAG):
        return _script_value(func.key, args)
    if type(func) is not _Global or func.key not in (_REBUILD_V2, _REBUILD_V3, _ORDERED_DICT):
        raise NotCovered("call of something that is not a rebuild function")
    if func.key != _ORDERED_DICT:
        return _rebuild(func.key, args, script)
    if args != ():
        raise NotCovered("OrderedDict built from arguments")
    value = OrderedDict()
    ordered.add(id(value))
    return value


def _set_items(target: object, items: list, int_keys: bool) -> None:
    """SETITEM(S): str-keyed pairs into a dict (also int-keyed ones with `int_keys`)."""
    if not isinstance(target, dict) or len(items) % 2:
        raise NotCovered("SETITEM(S) on something that is not a dict")
    for i in range(0, len(items), 2):
        if not (type(items[i]) is str or (int_keys and type(items[i]) is int)):
            raise NotCovered("dict key that is not a str")
        target[items[i]] = items[i + 1]


def _append(target: object, items: list) -> None:
    """APPEND(S): items onto a list."""
    if type(target) is not list:
        raise NotCovered("APPEND(S) on something that is not a list")
    target.extend(items)


def _build(target: object, state: object, ordered: set[int]) -> None:
    """BUILD: a TorchScript module's attributes, or an OrderedDict's plain attribute state (a
    state_dict's `_metadata`, which becomes attributes, not items)."""
    if type(target) is ScriptModule and not target and type(state) is dict:
        target.update(state)  # a module's attributes, each walked above
        return
    if id(target) not in ordered or type(state) is not dict:
        raise NotCovered("BUILD of something other than an OrderedDict's attributes")
    _check_plain(state, 0)


def _script_value(func: str, args: object) -> object:
    """What a typed-list builder or `restore_type_tag` returns: its plain first argument."""
    if type(args) is not tuple or not args or type(args[0]) not in (list, dict):
        raise NotCovered(f"{func} of an unexpected argument")
    if func == _TYPE_TAG and (len(args) != 2 or type(args[1]) is not str):
        raise NotCovered("type tag that is not a string")
    if func != _TYPE_TAG and (len(args) != 1 or type(args[0]) is not list):
        raise NotCovered(f"{func} of something that is not one list")
    return args[0]


def _check_plain(value: object, depth: int) -> None:
    """State that torch keeps as attributes must hold nothing torch could refuse to build."""
    if depth > 16:
        raise NotCovered("attribute state nested too deep")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_plain(k, depth + 1)
            _check_plain(v, depth + 1)
    elif type(value) in (list, tuple):
        for v in value:
            _check_plain(v, depth + 1)
    elif value is not None and type(value) not in (int, str, bool):
        raise NotCovered("attribute state holding something other than plain values")


def describe_archive(buf, base: int = 0, end: int | None = None,
                     plain_leaves: bool = False) -> Layouts:
    """Every tensor of the torch zip archive in `buf[base:end]` (bytes or mmap; offsets are the
    buffer's, as `zipread.read_zip` gives them), keyed as torch flattens it.

    Raises NotCovered when anything in the archive is outside the subset described above.
    `plain_leaves` admits leaves that are plain values (int, float, str, bool, None: a training
    checkpoint's `epoch`), left out of the list and kept in its `plain`, and int dict keys (an
    optimizer's state).
    """
    by_name = archive_members(buf, base, end)
    root, storages = walk_pickle(main_pickle(buf, by_name, "data.pkl"), floats=plain_leaves,
                                 int_keys=plain_leaves)
    records = {f"data/{key}" for key in storages}
    extra = [n for n in by_name if n not in records and n not in _BOOKKEEPING and n != "data.pkl"]
    if extra:
        raise NotCovered(f"archive member {extra[0]!r} is not a plain checkpoint's")
    return tensor_layouts(unique_keys(flatten(root)), storages, by_name, "data/", plain_leaves)


def archive_members(buf, base: int = 0, end: int | None = None,
                    compressed: tuple[str, ...] = ()) -> dict[str, zipread.Member]:
    """The members of a torch zip archive by their name inside its one folder, each unflagged
    and stored uncompressed unless its name starts with one of `compressed` (NotCovered
    otherwise)."""
    try:
        archive = zipread.read_zip(buf, base, end)
    except (zipread.NotAZip, ValueError, IndexError) as exc:
        raise NotCovered(f"not a readable zip: {exc}") from None
    if archive.anomalies:
        raise NotCovered(archive.anomalies[0].message)
    members = archive.members
    if not members:
        raise NotCovered("empty archive")
    prefix = members[0].name.split("/", 1)[0] + "/"
    by_name = {}
    for m in members:
        name = m.name[len(prefix):]
        packed = m.method != zipread.STORED or m.compressed_size != m.size
        if not m.name.startswith(prefix) or m.encrypted or m.unsupported_by_miniz or (
                packed and not name.startswith(compressed) if compressed else packed):
            raise NotCovered(f"member {m.name!r} is outside the folder, compressed or flagged")
        by_name[name] = m
    return by_name


def main_pickle(buf, by_name: dict[str, zipread.Member], name: str) -> bytes:
    """The bytes of the archive's pickle `name`, checked against its CRC-32, in a little-endian
    archive (NotCovered otherwise)."""
    main = by_name.get(name)
    if main is None or main.size > MAX_PICKLE_BYTES:
        raise NotCovered(f"no {name} of a readable size")
    order = by_name.get("byteorder")
    try:
        data = zipread.member_bytes(buf, main, MAX_PICKLE_BYTES)
        little = sys.byteorder == "little" if order is None else (
            zipread.member_bytes(buf, order, 16) == b"little")
    except ValueError as exc:
        raise NotCovered(f"member unreadable: {exc}") from None
    if zlib.crc32(data) != main.crc:
        raise NotCovered(f"{name} fails its CRC-32")
    if not little:
        raise NotCovered("archive is not little-endian")
    return data


class Layouts(list):
    """The tensors' layouts (a list of `TensorLayout`), and the plain values read beside them
    (`plain`: key and value of each leaf that is not a tensor, in the loaded object's order;
    empty unless `plain_leaves`): what the user's process holds a worker's `objects` against
    (`sandbox.host.claims.objects`)."""

    plain: list[tuple[str, object]]


def tensor_layouts(leaves: list[tuple[str, object]], storages: dict[str, _Storage],
                   by_name: dict[str, zipread.Member], folder: str,
                   plain_leaves: bool = False) -> Layouts:
    """The layouts of keyed tensor leaves over records `folder + storage key`, each checked to
    hold exactly its declared bytes; NotCovered at a leaf that is not a tensor (or, with
    `plain_leaves`, a plain value, which is kept apart in `plain`)."""
    for key, storage in storages.items():
        record = by_name.get(f"{folder}{key}")
        if record is None or record.size != storage.nbytes:
            raise NotCovered(f"record {folder}{key} is missing or not the declared size")
    out = Layouts()
    out.plain = []
    for key, leaf in leaves:
        if type(leaf) is not _Tensor:
            if plain_leaves and (leaf is None or type(leaf) in _PLAIN):
                out.plain.append((key, leaf))
                continue
            raise NotCovered(f"{key} is not a tensor")
        start = by_name[f"{folder}{leaf.storage.key}"].data_offset + leaf.offset * leaf.itemsize
        out.append(TensorLayout(key, leaf.dtype, leaf.itemsize, leaf.shape, leaf.stride, start,
                                leaf.offset))
    return out
