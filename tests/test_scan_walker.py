"""The static opcode walker: memo emulation, string opcodes, framing, bounds, recovery, the
torch fast path and the disassembly the GUI shows. Payloads here are never unpickled."""

from __future__ import annotations

import struct
import time

import pytest
from factories import (
    MEMOIZE,
    POP,
    PROTO2,
    PROTO4,
    REDUCE,
    STACK_GLOBAL,
    STOP,
    TUPLE1,
    p_binget,
    p_binput,
    p_binstring,
    p_frame,
    p_global,
    p_short_unicode,
    p_string,
    p_unicode,
    save_large_checkpoint,
)

from inspector.scan.engine import scan_bytes
from inspector.scan.pickles.walker import Limits, disassemble, looks_like_pickle, scan_pickle


def _keys(scan):
    return [g.key for g in scan.globals]


def _codes(scan):
    return {i.code for i in scan.issues}


STRING_OPS = {
    "STRING": p_string,
    "BINSTRING": p_binstring,
    "SHORT_BINSTRING": lambda s: b"U" + bytes([len(s)]) + s.encode(),
    "UNICODE": lambda s: b"V" + s.encode() + b"\n",
    "BINUNICODE": p_unicode,
    "SHORT_BINUNICODE": p_short_unicode,
    "BINUNICODE8": lambda s: b"\x8d" + struct.pack("<Q", len(s)) + s.encode(),
}


@pytest.mark.parametrize("opname", sorted(STRING_OPS))
def test_stack_global_operands_from_every_string_opcode(opname):
    enc = STRING_OPS[opname]
    data = PROTO4 + enc("os") + enc("system") + STACK_GLOBAL + p_unicode("id") + TUPLE1
    scan = scan_pickle(data + REDUCE + STOP)
    assert _keys(scan) == ["os.system"] and scan.stopped


def test_memo_emulation_put_memoize_get_variants():
    data = (PROTO4 + b"Vsubprocess\np5\n" + POP + p_short_unicode("x") + MEMOIZE + POP
            + p_short_unicode("call") + MEMOIZE + POP  # MEMOIZE uses len(memo): keys 1, then 2
            + b"g5\n" + p_binget(2) + STACK_GLOBAL + STOP)
    scan = scan_pickle(data)
    assert _keys(scan) == ["subprocess.call"]


def test_invalid_memo_key_is_unresolved_and_dangerous():
    data = PROTO4 + p_short_unicode("os") + p_binput(1) + p_binget(1) + p_binget(9)
    scan = scan_pickle(data + STACK_GLOBAL + STOP)
    assert {"bad-memo-key", "unresolved-import"} <= _codes(scan)
    assert any(i.dangerous for i in scan.issues)


def test_bytes_operands_cannot_name_a_global():
    data = PROTO4 + b"C\x02os" + b"C\x06system" + STACK_GLOBAL + STOP
    scan = scan_pickle(data)
    assert scan.globals == [] and "unresolved-import" in _codes(scan)


def test_python2_names_are_mapped_like_pickle_does():
    scan = scan_pickle(PROTO2 + p_global("__builtin__", "eval") + STOP)
    assert _keys(scan) == ["builtins.eval"]


def test_frame_is_not_a_boundary():
    # FRAME claims 3 bytes; CPython's C unpickler only checks they exist and reads on
    body = p_short_unicode("os") + p_short_unicode("system") + STACK_GLOBAL + STOP
    assert _keys(scan_pickle(PROTO4 + p_frame(3) + body)) == ["os.system"]
    truncated = scan_pickle(PROTO4 + p_frame(10_000) + body)
    assert truncated.error and "malformed" in _codes(truncated)


def test_keeps_going_after_semantic_errors():
    data = PROTO2 + TUPLE1 + POP + b"t" + p_binget(44) + p_global("os", "system") + STOP
    scan = scan_pickle(data)
    assert _keys(scan) == ["os.system"]
    assert {"stack-underflow", "missing-mark", "bad-memo-key"} <= _codes(scan)


def test_everything_before_an_undecodable_byte_is_reported():
    scan = scan_pickle(PROTO2 + p_global("os", "system") + b"\xfe\x00\x00")
    assert _keys(scan) == ["os.system"] and not scan.stopped and scan.error


def test_work_is_bounded():
    many = PROTO2 + b"N0" * 50_000 + STOP
    assert "limit" in _codes(scan_pickle(many, limits=Limits(max_opcodes=1000)))
    deep = PROTO2 + b"(" * 5000 + STOP
    assert "limit" in _codes(scan_pickle(deep, limits=Limits(max_depth=100)))
    huge = PROTO2 + b"X" + struct.pack("<I", 0xFFFFFFF0) + b"abc"
    t0 = time.perf_counter()
    scan = scan_pickle(huge)
    assert scan.error and time.perf_counter() - t0 < 1
    long8 = PROTO4 + b"\x8e" + struct.pack("<Q", 1 << 62) + STOP
    assert scan_pickle(long8).error


def test_text_starting_with_c_is_not_a_pickle():
    scan = scan_pickle(b"class Linear(Module):\n  weight: Tensor\n")
    assert not looks_like_pickle(scan)
    assert scan_bytes(b"class Linear(Module):\n  weight: Tensor\n").verdict == "error"


@pytest.fixture(scope="module")
def big_pickle(tmp_path_factory):
    import zipfile

    path = save_large_checkpoint(tmp_path_factory.mktemp("big") / "big.pt", 600)
    with zipfile.ZipFile(path) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))


def test_fast_path_gives_exactly_the_generic_result(big_pickle):
    from inspector.scan.pickles.policy import weights_only_rules

    rules = weights_only_rules()
    fast = scan_pickle(big_pickle, allowed=rules.allowed, wo_opcodes=rules.opcodes)
    slow = scan_pickle(big_pickle, allowed=rules.allowed, wo_opcodes=rules.opcodes, fast=False)
    assert fast.stopped and slow.stopped
    assert (fast.opcodes, fast.end, fast.globals, fast.storages, fast.wo_blockers) == (
        slow.opcodes, slow.end, slow.globals, slow.storages, slow.wo_blockers)
    assert len(fast.storages) == 600
    assert {s.key for s in fast.storages} == {str(i) for i in range(600)}


def test_fast_path_does_not_hide_a_tampered_memo(big_pickle):
    # overwrite the memoised rebuild function with os.system just before the STOP's dict
    from inspector.scan.pickles.policy import weights_only_rules

    rules = weights_only_rules()
    mid = big_pickle.index(b"X\x0b\x00\x00\x00layers.9.p0")
    evil = p_global("os", "system") + p_binput(2) + POP
    data = big_pickle[:mid] + evil + big_pickle[mid:]
    scan = scan_pickle(data, allowed=rules.allowed, wo_opcodes=rules.opcodes)
    assert "os.system" in _keys(scan)
    assert any("REDUCE of os.system" in b for b in scan.wo_blockers)


def test_disassemble_marks_what_the_scanner_found():
    data = PROTO4 + p_short_unicode("os") + p_binput(1) + POP + p_binget(1)
    data += p_short_unicode("system") + STACK_GLOBAL + p_unicode("id") + TUPLE1 + REDUCE + STOP
    rows = disassemble(data)
    assert [r.offset for r in rows] == sorted(r.offset for r in rows)
    sg = next(r for r in rows if r.opcode == "STACK_GLOBAL")
    assert sg.argument == "'os.system'" and sg.severity == "dangerous"
    assert rows[-1].opcode == "STOP"
    assert len(disassemble(data, limit=3)) == 3
    broken = disassemble(PROTO2 + p_global("os", "system") + b"\xff")
    assert broken[-1].opcode == "ERROR" and broken[1].severity == "dangerous"


def _summary(scan):
    return (scan.globals, scan.storages, scan.wo_blockers, scan.opcodes, scan.end, scan.stopped,
            [(i.code, i.offset) for i in scan.issues],
            [(c.func, c.opcode, c.offset, c.strings) for c in scan.calls])


@pytest.mark.parametrize("mode", ["memo-keys", "any-byte"])
def test_fast_path_matches_generic_walk_on_mutations(big_pickle, mode):
    # Rewrite memo keys (collisions, keys stored inside the same tensor run, missing keys) or
    # any byte at all; the fast path must still give exactly the generic walk's result.
    import random

    from inspector.scan.pickles.policy import weights_only_rules

    rules = weights_only_rules()
    head = big_pickle[:3000]
    spots = [i for i in range(2, len(head) - 1) if head[i] in (0x71, 0x68)]
    rng = random.Random(7)
    for _ in range(200):
        data = bytearray(head)
        for _ in range(3):
            if mode == "memo-keys":
                data[rng.choice(spots) + 1] = rng.randrange(0, 40)
            else:
                data[rng.randrange(2, len(head))] = rng.randrange(256)
        data = bytes(data)
        fast = scan_pickle(data, allowed=rules.allowed, wo_opcodes=rules.opcodes)
        slow = scan_pickle(data, allowed=rules.allowed, wo_opcodes=rules.opcodes, fast=False)
        assert _summary(fast) == _summary(slow)


def test_hostile_nesting_does_not_crash_the_scan(tmp_path):
    deep = PROTO2 + p_global("os", "system") + p_unicode("id") + TUPLE1 * 200_000 + REDUCE + STOP
    res = scan_bytes(deep)
    assert res.verdict == "dangerous" and res.error is None
    header = "{'descr': " + "[" * 5000 + "]" * 5000 + ", 'fortran_order': False, 'shape': (1,)}"
    npy = b"\x93NUMPY\x02\x00" + struct.pack("<I", len(header)) + header.encode()
    res = scan_bytes(npy)
    assert res.verdict in ("error", "suspicious") and "Traceback" not in (res.error or "")
