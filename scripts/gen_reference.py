"""Bring the generated block of every docs/commands/NAME.md up to date with
inspector/cli/reference.py and the parsers (run after changing an option or an exit code;
tests/test_docs_reference.py fails until you do)."""

from __future__ import annotations

from pathlib import Path

from inspector.cli import COMMANDS
from inspector.cli.reference import page_with_block

PAGES = Path(__file__).resolve().parent.parent / "docs" / "commands"


def main() -> None:
    """Write each page whose block is out of date."""
    PAGES.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        page = PAGES / f"{name}.md"
        old = page.read_text() if page.exists() else None
        new = page_with_block(name, old)
        if new != old:
            page.write_text(new)
            print(f"wrote {page}")


if __name__ == "__main__":
    main()
