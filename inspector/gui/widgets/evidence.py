"""The Overview's evidence for a flagged file: each reconstructed call as pseudo-Python, linked
to its opcode in the Pickle pane.

A link is an `opcode:` URL carrying the pickle's zip member (absent for a bare pickle) and the
opcode's offset, so the page needs no state to resolve a click.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar
from urllib.parse import quote, unquote

from PySide6.QtCore import QEvent, QUrl, Signal
from PySide6.QtWidgets import QTextBrowser, QWidget

from inspector.core.termtext import html_escape
from inspector.core.verdict import rank
from inspector.gui.explain import (
    CALLS_CAPTION,
    MORE_NOT_SHOWN,
    OPCODE_LINK_TIP,
    import_advice,
)
from inspector.gui.verdict_style import verdict_style
from inspector.scan.indicators import call_sites, import_label, location
from inspector.scan.result import Finding, GlobalUse

T = TypeVar("T", GlobalUse, Finding)

SCHEME = "opcode"
SHOWN = 200
"""Imports and findings drawn per kind: a hostile file can list thousands, and the page is
built on the UI thread (4,000 findings with calls take about 0.4 s to lay out)."""


def opcode_href(member: str | None, offset: int) -> str:
    """The link to the opcode at `offset` of the pickle in `member` (None: not in a zip).

    The member is percent-encoded whole, so the link needs no HTML escaping (Qt's HTML reader
    keeps entities in attributes as written).
    """
    return f"{SCHEME}:{offset}" + ("" if member is None else f"#{quote(member, safe='')}")


ACTION_SCHEME = "action"
ACTIONS = {"inspect": "Check every tensor record now"}
"""What a finding's advice to run a command becomes in the app: the command -> its link text."""
_CLI_ADVICE = re.compile(r";?\s*run `ckpt-inspector (\w+)[^`]*`[^;.]*")


def actionable_message(message: str) -> str:
    """A finding's message as HTML, its "run `ckpt-inspector CMD`" advice replaced by a link
    that does it in the app (`action:CMD`), or dropped when the app has no such action."""
    match = _CLI_ADVICE.search(message)
    if match is None:
        return html_escape(message)
    action = match.group(1)
    link = (f" — <a href='{ACTION_SCHEME}:{action}'>{html_escape(ACTIONS[action])}</a>"
            if action in ACTIONS else "")
    return html_escape(message[:match.start()] + message[match.end():]) + link


def opcode_target(url: QUrl) -> tuple[str | None, int] | None:
    """(member, offset) of an `opcode:` link; None for any other URL."""
    if url.scheme() != SCHEME or not url.path().isdigit():
        return None
    member = unquote(url.fragment(QUrl.ComponentFormattingOption.FullyEncoded))
    return (member if url.hasFragment() else None), int(url.path())


def linked_location(member: str | None, offset: int | None) -> str:
    """'member x, offset 51' as HTML, a link to the opcode when the offset is known."""
    text = html_escape(location(member, offset))
    if offset is None:
        return text
    return (f"<a href='{opcode_href(member, offset)}' "
            f"title='{OPCODE_LINK_TIP}'>{text}</a>")


def call_html(text: str, member: str | None, offset: int | None) -> str:
    """One call as wrapped monospace pseudo-Python; a link to its opcode where it is known."""
    code = html_escape(text)
    where = ""
    if offset is not None:
        code = (f"<a href='{opcode_href(member, offset)}' "
                f"title='{OPCODE_LINK_TIP}'>{code}</a>")
        # no break inside the comment: a wrapped call keeps its place on one line
        where = "  #&nbsp;" + html_escape(location(member, offset)).replace(" ", "&nbsp;")
    return f"<pre style='white-space:pre-wrap; margin:2px 0 6px 16px'>{code}{where}</pre>"


def import_html(g: GlobalUse, verdict: str | None = None, fmt: str | None = None) -> str:
    """A flagged global: severity, real name, why, the calls it would make, what to do
    (`import_advice`: in a dangerous file or a code archive, never to allow it)."""
    severity = g.severity
    advice = import_advice(severity, verdict, fmt)
    sites = call_sites(g)
    calls = "".join(call_html(text, site.get("member"), site.get("offset"))
                    for text, site in sites)
    return (
        f"<p><b style='color:{verdict_style(severity).colour}'>{severity.upper()}</b> "
        f"<code>{html_escape(import_label(g.module, g.name))}</code> — imported {g.count}×"
        + (f"<br>{html_escape(g.reason)}" if g.reason else "")
        + (f"<br><i>{html_escape(CALLS_CAPTION)}</i>" if sites else "") + "</p>"
        + calls
        + f"<p><b>What to do:</b> {html_escape(advice)}</p>"
    )


def worst_first(items: Sequence[T]) -> list[T]:
    """At most SHOWN of `items` (globals or findings), the most severe first, for the page."""
    return sorted(items, key=lambda x: -rank(x.severity))[:SHOWN]


def more_html(items: Sequence[GlobalUse | Finding]) -> str:
    """The line saying how many of `items` the page leaves out; '' when none."""
    hidden = len(items) - SHOWN
    return f"<p><i>{html_escape(MORE_NOT_SHOWN.format(n=hidden))}</i></p>" if hidden > 0 else ""


def finding_call_html(f: Finding) -> str:
    """The call a finding concerns, linked to its opcode; '' when it names none."""
    if not f.call:
        return ""
    return call_html(f.call, f.member, f.offset)


class EvidenceBrowser(QTextBrowser):
    """The Overview's findings page: a click on an `opcode:` link emits `opcode_requested`
    (the page stays), and a theme switch re-reads the page, since Qt colours links from the
    palette only when it reads the HTML."""

    opcode_requested = Signal(object, int)  # zip member (None outside a zip), opcode offset
    action_requested = Signal(str)  # the name of an `action:` link (ACTIONS)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._page = ""
        self.setOpenLinks(False)
        self.anchorClicked.connect(self._clicked)

    def setHtml(self, text: str) -> None:
        """Show `text`, kept to re-read on a theme switch."""
        self._page = text
        super().setHtml(text)

    def clear(self) -> None:
        """Show nothing."""
        self._page = ""
        super().clear()

    def changeEvent(self, event: QEvent) -> None:
        """Re-read the page in the new palette's link colour, at the same scroll position."""
        if event.type() == QEvent.Type.PaletteChange and self._page:
            scroll = self.verticalScrollBar().value()
            super().setHtml(self._page)
            self.verticalScrollBar().setValue(scroll)
        super().changeEvent(event)

    def _clicked(self, url: QUrl) -> None:
        target = opcode_target(url)
        if target is not None:
            self.opcode_requested.emit(*target)
        elif url.scheme() == ACTION_SCHEME and url.path() in ACTIONS:
            self.action_requested.emit(url.path())
