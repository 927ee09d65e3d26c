"""How CPython's C unpickler reads a FRAME from a file object without `peek()` (an io.BytesIO,
which torch.load hands every zip's data.pkl): an opcode whose argument runs past the frame's end
drops the frame's remaining bytes and reads afresh after it. `unbuffered_splice` gives the bytes
such a reader sees, so the walker can read them as it does."""

from __future__ import annotations

# How the C unpickler reads each opcode's argument: fixed sizes, a length then a body read the
# same way (strings, LONG1/4), a length then a body read past the buffer (bytes: readinto), or
# lines. Reads of the first kinds drop what is left of a FRAME's buffer when they need more.
_FIXED = {0x4A: 4, 0x4B: 1, 0x4D: 2, 0x68: 1, 0x6A: 4, 0x71: 1, 0x72: 4, 0x47: 8, 0x80: 1,
          0x82: 1, 0x83: 2, 0x84: 4, 0x95: 8}
_COUNTED_TEXT = {0x55: 1, 0x54: 4, 0x8C: 1, 0x58: 4, 0x8D: 8, 0x8A: 1, 0x8B: 4}
_COUNTED_BYTES = {0x43: 1, 0x42: 4, 0x8E: 8, 0x96: 8}
_LINES = {0x63: 2, 0x69: 2, 0x49: 1, 0x4C: 1, 0x46: 1, 0x53: 1, 0x56: 1, 0x67: 1, 0x70: 1,
          0x50: 1}
_COUNTED = _COUNTED_TEXT | _COUNTED_BYTES
_READING = frozenset(_FIXED | _COUNTED | _LINES)  # opcodes with an argument: the others read none


def unbuffered_splice(data: bytes, pos: int, op: int, buf_end: int) -> tuple[bytes, int]:
    """The bytes a reader without peek() sees for the opcode `op` whose argument starts at
    `pos`, inside a FRAME buffer ending at `buf_end`: where a read needs more than is left,
    the rest of the buffer is dropped and the read continues after it. Returns the data with
    those bytes removed and how many were (0: nothing changes)."""
    if op not in _READING:
        return data, 0

    def read(size: int) -> int:  # -> 0 or the bytes dropped for this read
        nonlocal pos
        if pos + size <= buf_end or pos >= buf_end:
            pos += size
            return 0
        return buf_end - pos

    reads: list[int] = []
    if op in _FIXED:
        reads = [_FIXED[op]]
    elif op in _COUNTED:
        reads = [_COUNTED[op]]
    for size in reads:
        cut = read(size)
        if cut:
            return data[:pos] + data[buf_end:], cut
    if op in _COUNTED_TEXT and pos <= len(data):
        width = _COUNTED_TEXT[op]
        size = int.from_bytes(data[pos - width:pos], "little", signed=width == 4)
        cut = read(max(size, 0))
        if cut:
            return data[:pos] + data[buf_end:], cut
    elif op == 0x95 and pos <= len(data):
        size = int.from_bytes(data[pos - 8:pos], "little")
        cut = read(size)
        if cut:
            return data[:pos] + data[buf_end:], cut
    for _ in range(_LINES.get(op, 0)):
        j = data.find(b"\n", pos, buf_end)
        if j >= 0:
            pos = j + 1
        elif pos < buf_end:
            return data[:pos] + data[buf_end:], buf_end - pos
    return data, 0
