"""A safetensors header nested thousands deep is a one-line error, never a RecursionError.

`formats.safetensors_header` counts the JSON's nesting without parsing it (`MAX_DEPTH`) before
Python's recursive parser sees it; `inspect` and `scan` then say the file is unreadable.
"""

from __future__ import annotations

import json
import struct

import pytest

from inspector.cli import main
from inspector.formats.safetensors_header import MAX_DEPTH, read_buffer

ENTRY = '"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'


def _file(header: str) -> bytes:
    raw = header.encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * 4


def _deep(levels: int, closed: bool = True) -> str:
    inner = '{"a":' * levels + "1" + ("}" * levels if closed else "")
    return "{" + ENTRY + ',"deep":' + inner + ("}" if closed else "")


@pytest.mark.parametrize("header", [
    _deep(5000), _deep(5000, closed=False),
    "{" + ENTRY + ',"deep":' + "[" * 5000 + "]" * 5000 + "}",
    '{"__metadata__":' + '{"x":' * 3000 + '"y"' + "}" * 3000 + "," + ENTRY + "}",
])
def test_a_header_nested_past_the_limit_is_refused_before_parsing(header):
    data = _file(header)
    with pytest.raises(RecursionError):  # what Python's own parser does with it
        json.loads(header)
    parsed = read_buffer(data, len(data))
    assert parsed.error is not None and "nests deeper than" in parsed.error
    assert parsed.spans == []


def test_nesting_within_the_limit_and_brackets_inside_strings_are_read():
    data = _file(_deep(MAX_DEPTH - 3))
    parsed = read_buffer(data, len(data))
    assert parsed.error is None and [s[2] for s in parsed.spans] == ["t"]
    # a key made of brackets is text, not nesting
    brackets = _file('{"__metadata__":{"note":"' + "[{" * 5000 + '\\"}"},' + ENTRY + "}")
    parsed = read_buffer(brackets, len(brackets))
    assert parsed.error is None and parsed.metadata["note"].startswith("[{[{")
    too_deep = _file(_deep(MAX_DEPTH + 1))
    assert read_buffer(too_deep, len(too_deep)).error is not None


def test_inspect_of_a_deeply_nested_header_is_one_line_and_no_traceback(tmp_path, capsys):
    path = tmp_path / "deep.safetensors"
    path.write_bytes(_file(_deep(5000)))
    code = main(["inspect", str(path)])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "RecursionError" not in out.out + out.err
    [line] = [ln for ln in out.out.splitlines() if ln.startswith("error:")]
    assert f"nests deeper than {MAX_DEPTH} levels" in line
    assert code == 5  # inspect: the load failed
    assert main(["scan", str(path)]) == 3  # scan: an error, the file could not be read
    assert "nests deeper than" in capsys.readouterr().out
