"""Static pickle walker: emulates the unpickler's stack and memo without executing anything.

It records every import (GLOBAL, INST, STACK_GLOBAL, EXT1/2/4), every call (REDUCE, NEWOBJ,
NEWOBJ_EX, OBJ, INST, BUILD) with the string arguments it can see, persistent-id storage
references, container operations on the wrong kind of object, and the reasons
`torch.load(weights_only=True)` would refuse the stream (opcodes outside its set, calls it
does not allow, missing memo keys, ...). Framing follows CPython's C unpickler: FRAME only
requires its length to be available and opcodes are then read linearly, so a frame length that
disagrees with the opcodes inside cannot hide anything. Work is bounded by `Limits`.

The loop here handles the opcodes torch's tensor pickles are made of; the others are small
functions in `cold_ops`, sharing the walk's `state`. What a walk records is in `records`.
"""

from __future__ import annotations

import io
import struct
from struct import unpack_from
from typing import NamedTuple

from inspector.core.vocabulary import Severity
from inspector.scan.pickles.cold_ops import COLD_OPS, unknown_opcode
from inspector.scan.pickles.fastpath import UNIT_OPCODES, match_entries, match_unit
from inspector.scan.pickles.opcodes import WEIGHTS_ONLY_OPCODES_DEFAULT
from inspector.scan.pickles.policy import classify, weights_only_rules
from inspector.scan.pickles.records import (
    Call,
    GlobalRef,
    Issue,
    Limits,
    PickleScan,
    StorageRef,
)
from inspector.scan.pickles.state import Truncated, WalkState
from inspector.scan.pickles.values import BIG, UNKNOWN, _Big, _Obj

__all__ = ["Call", "DisasmRow", "GlobalRef", "Issue", "Limits", "PickleScan", "StorageRef",
           "disassemble", "imports", "imports_or_stops", "looks_like_pickle", "scan_pickle"]

_DEFAULT_LIMITS = Limits()
_MAX_JOBLIB_NESTING = 8  # object arrays inside object arrays' pickles


def scan_pickle(
    data: bytes,
    start: int = 0,
    *,
    allowed: frozenset[str] = frozenset(),
    wo_opcodes: frozenset[int] = WEIGHTS_ONLY_OPCODES_DEFAULT,
    limits: Limits = _DEFAULT_LIMITS,
    fast: bool = True,
    through: bool = False,
    unbuffered: bool = False,
    joblib: bool = True,
    depth: int = 0,
) -> PickleScan:
    """Walk one pickle stream from `start` to its STOP (or the first undecodable byte).

    `fast` lets torch's per-tensor opcode run be recognised in one step (same result).
    `through` walks on past each STOP into the next pickle, each with a fresh stack and memo,
    as repeated `pickle.load` calls read them: one walk for thousands of back-to-back pickles.
    `unbuffered` reads as CPython's C unpickler reads a file object without `peek()` (an
    io.BytesIO, which torch.load hands every zip's data.pkl): after a FRAME, an opcode whose
    argument runs past the frame's end drops the frame's remaining bytes and reads afresh after
    it (`unbuffered_splice`). A walk that finds a frame ending inside an opcode or past STOP
    sets `frame_misaligned` (and an issue), and the caller walks the stream that way too.
    `joblib` reads as joblib's unpickler does (not with `unbuffered`): the bytes after a
    NumpyArrayWrapper's BUILD are array data (`raw_spans`), or an object array's own pickle,
    walked `depth` + 1 deep; other loaders read them as opcodes, and the caller walks that
    reading too.
    """
    res = PickleScan(start=start)
    st = WalkState(data, start, res, allowed, through, unbuffered, joblib and not unbuffered)
    if depth < _MAX_JOBLIB_NESTING:
        st.nested = lambda at: scan_pickle(data, at, allowed=allowed, wo_opcodes=wo_opcodes,
                                           limits=limits, fast=fast, depth=depth + 1)
    try:
        _walk(st, fast and not unbuffered and wo_opcodes >= UNIT_OPCODES, wo_opcodes, limits)
    except (Truncated, IndexError):
        st.note("malformed", "pickle data truncated", st.op_at)
        res.error = f"truncated at offset {st.op_at}"
    except (ValueError, UnicodeDecodeError, struct.error) as exc:
        st.note("malformed", f"undecodable argument: {exc}", st.op_at)
        res.error = f"{type(exc).__name__} at offset {st.op_at}"
    if not res.stopped and res.error is None and st.pos >= st.n and res.opcodes:
        st.note("malformed", "pickle ends without STOP", st.op_at)
        res.error = "no STOP opcode"
    res.storages = [tuple.__new__(StorageRef, fields) for fields in st.storages]
    res.end = st.pos + st.removed
    res.next_start = max(res.next_start, res.end)
    return res


def _walk(st: WalkState, fast: bool, wo_opcodes: frozenset[int], limits: Limits) -> None:
    """Walk opcodes from `st.pos` to STOP, a bound or a byte that is no opcode. The hot ones run
    inline on locals, handed back to `st` before a cold one runs and when the walk ends."""
    data, n, pos, op_at, count, frame_end = st.data, st.n, st.pos, st.pos, 0, 0
    stack, memo, metastack, reported_ops = st.stack, st.memo, st.metastack, st.reported_ops
    max_ops, max_depth, unbuffered = limits.max_opcodes, limits.max_depth, st.unbuffered
    try:
        while pos < n:
            count += 1
            if count > max_ops:
                st.note("limit", f"stopped after {max_ops} opcodes", pos)
                break
            if frame_end and (pos >= frame_end or unbuffered):
                frame_end = st.frame_step(pos, frame_end, op_at)
                data, n = st.data, st.n
            op_at = pos
            op = data[pos]
            pos += 1
            if op not in wo_opcodes and op not in reported_ops:
                st.unsupported(op)
            if fast and (op == 0x58 or (op == 0x68 and data[pos + 1] == 0x28)
                         or (op == 0x6A and data[pos + 4] == 0x28)) and (
                    ops := _fast_step(st, op, op_at)):
                pos, count = st.pos, count + ops - 1
                continue
            if op == 0x72:  # LONG_BINPUT
                (key,) = unpack_from("<I", data, pos)
                pos += 4
                memo[key] = stack[-1] if stack else UNKNOWN
            elif op == 0x71:  # BINPUT
                memo[data[pos]] = stack[-1] if stack else UNKNOWN
                pos += 1
            elif op == 0x4B:  # BININT1
                stack.append(data[pos])
                pos += 1
            elif op == 0x68:  # BINGET
                key = data[pos]
                pos += 1
                stack.append(memo[key] if key in memo else st.unstored(op, key, op_at))
            elif op == 0x6A:  # LONG_BINGET
                (key,) = unpack_from("<I", data, pos)
                pos += 4
                stack.append(memo[key] if key in memo else st.unstored(op, key, op_at))
            elif op == 0x28:  # MARK
                if len(metastack) >= max_depth:
                    st.note("limit", "MARK nesting deeper than the scan bound", op_at)
                    break
                metastack.append(stack)
                st.stack = stack = []  # always `st`'s too: its pops and pop_mark work on it
            elif op == 0x52:  # REDUCE
                args = stack.pop() if stack else st.pop(op_at)
                stack.append(st.reduce(stack.pop() if stack else st.pop(op_at), args, op_at))
            elif op == 0x74:  # TUPLE
                items = st.pop_mark(op_at)
                stack = st.stack  # pop_mark made the MARK's outer stack current
                stack.append(tuple(items))
            elif op == 0x86:  # TUPLE2
                b = stack.pop() if stack else st.pop(op_at)
                stack.append((stack.pop() if stack else st.pop(op_at), b))
            elif op == 0x58:  # BINUNICODE
                (k,) = unpack_from("<I", data, pos)
                pos += 4
                if pos + k > n:
                    raise Truncated
                stack.append(str(data[pos:pos + k], "utf-8", "surrogatepass") if k <= BIG
                             else _Big(k))
                pos += k
            elif op == 0x29:  # EMPTY_TUPLE
                stack.append(())
            elif op == 0x89 or op == 0x88:  # NEWFALSE, NEWTRUE
                stack.append(op == 0x88)
            elif op == 0x51:  # BINPERSID
                st.persistent_id(st.pop(op_at), op_at)
            elif op == 0x85:  # TUPLE1
                stack.append((stack.pop() if stack else st.pop(op_at),))
            elif op == 0x87:  # TUPLE3
                c = stack.pop() if stack else st.pop(op_at)
                b = stack.pop() if stack else st.pop(op_at)
                stack.append((stack.pop() if stack else st.pop(op_at), b, c))
            elif op == 0x94:  # MEMOIZE
                memo[len(memo)] = stack[-1] if stack else UNKNOWN
            elif op == 0x4D or op == 0x4A:  # BININT2, BININT
                k = 2 if op == 0x4D else 4
                if pos + k > n:
                    raise Truncated
                stack.append(unpack_from("<H" if k == 2 else "<i", data, pos)[0])
                pos += k
            else:
                st.pos, st.frame_end = pos, frame_end
                try:
                    if COLD_OPS.get(op, unknown_opcode)(st, op, op_at):
                        break
                finally:  # a cold opcode that raises has read its bytes: the walk ends there
                    pos, stack, frame_end = st.pos, st.stack, st.frame_end
                fast = fast and frame_end <= pos  # it would step over a FRAME's end unchecked
            if not count & 0xFFF and st.outgrown(limits, op_at):
                break
    finally:
        st.pos, st.op_at, st.res.opcodes = pos, op_at, count


def _fast_step(st: WalkState, op: int, at: int) -> int:
    """Walk torch's per-tensor opcode run at `at` (its first opcode `op`) in one step
    (`fastpath`): the opcodes it holds, with `st.pos` then after it; 0 where there is none."""
    if op == 0x58:
        end, ops = match_entries(st.data, at, st.memo, st.allowed, GlobalRef, _Obj,
                                 st.shared_objs, st.stack.append, st.storages.append)
    else:
        found = match_unit(st.data, at, st.memo, st.allowed, GlobalRef, _Obj, st.shared_objs)
        if found is None:
            return 0
        end, value, ops, storage = found
        st.stack.append(value)
        st.storages.append(storage)
    st.pos = end
    return ops


def _importable(ref: GlobalRef) -> bool:
    return all(p.isidentifier() for p in ref.module.split(".") + ref.name.split("."))


def looks_like_pickle(scan: PickleScan) -> bool:
    """Whether a walk saw a real pickle: it reached STOP, or imported a real name before failing.

    Text that happens to start with `c` (GLOBAL) yields "imports" such as `lass Foo(Module):`,
    which no unpickler can import; those do not make the bytes a pickle.
    """
    return (scan.stopped or any(_importable(g) for g in scan.globals)
            or any(i.code == "limit" or (scan.protocol >= 2 and i.dangerous)
                   for i in scan.issues))


def imports_or_stops(scan: PickleScan) -> bool:
    """Whether a walk reached STOP or imported a real name: the test for bytes that are
    usually something else (tensor records), where a random run of opcodes must not count."""
    return scan.stopped or any(_importable(g) for g in scan.globals)


def imports(scan: PickleScan) -> bool:
    """Whether a walk imported a real name: the test for a tensor record. Without an import a
    pickle can call nothing, and a STOP alone is no sign: a record whose bytes start with
    0x2e (`.`), or `).`, `N.`, `}.` and other short complete pickles, is ordinary tensor data
    in roughly one record of 256 or of 65,536."""
    return any(_importable(g) for g in scan.globals)


class DisasmRow(NamedTuple):
    """One opcode for the Pickle pane: where, what, its argument, and how bad (None if fine)."""

    offset: int
    opcode: str
    argument: str
    severity: str | None
    calls: int | None = None
    """The offset of the flagged import this opcode calls (REDUCE, NEWOBJ, OBJ, BUILD)."""


def disassemble(data: bytes, limit: int = 10_000, start: int = 0) -> list[DisasmRow]:
    """Opcode rows of the pickle at `start` (at most `limit`), marked with the scanner's verdicts.

    Rows come from `pickletools.genops`, which only decodes; a row that cannot be decoded ends
    the listing with an `ERROR` row.
    """
    import pickletools

    rules = weights_only_rules()
    scan = scan_pickle(data, start, allowed=rules.allowed, wo_opcodes=rules.opcodes)
    marks: dict[int, str] = {}
    for ref in scan.globals:
        marks[ref.offset] = classify(ref.module, ref.name, rules).severity
    for issue in scan.issues:
        severity = Severity.DANGEROUS if issue.dangerous else Severity.SUSPICIOUS
        if marks.get(issue.offset) != Severity.DANGEROUS:
            marks[issue.offset] = severity
    calls: dict[int, int] = {}
    for call in scan.calls:
        # The opcode that makes a flagged call is as bad as the import it calls.
        mark = marks.get(call.func.offset) if call.func is not None else None
        if mark in (Severity.DANGEROUS, Severity.SUSPICIOUS) and call.offset != call.func.offset:
            calls[call.offset] = call.func.offset
            if marks.get(call.offset) != Severity.DANGEROUS:
                marks[call.offset] = mark
    rows: list[DisasmRow] = []
    stream = io.BytesIO(data)
    stream.seek(start)
    try:
        for op, arg, offset in pickletools.genops(stream):
            if len(rows) >= limit:
                break
            text = "" if arg is None else repr(arg)
            if op.name == "STACK_GLOBAL":
                ref = next((g for g in scan.globals if g.offset == offset), None)
                text = repr(ref.key) if ref else "<unresolved>"
            severity = marks.get(offset)
            rows.append(DisasmRow(offset, op.name, text[:200], None if severity == Severity.SAFE
                                  else severity, calls.get(offset)))
    except ValueError as exc:
        rows.append(DisasmRow(scan.end, "ERROR", str(exc)[:200], Severity.SUSPICIOUS))
    return rows
