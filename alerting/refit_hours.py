"""An hour of one type's refit windows as one compact value (``refit_rows`` folds the hours
that are over into these): pure packing, no I/O.

The fit needs every window's mean (median, MAD and quantiles of them; the hour-of-day
profile), so the history cannot shrink to hourly sums. It is packed without loss instead:
column after column, each window's start (milliseconds after the one before), length, request
count and mean drift (the very double), compressed. Starts a minute apart and windows of
one length compress to almost nothing: a window costs about 12 bytes on disk (its mean's
eight, little of which compresses), where a row of its own cost about 32.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Iterable
from typing import Final

from anchorwatch.policy.refit import Row

HOUR_MS: Final = 3_600_000
#: The first byte of a packed hour: its layout's version.
_VERSION: Final = 1


def hour_of(start_ms: int) -> int:
    """The start of the hour (epoch milliseconds) a window starting at ``start_ms`` is in."""
    return start_ms - start_ms % HOUR_MS


def pack(hour_ms: int, rows: Iterable[Row]) -> bytes:
    """The windows of the hour starting at ``hour_ms`` (a start once: the last one counts)."""
    by_start = {row[0]: row for row in rows}
    ordered = [by_start[s] for s in sorted(by_start)]
    for start, end, count, _ in ordered:
        if hour_of(start) != hour_ms or not 0 <= end - start < 2**32 or not 0 <= count < 2**32:
            raise ValueError(f"window ({start}, {end}, {count}) does not pack into {hour_ms}")
    n = len(ordered)
    starts = [r[0] for r in ordered]
    body = struct.pack(
        f"<I{n}I{n}I{n}I{n}d",
        n,
        # Each start after the one before: a minute's windows all give the same number.
        *(s - p for s, p in zip(starts, [hour_ms, *starts], strict=False)),
        *(r[1] - r[0] for r in ordered),
        *(r[2] for r in ordered),
        *(r[3] for r in ordered),
    )
    # Each column's bytes grouped by their place in the value, so the high bytes of the
    # small integers (all zero) and of the doubles (sign and exponent, nearly constant)
    # sit together and compress.
    return bytes([_VERSION]) + zlib.compress(_shuffle(body), 6)


def unpack(hour_ms: int, packed: bytes) -> list[Row]:
    """The windows ``pack`` was given, in start order."""
    if not packed or packed[0] != _VERSION:
        raise ValueError(f"not a packed hour of refit windows (version {packed[:1]!r})")
    body = _unshuffle(zlib.decompress(packed[1:]))
    (n,) = struct.unpack_from("<I", body)
    values = struct.unpack_from(f"<{n}I{n}I{n}I{n}d", body, 4)
    gaps, lengths, counts, means = (values[i * n : (i + 1) * n] for i in range(4))
    starts = list(itertools.accumulate(gaps, initial=0))[1:]
    return [
        (hour_ms + s, hour_ms + s + length, c, m)
        for s, length, c, m in zip(starts, lengths, counts, means, strict=True)
    ]


def _shuffle(body: bytes) -> bytes:
    """The 4-byte header as is, then byte 0 of every 4-byte integer, byte 1, ...; then the
    same for the 8-byte doubles (a byte shuffle, as Blosc and HDF5 filters do)."""
    (n,) = struct.unpack_from("<I", body)
    ints, doubles = body[4 : 4 + 12 * n], body[4 + 12 * n :]
    return body[:4] + _transpose(ints, 4) + _transpose(doubles, 8)


def _unshuffle(data: bytes) -> bytes:
    (n,) = struct.unpack_from("<I", data)
    ints, doubles = data[4 : 4 + 12 * n], data[4 + 12 * n :]
    return data[:4] + _untranspose(ints, 4) + _untranspose(doubles, 8)


def _transpose(data: bytes, width: int) -> bytes:
    return b"".join(data[i::width] for i in range(width))


def _untranspose(data: bytes, width: int) -> bytes:
    n = len(data) // width
    out = bytearray(len(data))
    for i in range(width):
        out[i::width] = data[i * n : (i + 1) * n]
    return bytes(out)
