"""Which command-line paths name an object store: the one test every command makes of each
path, kept apart from `objstore` so a command on local files never imports the store's code."""

from __future__ import annotations

import re

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(text: object) -> bool:
    """Whether a command-line path names an object store (`scheme://…`, not file://)."""
    return isinstance(text, str) and bool(_URL.match(text)) and not text.startswith("file://")
