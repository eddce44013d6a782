"""Kong batches that are not JSON as a whole. Pure logic: no I/O.

A batch whose top-level array is intact but holds an entry that is not JSON (a byte that is
not UTF-8, a NaN, nesting past the parser's depth limit) is split into its entries
(``split_entries``) so that the bad one alone is dead-lettered (``unreadable_entry``), its
reason naming the field that holds the first bad byte (``path_at``) and the values of the
headers to redact replaced (``redact_raw``).
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from anchorwatch.connectors.kong import RECORD
from anchorwatch.contracts import ContractError, FieldProblem

#: How the reason of an entry that is not JSON starts (its field is any key a client sent).
NOT_JSON: Final = "entry is not JSON"

# The structural tokens of JSON text: a whole string (escapes included, whatever bytes it
# holds), a lone quote (a string that never ends), brackets, commas and colons. Everything
# else (numbers, literals, whitespace, stray bytes) lies between them and is left to the
# parser of each entry.
_TOKEN: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|["\[\]{},:]', re.DOTALL)
_JSON_SPACE: Final = b" \t\n\r"
# What splitting needs: the next bracket or comma outside strings (strings, colons, numbers
# and the rest skipped inside the regex engine), or a quote that opens a string never closed.
_STRUCTURE: Final = re.compile(
    rb'(?:"[^"\\]*(?:\\.[^"\\]*)*"|[^"\[\]{},]++)*+([\[\]{},"]|\Z)', re.DOTALL
)


def split_entries(body: bytes) -> list[bytes] | None:
    """The bytes of each top-level entry of a body that is one entry (an object) or an
    array of them, without parsing the entries: a bad byte or number inside one entry does
    not stop its neighbours from being read. None when the top level itself is broken
    (unbalanced or mismatched brackets, a string that never ends, a trailing comma, text
    after the end)."""
    text = body.strip(_JSON_SPACE)
    if text[:1] not in (b"[", b"{"):
        return None
    stack: list[int] = []
    parts: list[bytes] = []
    start = 0
    end = -1
    for match in _STRUCTURE.finditer(text):
        token = match.group(1)
        if not token:
            break  # the end of the text
        first = token[0]
        if first == 0x22:  # a quote the strings before it did not close: never ends
            return None
        if first in b"[{":
            stack.append(first)
            if len(stack) == 1:
                start = match.end()
        elif first in b"]}":
            if not stack or stack.pop() != (0x5B if first == 0x5D else 0x7B):
                return None
            if not stack:
                end = match.start(1)
                if match.end() != len(text):
                    return None  # text after the top level
                break
        elif len(stack) == 1 and text[0] == 0x5B:  # ',' between entries
            parts.append(text[start : match.start(1)].strip(_JSON_SPACE))
            start = match.end()
    if end < 0:
        return None
    if text[0] == 0x7B:
        return [text]
    last = text[start:end].strip(_JSON_SPACE)
    if last or parts:
        parts.append(last)
    if any(not part for part in parts):
        return None  # an empty slot: "[,]", "[x,]"
    return parts


def unreadable_entry(
    raw: bytes,
    index: int,
    error: orjson.JSONDecodeError | UnicodeDecodeError,
    redact: frozenset[str],
) -> tuple[bytes, ContractError]:
    """The dead letter of an entry that is not JSON: its bytes (the values of ``redact``
    headers replaced), and the problem at the field holding the first bad byte."""
    if isinstance(error, UnicodeDecodeError):
        offset = error.start
        reason = f"{NOT_JSON}: byte 0x{raw[offset]:02x} is not UTF-8"
    else:
        # orjson counts characters; the text before the error decodes (the whole did).
        text = raw.decode("utf-8", errors="replace")
        offset = len(text[: error.pos].encode())
        reason = f"{NOT_JSON}: {error.msg}"
    where = path_at(raw, offset)
    problem = FieldProblem(where, f"{reason} (entry {index} of the batch, byte {offset})")
    return redact_raw(raw, redact), ContractError(RECORD, [problem])


def path_at(raw: bytes, offset: int) -> str:
    """The field of a JSON text's object that holds ``offset`` (``request.headers.x`` or
    ``a[2]``); "$" for the top level."""
    frames: list[list[Any]] = []  # [is_object, key or index, expecting a key]
    for match in _TOKEN.finditer(raw, 0, offset):
        token = match.group()
        first = token[0]
        if first == 0x7B:
            frames.append([True, None, True])
        elif first == 0x5B:
            frames.append([False, 0, False])
        elif first in b"]}":
            if frames:
                frames.pop()
        elif not frames:
            continue
        elif first == 0x2C:
            frame = frames[-1]
            if frame[0]:
                frame[1], frame[2] = None, True
            else:
                frame[1] += 1
        elif first == 0x3A:
            frames[-1][2] = False
        elif len(token) > 1 and frames[-1][0] and frames[-1][2]:
            frames[-1][1] = _key(token)
    path = ""
    for is_object, key, _ in frames:
        if not is_object:
            path += f"[{key}]"
        elif key is None:
            break  # between an object's members
        else:
            path += f".{key}" if path else key
    return path or "$"


def _key(token: bytes) -> str:
    try:
        key = orjson.loads(token)
    except orjson.JSONDecodeError:
        return token[1:-1].decode("utf-8", errors="replace")
    return str(key)


def redact_raw(raw: bytes, names: frozenset[str]) -> bytes:
    """``raw`` (JSON text that may not parse) with every string value of a key named in
    ``names`` (any case) replaced by ``"REDACTED"``."""
    out: list[bytes] = []
    copied = 0
    pending = False  # the last key was a name to redact; its value comes next
    key: str | None = None
    for match in _TOKEN.finditer(raw):
        token = match.group()
        if token == b":":
            pending = key is not None and key.lower() in names
            continue
        if pending and token[0] == 0x22 and len(token) > 1:
            out.append(raw[copied : match.start()])
            out.append(b'"REDACTED"')
            copied = match.end()
        pending = False
        key = _key(token) if token[0] == 0x22 and len(token) > 1 else None
    if not out:
        return raw
    out.append(raw[copied:])
    return b"".join(out)
