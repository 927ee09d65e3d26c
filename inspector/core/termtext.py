"""Text from a file, made safe to print: control characters and BiDi overrides are escaped."""

from __future__ import annotations

import html


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
