"""Fast path for the opcode run `torch.save` writes for every tensor.

A checkpoint with thousands of tensors repeats one ~30-opcode sequence per tensor:
`_rebuild_tensor_v2((persistent storage id), offset, size, stride, requires_grad, OrderedDict())`
with every global fetched from the memo. Walking it opcode by opcode in Python dominates the scan
time, so this module recognises the whole sequence with one compiled regular expression and
returns exactly the effect the generic walker would have had: the value pushed, the memo
entries stored (in opcode order) and the storage reference. Anything that differs in the
slightest (other opcodes, unknown memo keys, globals outside the allowlist) does not match, and
the generic walker handles it.
"""

from __future__ import annotations

import functools
import re

_GET = rb"(?:h.|j....)"
_PUT = rb"(?:q.|r....)"
_INT = rb"(?:K.|M..|J....)"
_TUPLE = (rb"(?:\)|" + _INT + rb"\x85|" + _INT + rb"{2}\x86|" + _INT + rb"{3}\x87|\("
          + _INT + rb"*t)")

_UNIT_PATTERN = (
    rb"(?P<F>" + _GET + rb")\(\((?P<S>" + _GET + rb")(?P<T>" + _GET + rb")"
    rb"X(?P<klen>.)\x00\x00\x00(?P<skey>[0-9]{1,20})(?P<p_skey>" + _PUT + rb")?"
    rb"(?:(?P<L>" + _GET + rb")|X(?P<llen>.)\x00\x00\x00(?P<loc>[a-z]{1,8}(?::[0-9]{1,4})?)"
    rb"(?P<p_loc>" + _PUT + rb")?)"
    rb"(?P<numel>" + _INT + rb")t(?P<p_pid>" + _PUT + rb")?Q"
    rb"(?P<offset>" + _INT + rb")"
    rb"(?P<size>" + _TUPLE + rb")(?P<p_size>" + _PUT + rb")?"
    rb"(?P<stride>" + _TUPLE + rb")(?P<p_stride>" + _PUT + rb")?"
    rb"(?P<grad>[\x88\x89])(?P<O>" + _GET + rb")\)R(?P<p_od>" + _PUT + rb")?"
    rb"t(?P<p_args>" + _PUT + rb")?R(?P<p_res>" + _PUT + rb")?"
)


@functools.cache
def unit_re() -> re.Pattern[bytes]:
    """The compiled sequence pattern (compiled on first use to keep imports fast)."""
    return re.compile(_UNIT_PATTERN, re.DOTALL)
# Opcodes the unit uses: the fast path is only valid when torch's unpickler accepts all of them.
UNIT_OPCODES = frozenset(b"hjqrKMJ()X\x85\x86\x87tQ\x88\x89R")
_INT_SIZE = {0x4B: 1, 0x4D: 2, 0x4A: 4}


def _decode_key(raw: bytes) -> int:
    return raw[1] if len(raw) == 2 else int.from_bytes(raw[1:], "little")


def _decode_int(raw: bytes) -> int:
    if raw[0] == 0x4B:
        return raw[1]
    return int.from_bytes(raw[1:], "little", signed=raw[0] == 0x4A)


def _decode_tuple(raw: bytes) -> tuple[tuple, int]:
    """(value, opcode count) of an EMPTY_TUPLE / TUPLEn / MARK..TUPLE run of integers."""
    if raw == b")":
        return (), 1
    marked = raw[0] == 0x28
    body = raw[1:-1] if marked else raw[:-1]
    values = []
    i = 0
    while i < len(body):
        width = _INT_SIZE[body[i]]
        values.append(_decode_int(body[i:i + 1 + width]))
        i += 1 + width
    return tuple(values), len(values) + (2 if marked else 1)


class _Decoded(dict):
    """Memoised decoding of the small opcode snippets that repeat across thousands of tensors.

    Values are ints and tuples of ints (immutable), so sharing them between memo entries is
    exact; the size stays bounded.
    """

    def __init__(self, decode) -> None:
        super().__init__()
        self.decode = decode

    def __missing__(self, raw: bytes):
        if len(self) > 50_000:
            self.clear()
        value = self[raw] = self.decode(raw)
        return value


_KEY = _Decoded(_decode_key)
_INT = _Decoded(_decode_int)
_TUPLE_OF = _Decoded(_decode_tuple)


def _shared(objs: dict, obj_type: type, func: object) -> object:
    # Call results are never mutated or compared by identity, so the fast path shares one per
    # callable (the entry keeps `func` alive, so its id cannot be reused).
    entry = objs.get(id(func))
    if entry is None:
        entry = objs[id(func)] = (func, obj_type(func))
    return entry[1]


def match_unit(data, pos: int, memo: dict, allowed: frozenset[str], globals_type: type,
               obj_type: type, objs: dict, run: dict | None = None) -> tuple | None:
    """Recognise a tensor sequence at `pos`, or None.

    On a match the unit's memo stores are applied to `memo` and the result is `(end, pushed
    value, opcode count, (storage type key, storage key, location, numel, BINPERSID offset))`;
    on no match nothing is touched. `globals_type` is the walker's GlobalRef class, `obj_type`
    the class of what a call (or, with None, a persistent load) pushes; `objs` caches those.
    `run` lives for one run of consecutive units, during which the memo changes only through
    their own stores: it remembers what the memo fetches were last checked to be.
    """
    m = unit_re().match(data, pos)
    if m is None:
        return None
    (f_raw, s_raw, t_raw, klen, skey_raw, p_skey, l_raw, llen, loc_raw, p_loc, numel_raw, p_pid,
     offset_raw, size_raw, p_size, stride_raw, p_stride, grad, o_raw, p_od, p_args,
     p_res) = m.groups()
    if klen[0] != len(skey_raw):
        return None
    sig = (f_raw, s_raw, t_raw, l_raw, llen, loc_raw, o_raw)
    if run is not None and run.get("sig") == sig:
        func, stype, location, hooks, result, storage, watched = run["checked"]
    else:
        checked = _check_fetches(memo, allowed, globals_type, sig)
        if checked is None:
            return None
        func, stype, location, od, watched = checked
        hooks, result = _shared(objs, obj_type, od), _shared(objs, obj_type, func)
        storage = _shared(objs, obj_type, None)
        if run is not None:
            run["sig"] = sig
            run["checked"] = (func, stype, location, hooks, result, storage, watched)
    keys = [_KEY[p] if p else None for p in (p_skey, p_loc, p_pid, p_size, p_stride, p_od,
                                              p_args, p_res)]
    if not watched.isdisjoint(keys):
        return None  # the unit overwrites a key it (or the next unit) fetches: walk it exactly
    k_skey, k_loc, k_pid, k_size, k_stride, k_od, k_args, k_res = keys
    skey = skey_raw.decode("ascii")
    numel = _INT[numel_raw]
    size, n_size = _TUPLE_OF[size_raw]
    stride, n_stride = _TUPLE_OF[stride_raw]
    # Stores in opcode order, as the generic walker makes them.
    if k_skey is not None:
        memo[k_skey] = skey
    if k_loc is not None:
        memo[k_loc] = location
    if k_pid is not None:
        memo[k_pid] = ("storage", stype, skey, location, numel)
    if k_size is not None:
        memo[k_size] = size
    if k_stride is not None:
        memo[k_stride] = stride
    if k_od is not None:
        memo[k_od] = hooks
    if k_args is not None:
        memo[k_args] = (storage, _INT[offset_raw], size, stride, grad == b"\x88", hooks)
    if k_res is not None:
        memo[k_res] = result
    puts = 8 - keys.count(None)
    q_at = m.end(11) + 1 + len(p_pid or b"")
    return (m.end(), result, 17 + n_size + n_stride + puts,
            (stype.key, skey, location, numel, q_at))


def _check_fetches(memo: dict, allowed: frozenset[str], globals_type: type,
                   sig: tuple) -> tuple | None:
    """Check what the unit fetches from the memo: an allowed rebuild function, "storage", an
    allowed storage type, a location and OrderedDict. Returns (func, storage type, location,
    OrderedDict, memo keys fetched) or None."""
    f_raw, s_raw, t_raw, l_raw, llen, loc_raw, o_raw = sig
    get = memo.get
    f_key, s_key, t_key, o_key = _KEY[f_raw], _KEY[s_raw], _KEY[t_raw], _KEY[o_raw]
    func, stype, od = get(f_key), get(t_key), get(o_key)
    if not (type(func) is globals_type and type(stype) is globals_type
            and type(od) is globals_type and func.key in allowed and stype.key in allowed
            and od.key == "collections.OrderedDict" and get(s_key) == "storage"):
        return None
    watched = {f_key, s_key, t_key, o_key}
    if l_raw is not None:
        l_key = _KEY[l_raw]
        location = get(l_key)
        if type(location) is not str:
            return None
        watched.add(l_key)
    else:
        location = loc_raw.decode("ascii")
        if llen[0] != len(location):
            return None
    return func, stype, location, od, frozenset(watched)


def match_entries(data, pos: int, memo: dict, allowed: frozenset[str], globals_type: type,
                  obj_type: type, objs: dict, push, add_storage) -> tuple[int, int]:
    """Consume consecutive `BINUNICODE key [put] <tensor sequence>` dict entries from `pos`.

    Each entry pushes its key and tensor (`push`) and reports its storage (`add_storage`).
    Returns (position after the last whole entry, opcodes consumed); (pos, 0) when none match.
    A key's memo store is applied before its tensor is matched, as the walker would; if the
    tensor then does not match, the walker re-reads the entry and stores the same key again.
    """
    n = len(data)
    ops = 0
    run: dict = {}
    while pos + 5 < n and data[pos] == 0x58:
        k = int.from_bytes(data[pos + 1:pos + 5], "little")
        p = pos + 5 + k
        if k > 65_536 or p + 8 >= n:
            break
        op = data[p]
        q = p + (2 if op == 0x71 else 5 if op == 0x72 else 0)
        get = data[q]
        # cheap test before any decoding: a memo fetch of the rebuild function, then "(("
        if not ((get == 0x68 and data[q + 2] == 0x28) or (get == 0x6A and data[q + 5] == 0x28)):
            break
        try:
            key = str(data[pos + 5:p], "utf-8", "surrogatepass")
        except UnicodeDecodeError:
            break
        put = 0
        if op == 0x71 or op == 0x72:
            k_key = data[p + 1] if op == 0x71 else int.from_bytes(data[p + 1:p + 5], "little")
            memo[k_key] = key
            put = 1
            if run and k_key in run["checked"][-1]:
                run.clear()  # the key overwrote a fetched memo entry: check again
        found = match_unit(data, q, memo, allowed, globals_type, obj_type, objs, run)
        if found is None:
            break
        end, value, unit_ops, storage = found
        push(key)
        push(value)
        add_storage(storage)
        ops += 1 + put + unit_ops
        pos = end
    return pos, ops
