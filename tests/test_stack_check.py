"""`layout.stack_check.check_stack` decides as `pickletools.dis` does (what torch's legacy
stream check rests on): the same exception with the same message, or none, for the corpus's
pickles, thousands of mutants of them and pickles made to break each rule."""

from __future__ import annotations

import io
import pickle
import pickletools
import random
from pathlib import Path

from factories import mutate

from inspector.layout.stack_check import check_stack

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "picklescan"


def _outcome(check, data: bytes) -> tuple[str, str] | None:
    try:
        check(data)
    except Exception as exc:  # whatever dis raises, ours must raise too
        return type(exc).__name__, str(exc)
    return None


def _dis(data: bytes) -> None:
    pickletools.dis(data, out=io.StringIO())


BROKEN = [
    b"(\x85t.",  # TUPLE1 pops the MARK, then TUPLE looks for it: IndexError
    b"K\x01t.",  # no MARK
    b"K\x01q\x00q\x00.",  # a memo key stored twice
    b"q\x00K\x01.",  # a store from an empty stack
    b"(q\x00.",  # the MARK stored
    b"h\x05.",  # a key never stored
    b"\x85.",  # a pop from an empty stack
    b"K\x01K\x02.",  # a stack left over after STOP
    b"K\x01\x94\x94.",  # MEMOIZE twice of one value: two keys, fine
    b"(K\x010.",  # POP of a value above a MARK
    b"(0K\x01.",  # POP of the MARK itself
    b"\xff.",  # no opcode
    b"K",  # cut short
]


def test_check_stack_raises_what_pickletools_dis_raises():
    seeds = [p.read_bytes() for p in sorted(CORPUS.glob("data*/*.pkl"))]
    seeds += [pickle.dumps({"a": [1, (2, 3)], "b": {4}, "c": b"x"}, protocol=p) for p in range(6)]
    rng = random.Random(11)
    cases = BROKEN + seeds + [mutate(s, rng) for s in seeds for _ in range(60)]
    differ = [(data[:40], _outcome(_dis, data), _outcome(check_stack, data)) for data in cases
              if _outcome(_dis, data) != _outcome(check_stack, data)]
    assert differ == []
    kinds = {(o[0], o[1].split(" ")[0]) for o in map(lambda d: _outcome(_dis, d), cases) if o}
    assert len(kinds) >= 6, kinds  # the cases reach many of dis's refusals, not one
    assert _outcome(check_stack, BROKEN[0])[0] == "IndexError"
