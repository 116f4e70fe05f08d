"""A bounded protobuf wire-format walker shared by the validators of protobuf formats (ONNX, TensorFlow).

No third-party parser sees hostile bytes first: the walker yields ``(field number, wire type, value)``
for one message, where a length-delimited value is only its ``(offset, length)`` span, so a caller
descends into the messages it cares about and skips everything else with a seek. A budget of fields
bounds the work a file can cause; a field running past its message is an error, as it is to protobuf.

Example:
    >>> import io
    >>> from registry.scanning._formatio import BoundedReader
    >>> data = b"\\x08\\x01\\x12\\x02hi"
    >>> w = ProtobufWalker(BoundedReader(io.BytesIO(data), len(data)), budget=100)
    >>> [(n, t, w.string(v) if t == 2 else v) for n, t, v in w.fields(0, len(data))]
    [(1, 0, 1), (2, 2, 'hi')]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from registry.scanning._formatio import BoundedReader

MAX_STRING = 1 << 16
MAX_GROUP_DEPTH = 32
_WIRE_VARINT, _WIRE_I64, _WIRE_LEN, _WIRE_START_GROUP, _WIRE_END_GROUP, _WIRE_I32 = 0, 1, 2, 3, 4, 5


class ProtobufError(Exception):
    """The bytes are not a well-formed message (``offset`` says where)."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset


class ProtobufBudgetError(Exception):
    """More fields than the walker's budget: the rest was not looked at."""


class ProtobufWalker:
    """Iterates the fields of messages in ``reader``, counting every field against one budget.

    Args:
        reader: the bounded reader over the file.
        budget: how many fields may be visited in all (then :class:`ProtobufBudgetError`).
        groups: skip group fields (wire types 3/4) as unknown fields the way protobuf parsers do;
            when False (formats that never use groups) a group is a :class:`ProtobufError`.
    """

    def __init__(self, reader: BoundedReader, *, budget: int, groups: bool = False) -> None:
        self.r = reader
        self.budget = budget
        self.groups = groups

    def varint(self) -> int:
        result = 0
        for shift in range(0, 70, 7):
            byte = self.r.u8()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
        raise ProtobufError(self.r.pos, "varint longer than 10 bytes")

    def _tick(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise ProtobufBudgetError()

    def fields(self, start: int, end: int) -> Iterator[tuple[int, int, Any]]:
        """Yield ``(number, wire_type, value)`` of the message at ``[start, end)``.

        For wire type 0 the value is the integer, for wire type 2 its ``(offset, length)`` span,
        otherwise None. The reader may be moved by the caller between fields.

        Raises:
            ProtobufError: malformed field (also a field running past ``end``).
            TruncatedError: the file ends inside a field.
            ProtobufBudgetError: the budget is spent.
        """
        r = self.r
        r.seek(start)
        while r.pos < end:
            self._tick()
            at = r.pos
            tag = self.varint()
            number, wire = tag >> 3, tag & 7
            if number == 0:
                raise ProtobufError(at, "field number 0")
            value: Any = None
            if wire == _WIRE_VARINT:
                value = self.varint()
            elif wire == _WIRE_I64:
                r.skip(8)
            elif wire == _WIRE_I32:
                r.skip(4)
            elif wire == _WIRE_LEN:
                length = self.varint()
                if length > end - r.pos:
                    raise ProtobufError(at, f"field {number} of {length} bytes runs past its message")
                value = (r.pos, length)
                r.skip(length)
            elif wire == _WIRE_START_GROUP and self.groups:
                self._skip_group(number, end, 1)
            else:
                raise ProtobufError(at, f"wire type {wire} in field {number}")
            if r.pos > end:
                raise ProtobufError(at, f"field {number} runs past its message")
            saved = r.pos
            yield number, wire, value
            r.seek(saved)

    def _skip_group(self, number: int, end: int, depth: int) -> None:
        """Skip an (obsolete) group up to its matching end tag, as parsers skip unknown groups."""
        r = self.r
        if depth > MAX_GROUP_DEPTH:
            raise ProtobufError(r.pos, f"groups nested deeper than {MAX_GROUP_DEPTH}")
        while r.pos < end:
            self._tick()
            at = r.pos
            tag = self.varint()
            inner, wire = tag >> 3, tag & 7
            if inner == 0:
                raise ProtobufError(at, "field number 0")
            if wire == _WIRE_END_GROUP:
                if inner != number:
                    raise ProtobufError(at, f"group {number} closed by end tag {inner}")
                return
            if wire == _WIRE_VARINT:
                self.varint()
            elif wire == _WIRE_I64:
                r.skip(8)
            elif wire == _WIRE_I32:
                r.skip(4)
            elif wire == _WIRE_LEN:
                r.skip(self.varint())
            elif wire == _WIRE_START_GROUP:
                self._skip_group(inner, end, depth + 1)
            else:
                raise ProtobufError(at, f"wire type {wire} in field {inner}")
        raise ProtobufError(r.pos, f"group {number} is not closed")

    def raw(self, span: Any, limit: int = MAX_STRING) -> bytes | None:
        """The bytes of a length-delimited value; None when longer than ``limit``."""
        offset, length = span
        if length > limit:
            return None
        self.r.seek(offset)
        return self.r.read(length)

    def string(self, span: Any, limit: int = MAX_STRING) -> str | None:
        """Decode a length-delimited value as UTF-8; None when longer than ``limit``.

        Raises:
            ProtobufError: not valid UTF-8.
        """
        offset, length = span
        if length > limit:
            return None
        self.r.seek(offset)
        try:
            return self.r.read(length).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtobufError(offset, "string field is not valid UTF-8") from None
