"""Facts about pickle opcodes: their names and bytes, and the set torch's weights-only unpickler
implements. The walker reads them, and so does the policy when it reads torch's own list."""

from __future__ import annotations

OPCODE_NAMES: dict[int, str] = {
    0x28: "MARK", 0x2E: "STOP", 0x30: "POP", 0x31: "POP_MARK", 0x32: "DUP", 0x46: "FLOAT",
    0x49: "INT", 0x4A: "BININT", 0x4B: "BININT1", 0x4C: "LONG", 0x4D: "BININT2", 0x4E: "NONE",
    0x50: "PERSID", 0x51: "BINPERSID", 0x52: "REDUCE", 0x53: "STRING", 0x54: "BINSTRING",
    0x55: "SHORT_BINSTRING", 0x56: "UNICODE", 0x58: "BINUNICODE", 0x61: "APPEND", 0x62: "BUILD",
    0x63: "GLOBAL", 0x64: "DICT", 0x7D: "EMPTY_DICT", 0x65: "APPENDS", 0x67: "GET",
    0x68: "BINGET", 0x69: "INST", 0x6A: "LONG_BINGET", 0x6C: "LIST", 0x5D: "EMPTY_LIST",
    0x6F: "OBJ", 0x70: "PUT", 0x71: "BINPUT", 0x72: "LONG_BINPUT", 0x73: "SETITEM",
    0x74: "TUPLE", 0x29: "EMPTY_TUPLE", 0x75: "SETITEMS", 0x47: "BINFLOAT", 0x80: "PROTO",
    0x81: "NEWOBJ", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 0x85: "TUPLE1", 0x86: "TUPLE2",
    0x87: "TUPLE3", 0x88: "NEWTRUE", 0x89: "NEWFALSE", 0x8A: "LONG1", 0x8B: "LONG4",
    0x42: "BINBYTES", 0x43: "SHORT_BINBYTES", 0x8C: "SHORT_BINUNICODE", 0x8D: "BINUNICODE8",
    0x8E: "BINBYTES8", 0x8F: "EMPTY_SET", 0x90: "ADDITEMS", 0x91: "FROZENSET", 0x92: "NEWOBJ_EX",
    0x93: "STACK_GLOBAL", 0x94: "MEMOIZE", 0x95: "FRAME", 0x96: "BYTEARRAY8",
    0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER",
}
OPCODE_BYTES = {name: code for code, name in OPCODE_NAMES.items()}

# The methods the unpickler runs on an instance without a call opcode naming them: NEWOBJ runs
# cls.__new__(cls, *args); BUILD looks __setstate__ up on the instance (its __getattribute__,
# and its __getattr__ where the class defines no __setstate__) and runs it, or sets slot state
# with setattr (__setattr__); SETITEM(S) on a non-dict runs __setitem__; APPEND(S) on a non-list
# looks up and runs the C unpickler's extend (else append), pickle.py's APPEND append; ADDITEMS
# on a non-set add. Every instance NEWOBJ or BUILD makes is finalised (__del__) once the load
# drops it. One fact, read by the pickle's judge (`scan.context`) and by the judge of the source
# a package ships (`torch_package.RUN_AT_LOAD`).
_LOOKUP = ("__getattribute__", "__getattr__")
IMPLICIT_METHODS: dict[str, tuple[str, ...]] = {
    "NEWOBJ": ("__new__", "__del__"), "NEWOBJ_EX": ("__new__", "__del__"),
    "BUILD": ("__setstate__", *_LOOKUP, "__setattr__", "__del__"),
    "SETITEM": ("__setitem__",), "SETITEMS": ("__setitem__",),
    "APPEND": ("extend", "append", *_LOOKUP), "APPENDS": ("extend", "append", *_LOOKUP),
    "ADDITEMS": ("add", *_LOOKUP)}
# Beside those, the load runs protocol methods of an instance it only handles: a dict key
# (SETITEM(S), DICT, an allowed dict-like's keys), a set or frozenset item (ADDITEMS,
# FROZENSET) is hashed and compared; an allowed callable handed an instance (`builtins.list(x)`
# iterates it, `int(x)` asks its __index__, `dict(x)` its keys and items, torch's rebuilds
# their sizes' lengths and items) may run any of the protocols below on it.
HASHED = ("__hash__", "__eq__")
# NumPy's conversions read these of what they are given, where a method or a property runs:
# a dtype argument's dtype attribute (numpy.dtype(x), ndarray(shape, x), _reconstruct's and
# _frombuffer's dtype), an array argument's array protocols (a masked array's data and
# fill_value go through np.array)
_ARRAY_PROTOCOLS = ("dtype", "__array__", "__array_interface__", "__array_struct__",
                    "__array_priority__")
HANDED = (*HASHED, "__iter__", "__next__", "__len__", "__length_hint__", "__contains__", "keys",
          "items", "values", "__getitem__", "__index__", "__int__", "__float__", "__complex__",
          "__trunc__", "__bool__", "__str__", "__repr__", "__format__", "__bytes__",
          "__buffer__", "__fspath__", *_ARRAY_PROTOCOLS, *_LOOKUP)
# torch.load's storage loader, given a persistent id ('storage', storage_type, key, location,
# numel), compares the tag, reads storage_type.dtype, hashes and formats the key, compares
# the location and calls its startswith (each device's deserializer), multiplies numel
PERSISTENT_ID_READS = (*HANDED, "__ne__", "startswith", "__mul__", "__rmul__")

# Opcodes torch's weights-only unpickler implements; overridden from the installed torch.
WEIGHTS_ONLY_OPCODES_DEFAULT = frozenset(
    OPCODE_BYTES[n] for n in (
        "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS", "SETITEM", "SETITEMS",
        "MARK", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWFALSE", "NEWTRUE",
        "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "BININT", "BININT1", "BININT2",
        "BINFLOAT", "BINUNICODE", "SHORT_BINSTRING", "BINPERSID", "BINGET", "LONG_BINGET",
        "BINPUT", "LONG_BINPUT", "LONG1", "PROTO", "STOP",
    )
)
