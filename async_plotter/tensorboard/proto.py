"""The few protocol-buffer messages of an event file, encoded by hand.

Only what is written here is implemented: varints, 64-bit and 32-bit fixed fields and
length-delimited fields, for these fields of ``tensorboard/compat/proto``'s ``event.proto`` and
``summary.proto``::

    Event:   wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5
    Summary: value = 1 (repeated Value)
    Value:   tag = 1 (string), simple_value = 2 (float), image = 4 (Image)
    Image:   height = 1, width = 2, colorspace = 3 (int32), encoded_image_string = 4 (bytes)

Hand-encoding keeps the render process free of any protobuf runtime (and of ``tensorboard``,
whose writer imports TensorFlow); the tests read the output back with TensorBoard's own reader.
"""
import struct
from typing import Iterable, Optional

# Wire types
_VARINT = 0
_FIXED64 = 1
_LENGTH_DELIMITED = 2
_FIXED32 = 5


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 negatives are ten-byte two's-complement varints
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _int_field(field: int, value: int) -> bytes:
    return _key(field, _VARINT) + _varint(value)


def _bytes_field(field: int, value: bytes) -> bytes:
    return _key(field, _LENGTH_DELIMITED) + _varint(len(value)) + value


def _double_field(field: int, value: float) -> bytes:
    return _key(field, _FIXED64) + struct.pack("<d", value)


def _float_field(field: int, value: float) -> bytes:
    return _key(field, _FIXED32) + struct.pack("<f", value)


def scalar_value(tag: str, value: float) -> bytes:
    """A ``Summary.Value`` holding ``simple_value`` (stored as float32, as TensorBoard does)."""
    return _bytes_field(1, tag.encode("utf-8")) + _float_field(2, value)


def image_value(tag: str, height: int, width: int, colorspace: int, encoded: bytes) -> bytes:
    """A ``Summary.Value`` holding an ``Image``: ``encoded`` is PNG, JPEG or GIF bytes;
    ``colorspace`` 3 is RGB."""
    image = (_int_field(1, height) + _int_field(2, width) + _int_field(3, colorspace) +
             _bytes_field(4, encoded))
    return _bytes_field(1, tag.encode("utf-8")) + _bytes_field(4, image)


def summary(values: Iterable[bytes]) -> bytes:
    """A ``Summary`` of encoded ``Value`` messages."""
    return b"".join(_bytes_field(1, value) for value in values)


def event(wall_time: float,
          step: int,
          *,
          file_version: Optional[str] = None,
          summary_bytes: Optional[bytes] = None) -> bytes:
    """An ``Event`` with either a ``file_version`` or an encoded ``Summary``."""
    out = _double_field(1, wall_time) + _int_field(2, step)
    if file_version is not None:
        out += _bytes_field(3, file_version.encode("utf-8"))
    if summary_bytes is not None:
        out += _bytes_field(5, summary_bytes)
    return out
