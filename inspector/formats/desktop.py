"""The Linux desktop integration's file types, rendered from the registry: the shared-mime-info
XML and the `.desktop` entry's `MimeType=` line (`scripts/gen_desktop_files.py` writes them;
`tests/test_formats_registry.py` fails while the checked-in files differ)."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from inspector.formats.registry import mime_types

APP_ID = "io.github.ckptinspector.CheckpointInspector"
MIME_FILE = f"packaging/linux/{APP_ID}.mime.xml"
DESKTOP_FILE = f"packaging/linux/{APP_ID}.desktop"


def mime_xml() -> str:
    """The shared-mime-info file: one type per registered MIME, its globs from the suffixes."""
    types = mime_types()
    globs = " / ".join(g for _, gs in types.values() for g in gs)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f"<!-- Lets file managers open {globs} files with Checkpoint Inspector.",
             "     The app itself detects formats from the bytes; these globs only route the "
             "files to it.",
             "     Generated from inspector/core/formats by scripts/gen_desktop_files.py: "
             "do not edit. -->",
             '<mime-info xmlns="http://www.freedesktop.org/standards/shared-mime-info">']
    for mime, (label, suffixes) in types.items():
        lines += [f"  <mime-type type={quoteattr(mime)}>",
                  f"    <comment>{escape(label)}</comment>",
                  '    <generic-icon name="application-x-generic"/>',
                  *(f"    <glob pattern={quoteattr('*' + s)}/>" for s in suffixes),
                  "  </mime-type>"]
    return "\n".join([*lines, "</mime-info>", ""])


def desktop_entry(text: str) -> str:
    """A `.desktop` entry with its `MimeType=` line set to the registered MIME types."""
    line = "MimeType=" + "".join(f"{m};" for m in mime_types())
    return "".join(line + "\n" if old.startswith("MimeType=") else old
                   for old in text.splitlines(keepends=True))
