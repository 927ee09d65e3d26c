"""Whether text reads like Python source or a shell command.

Its own module, importing only `re`: the jailed dry run (`sandbox.worker.dry_run`) needs this and
nothing else of the policy, and every import there is paid on each worker's start."""

from __future__ import annotations

import re

_CODE_RE = re.compile(
    r"__import__|\bimport\s+[\w.]+|\bexec\s*\(|\beval\s*\(|\bcompile\s*\(|\bos\.\w+\s*\(|"
    r"\bsubprocess\b|\bsystem\s*\(|\bopen\s*\(|\blambda\b.*:|/bin/(?:ba|z|da)?sh\b|\bsh\s+-c\b|"
    r"\bcurl\s|\bwget\s|\bnc\s+-|\brm\s+-rf\b|"
    r"\bpowershell\b|\bcmd(?:\.exe)?\s+/c\b|__builtins__|__globals__|__subclasses__",
    re.IGNORECASE,
)


def looks_like_code(text: str) -> bool:
    """Whether a call argument reads like Python source or a shell command (read whole: code
    past any window is still code)."""
    return bool(_CODE_RE.search(text))
