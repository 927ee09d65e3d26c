"""Text from a file, made safe to print: control characters and BiDi overrides are escaped.

`escape` for one string, `html_escape` for a page, and `safe_output` for the CLI's whole
terminal output: the one sanitiser every text sink of the user's process goes through; and
`counted`, the one way a count is worded; `write_exact_path`, the one way a path meant for
scripts is printed (exactly, or not at all)."""

from __future__ import annotations

import contextlib
import html
import io
import os
import sys
import unicodedata
from collections.abc import Iterator
from typing import TextIO


def counted(n: int, noun: str) -> str:
    """`n noun`, the noun plural unless n is 1: '1 file', '1,024 files'."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def agree(n: int, one: str, many: str) -> str:
    """The word that agrees with a count of `n`: `one` for 1, else `many` ('differs')."""
    return one if n == 1 else many


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape(text: str) -> str:
    """`text` with every C0/C1 control (ANSI escapes included), BiDi override, line separator
    and other invisible format character written as a visible `\\xNN` / `\\uNNNN` escape."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def html_escape(text: str, quote: bool = True) -> str:
    """`html.escape`, with each control or format character shown as a marked `\\xNN` /
    `\\uNNNN` (`<mark class="ctl">`), so a report shows what a file tried to hide; line breaks
    and tabs, harmless in HTML, stay."""
    if text.isprintable():
        return html.escape(text, quote)
    return "".join(html.escape(ch, quote) if ch.isprintable() or ch in "\n\t"
                   else f'<mark class="ctl">{_escaped(ch)}</mark>' for ch in text)


class SafeStream(io.TextIOBase):
    """A text stream that writes through to `stream` with `escape` applied to everything but
    line breaks and tabs, so no text a file, a log or a server supplied reaches the terminal
    raw, whichever print forgot to escape it. A write that starts with a carriage return (a
    progress line rewriting itself) keeps that one."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream

    def write(self, text: str) -> int:
        """Write `text` with its control and format characters made visible."""
        lead = "\r" if text.startswith("\r") else ""
        body = text[len(lead):]
        if not body.isprintable():
            body = "\n".join("\t".join(escape(part) for part in line.split("\t"))
                             for line in body.split("\n"))
        self._stream.write(lead + body)
        return len(text)

    def flush(self) -> None:
        """Flush the stream written to."""
        self._stream.flush()

    def isatty(self) -> bool:
        """Whether the stream written to is a terminal."""
        return self._stream.isatty()

    def fileno(self) -> int:
        """The descriptor of the stream written to."""
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The encoding of the stream written to."""
        return getattr(self._stream, "encoding", "utf-8")


@contextlib.contextmanager
def safe_output(stdout: bool = True) -> Iterator[None]:
    """Route `sys.stderr` (and `sys.stdout`, unless it carries JSON, whose encoder already
    escapes what is not text) through `SafeStream` for the duration."""
    saved = sys.stdout, sys.stderr
    try:
        sys.stderr = SafeStream(sys.stderr)
        if stdout:
            sys.stdout = SafeStream(sys.stdout)
        yield
    finally:
        sys.stdout, sys.stderr = saved


_UNSAFE_IN_A_LINE = frozenset({"Cc", "Cf", "Zl", "Zp"})
"""Categories of the characters a path printed for scripts may not hold: controls (a line
break ends the line early, an escape drives whatever terminal the line reaches), format
characters (BiDi overrides, zero-width ones) and line and paragraph separators."""


def write_exact_path(path: str, stream: TextIO) -> bool:
    """Write `path` and a line break to `stream` as the very bytes that name the file
    (`os.fsencode`), past `SafeStream`: a script that reads the line opens that file, never
    an escaped spelling that names another. On a terminal only a path `escape` leaves alone is
    written; elsewhere any path but one with a control (a tab aside), format or line-breaking
    character, which could end the line early or drive a terminal downstream. False, and
    nothing written, where the path cannot be given exactly."""
    target = stream._stream if isinstance(stream, SafeStream) else stream
    if target.isatty():
        exact = path.isprintable()
    else:
        exact = not any(ch != "\t" and unicodedata.category(ch) in _UNSAFE_IN_A_LINE
                        for ch in path)
    if not exact:
        return False
    try:
        raw = os.fsencode(path)  # an undecodable byte of a name comes back as that byte
    except UnicodeEncodeError:  # a lone surrogate no file name decodes to
        return False
    buffer = getattr(target, "buffer", None)
    if buffer is None:  # a text-only stream (a test's StringIO): the text is the path
        target.write(path + "\n")
        return True
    target.flush()  # what was written as text comes first
    buffer.write(raw + b"\n")
    buffer.flush()
    return True
