"""Whether one pickle's stack and memo hold up, checked as `pickletools.dis` checks them.

`pickletools.dis` follows a pickle's stack and memo without running anything, and raises
ValueError where an unpickler would fail (no MARK to pop to, a memo key used before it is
stored or stored twice, a pop from too short a stack, a stack left over after STOP). It also
writes a line of text per opcode, which is most of its cost; `check_stack` makes the same checks,
in the same order, with the same messages, and writes nothing (a legacy torch file's data
pickle of up to 1 MiB is checked this way). Imports only the standard library.
"""

from __future__ import annotations

import pickletools

_MARK = pickletools.markobject
_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"})
_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})


def check_stack(data: bytes) -> None:
    """Raise what `pickletools.dis(data)` raises (ValueError, or the IndexError it meets on a
    MARK its stack no longer holds); return None where it finishes."""
    stack: list = []
    memo: dict = {}
    marks: list = []
    for opcode, arg, pos in pickletools.genops(data):
        name, before, after = opcode.name, opcode.stack_before, opcode.stack_after
        popped = len(before)
        error = None
        if _MARK in before or (name == "POP" and stack and stack[-1] is _MARK):
            if marks:
                marks.pop()
                while stack[-1] is not _MARK:
                    stack.pop()
                stack.pop()
                popped = before.index(_MARK) if _MARK in before else 0
            else:
                error = "no MARK exists on stack"
        if name in _PUTS:
            key = len(memo) if name == "MEMOIZE" else arg
            if key in memo:
                error = f"memo key {arg!r} already defined"
            elif not stack:
                error = "stack is empty -- can't store into memo"
            elif stack[-1] is _MARK:
                error = "can't store markobject in the memo"
            else:
                memo[key] = stack[-1]
        elif name in _GETS:
            if arg in memo:
                after = [memo[arg]]
            else:
                error = f"memo key {arg!r} has never been stored into"
        if error:
            raise ValueError(error)
        if len(stack) < popped:
            raise ValueError(f"tries to pop {popped} items from stack with only {len(stack)} "
                             "items")
        if popped:
            del stack[-popped:]
        if _MARK in after:
            marks.append(pos)
        stack.extend(after)
    if stack:
        raise ValueError(f"stack not empty after STOP: {stack!r}")
