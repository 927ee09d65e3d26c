"""Whether text reads like Python source or a shell command.

Its own module, importing only `re` and `unicodedata`: the jailed dry run
(`sandbox.worker.dry_run`) needs this and nothing else of the policy, and every import there is
paid on each worker's start."""

from __future__ import annotations

import re
import unicodedata

_CODE_RE = re.compile(
    r"__import__|\bimport\s+[\w.]+|\bexec\s*\(|\beval\s*\(|\bcompile\s*\(|\bos\.\w+\s*\(|"
    r"\bsubprocess\b|\bsystem\s*\(|\bopen\s*\(|\blambda\b.*:|/bin/(?:ba|z|da)?sh\b|\bsh\s+-c\b|"
    r"\bcurl\s|\bwget\s|\bnc\s+-|\brm\s+-rf\b|"
    r"\bpowershell\b|\bcmd(?:\.exe)?\s+/c\b|__builtins__|__globals__|__subclasses__",
    re.IGNORECASE,
)
# Python calls a name however the call is spelt: `(open)(...)`, `open  # note` + newline +
# `(...)`, `open\` + newline + `(...)`, `ｏｐｅｎ(...)` (names are read NFKC-normalised). So the
# text is also read as Python's tokenizer reads it (comments and line joins dropped, string
# literals kept whole, a `#` inside one no comment) and a called name is looked for there,
# past any closing parentheses between it and its call.
_HINT_RE = re.compile(r"exec|eval|compile|open|system|\bos\b|import", re.IGNORECASE)
_TOKEN_RE = re.compile(r"""#[^\r\n]*|\\\r?\n|'(?:\\.|[^'\\\r\n])*'|"(?:\\.|[^"\\\r\n])*"|"""
                       r"""[^\W\d]\w*|\S""")
_CALLED_RE = re.compile(r"\b(?:exec|eval|compile|open|system|__import__|os(?: \))* \. \w+)"
                        r"(?: \))* \(", re.IGNORECASE)


def _as_tokens(text: str) -> str:
    """`text` as the tokens Python reads, one space between each, comments and line joins
    left out."""
    return " ".join(t for t in _TOKEN_RE.findall(text) if t[0] != "#" and t[0] != "\\")


def looks_like_code(text: str) -> bool:
    """Whether a call argument reads like Python source or a shell command (read whole: code
    past any window is still code)."""
    if _CODE_RE.search(text):
        return True
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    if not _HINT_RE.search(text):
        return False
    tokens = _as_tokens(text)
    return bool(_CALLED_RE.search(tokens) or _CODE_RE.search(tokens))
