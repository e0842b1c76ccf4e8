"""CRC-32C (Castagnoli), the checksum of TFRecord framing, in pure Python.

A 256-entry table, one byte per step: ~1 s per 10 MB here, which is ample for event records of a
few hundred bytes (scalars) to ~100 KB (an animated GIF). The ``crc32c`` package would be faster but
is a compiled dependency the render process does not otherwise need.
"""

_POLYNOMIAL = 0x82F63B78  # Castagnoli's polynomial, bit-reversed
_MASK_DELTA = 0xA282EAD8


def _make_table() -> tuple:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLYNOMIAL if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _make_table()


def crc32c(data: bytes) -> int:
    """The CRC-32C of ``data``."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC: a checksum of data that itself holds checksums stays informative."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
