"""A call of a class the deny list already makes dangerous (`logging.FileHandler('x')`,
`imaplib.IMAP4_stream('x')`) is not read from source as an enum lookup: its import decides the
verdict, and parsing the module (20 ms each for logging's, imaplib's and http.client's) was
most of the corpus folder scan's first walk. A class the deny list does not name is still
read, and the verdict of both stays as the real loader's call deserves: dangerous."""

from __future__ import annotations

import pickle

from inspector.scan.engine import scan_bytes
from inspector.scan.pickles import state
from inspector.scan.pickles.walker import scan_pickle


def _reduce(module: str, name: str, *args: object) -> bytes:
    return (b"\x80\x02c" + f"{module}\n{name}\n".encode() + pickle.dumps(args, 2)[2:-1]
            + b"R.")


def test_a_denied_class_called_with_one_word_has_no_source_read(monkeypatch) -> None:
    asked: list[tuple[str, str]] = []
    monkeypatch.setattr(state, "is_enum_class", lambda m, n: asked.append((m, n)) or False)
    for module, name in (("logging", "FileHandler"), ("imaplib", "IMAP4_stream"),
                         ("http.client", "HTTPSConnection")):
        scan_pickle(_reduce(module, name, "x"))
    assert asked == []
    scan_pickle(_reduce("gadgets", "Mode", "x"))
    assert asked == [("gadgets", "Mode")]


def test_a_denied_class_called_with_one_word_stays_dangerous() -> None:
    for module, name in (("logging", "FileHandler"), ("imaplib", "IMAP4_stream")):
        res = scan_bytes(_reduce(module, name, "x"))
        assert res.verdict == "dangerous", res.to_json()
        assert any(g.module == module and g.name == name and g.severity == "dangerous"
                   for g in res.globals), res.to_json()
