"""Bring the desktop integration's MIME XML and the `.desktop` entry's MimeType line up to date
with the format registry (`inspector/core/formats`; run after adding a format with a MIME type;
tests/test_formats_registry.py fails until you do)."""

from __future__ import annotations

from pathlib import Path

from inspector.formats.desktop import DESKTOP_FILE, MIME_FILE, desktop_entry, mime_xml

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    """Write each file that is out of date."""
    for name, render in ((MIME_FILE, lambda old: mime_xml()), (DESKTOP_FILE, desktop_entry)):
        path = ROOT / name
        old = path.read_text()
        new = render(old)
        if new != old:
            path.write_text(new)
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
