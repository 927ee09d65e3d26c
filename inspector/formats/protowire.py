"""Protocol buffer messages read from their wire format against a schema, as protobuf's own
parser reads them: fields in any order, unknown fields skipped, repeated numbers packed or not.

A length past its message, a varint longer than ten bytes, a group, or nesting deeper than
protobuf's default limit make the bytes no message of that schema (`WireError`); a known field
with another wire type is, as protobuf treats it, an unknown field, and so is a group. Work is
one step per field, and `max_fields` bounds the steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

MAX_DEPTH = 100  # protobuf's default recursion limit

VARINT, FIXED64, BYTES, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
Kind = str
"""A field's kind in a schema: a message name, "varint", "fixed32", "fixed64", "bytes" (a
string or bytes value, or a message not read further), or "packed:<wire>" (a repeated number,
packed or one per field)."""


class WireError(ValueError):
    """The bytes are not a message of the schema."""


class WireBudget(Exception):
    """More fields than `max_fields`: the message was not read to its end."""


@dataclass
class Message:
    """One decoded message: field number -> values (int, (begin, end) of bytes, or Message)."""

    name: str
    fields: dict[int, list] = field(default_factory=dict)

    def all(self, number: int) -> list:
        """Every value of a field."""
        return self.fields.get(number, [])

    def one(self, number: int, default=None):
        """The last value of a field (protobuf's rule for a repeated singular field)."""
        values = self.fields.get(number)
        return values[-1] if values else default


def varint(buf, pos: int, end: int) -> tuple[int, int]:
    """A varint at `pos` and the position after it."""
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError("varint runs past its message" if pos >= end else "varint too long")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value & ((1 << 64) - 1), pos
        shift += 7


def _key(buf, pos: int, end: int) -> tuple[int, int, int]:
    """The field number and wire type of the key at `pos`, and the position after it."""
    key, pos = varint(buf, pos, end)
    if key >> 3 == 0:
        raise WireError("field number 0")
    return key >> 3, key & 7, pos


def fields(buf, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(number, wire type, value or begin, end) of each field between `pos` and `end`; the
    value of a varint or fixed field is its integer (end: the position after it)."""
    while pos < end:
        number, wire, pos = _key(buf, pos, end)
        if wire == VARINT:
            value, pos = varint(buf, pos, end)
            yield number, wire, value, pos
        elif wire in (FIXED64, FIXED32):
            width = 8 if wire == FIXED64 else 4
            if pos + width > end:
                raise WireError("fixed field runs past its message")
            yield number, wire, int.from_bytes(buf[pos:pos + width], "little"), pos + width
            pos += width
        elif wire == BYTES:
            length, pos = varint(buf, pos, end)
            if length > end - pos:
                raise WireError("length runs past its message")
            yield number, wire, pos, pos + length
            pos += length
        elif wire == START_GROUP:
            pos = _skip_group(buf, pos, end, number, 1)  # protobuf keeps it as unknown
        else:
            raise WireError(f"wire type {wire}")


def _skip_group(buf, pos: int, end: int, number: int, depth: int) -> int:
    """The position after the END_GROUP that closes group `number` opened before `pos`."""
    if depth > MAX_DEPTH:
        raise WireError("groups nested deeper than protobuf reads")
    while pos < end:
        inner, wire, pos = _key(buf, pos, end)
        if wire == END_GROUP:
            if inner != number:
                raise WireError("a group closed by another field number")
            return pos
        if wire == VARINT:
            _, pos = varint(buf, pos, end)
        elif wire in (FIXED64, FIXED32):
            pos += 8 if wire == FIXED64 else 4
        elif wire == BYTES:
            length, pos = varint(buf, pos, end)
            pos += length
        elif wire == START_GROUP:
            pos = _skip_group(buf, pos, end, inner, depth + 1)
        else:
            raise WireError(f"wire type {wire}")
        if pos > end:
            raise WireError("a group runs past its message")
    raise WireError("a group that is never closed")


def _check_packed(buf, pos: int, end: int, wire: int) -> None:
    """Packed numbers as protobuf checks them: whole varints, or a whole number of fixed ones."""
    if wire == VARINT:
        while pos < end:
            _, pos = varint(buf, pos, end)
    elif (end - pos) % (8 if wire == FIXED64 else 4):
        raise WireError("packed fixed-width numbers that do not fill their field")


_WIRES = {"varint": (VARINT,), "fixed32": (FIXED32,), "fixed64": (FIXED64,), "bytes": (BYTES,)}


@dataclass
class Reader:
    """Decodes messages of one schema: message name -> {field number: kind}."""

    schema: dict[str, dict[int, Kind]]
    singular: frozenset[tuple[str, int]] = frozenset()
    """(message, field) of message fields that are not repeated: protobuf merges each
    occurrence into the one before, and so does this reader."""
    max_fields: int = 20_000_000
    steps: int = 0

    def read(self, name: str, buf, pos: int, end: int, depth: int = 0) -> Message:
        """The message `name` in buf[pos:end]; WireError where it is not one."""
        if depth > MAX_DEPTH:
            raise WireError("messages nested deeper than protobuf reads")
        spec = self.schema[name]
        out = Message(name)
        for number, wire, value, stop in fields(buf, pos, end):
            self.steps += 1
            if self.steps > self.max_fields:
                raise WireBudget(f"more than {self.max_fields} fields")
            kind = spec.get(number)
            if kind is None:
                continue  # an unknown field: protobuf keeps it aside, and so it is skipped
            # a known field with another wire type is an unknown field to protobuf: skipped
            if kind.startswith("packed:"):
                if wire == BYTES:
                    _check_packed(buf, value, stop, int(kind[7:]))
                continue  # numbers this reader has no use for
            if kind in _WIRES:
                if wire in _WIRES[kind]:
                    out.fields.setdefault(number, []).append(value if wire != BYTES
                                                             else (value, stop))
            elif wire == BYTES:
                sub = self.read(kind, buf, value, stop, depth + 1)
                before = out.fields.get(number)
                if before and (name, number) in self.singular:
                    self._merge(before[-1], sub)
                else:
                    out.fields.setdefault(number, []).append(sub)
        return out

    def _merge(self, into: Message, other: Message) -> None:
        """Merge `other` into `into` as protobuf's MergeFrom does: repeated fields join,
        singular messages merge, a singular scalar's last value wins (`Message.one`)."""
        for number, values in other.fields.items():
            before = into.fields.get(number)
            if before and (into.name, number) in self.singular:
                self._merge(before[-1], values[-1])
            else:
                into.fields.setdefault(number, []).extend(values)

    @staticmethod
    def text(buf, span: tuple[int, int]) -> str:
        """A string field's text; bytes that are not UTF-8 are kept as surrogates (as file
        names are), since proto2 strings are not checked."""
        return bytes(buf[span[0]:span[1]]).decode("utf-8", errors="surrogateescape")
