"""TorchScript code whose operator spelling a comment splits: `(torch  # x` on one line and
`.from_file)(...)` on the next. TorchScript's lexer skips the comment as it skips space, so
`torch.jit.load` compiles a call of torch.from_file (or torch.save, or ops.aten.*) and runs it
from the class's `__setstate__`. Each archive is scanned first (dangerous, naming the operator,
its canary absent), then loaded by torch.jit.load in a process of its own: the canary appears.
The benign twin, a harmless operator split the same way, keeps its one plain suspicious line."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from test_scan_script_code import _jit_load, _make, _scan

from inspector.formats.archives.script_code import op_uses

# name -> (model kind of test_scan_script_code, what torch's printer wrote, the spelling put
# in its place, the operator)
SPLIT = {
    "torch_from_file": ("from_file", b"torch.from_file(", b"(torch  # x\n      .from_file)(",
                        "aten::from_file"),
    "ops_aten_from_file": ("from_file", b"torch.from_file(",
                           b"(ops  # a\n      .aten  # b\n      .from_file)(", "aten::from_file"),
    "torch_save": ("save", b"torch.save(", b"(torch  # x\n      .save)(", "aten::save"),
    "ops_aten_save": ("save", b"torch.save(", b"(ops  # a\n      .aten\n      # b\n      .save)(",
                      "aten::save"),
}


def _edited(src: Path, dst: Path, old: bytes, new: bytes) -> Path:
    """The archive with `old` in its code replaced by `new` (once, where torch printed it)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        done = False
        for info in zin.infolist():
            data = zin.read(info.filename)
            if "/code/" in info.filename and info.filename.endswith(".py") and old in data:
                data, done = data.replace(old, new), True
            zout.writestr(info, data)
    assert done, old
    return dst


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    work = tmp_path_factory.mktemp("script-comments")
    canaries = {name: work / f"canary-{name}" for name in SPLIT}
    built = _make(work, {name: (SPLIT[name][0], canaries[name]) for name in SPLIT})
    return {name: (_edited(built[name], work / f"split-{name}.pt", *SPLIT[name][1:3]),
                   canaries[name]) for name in SPLIT}


def test_a_comment_splitting_an_operator_spelling_hides_nothing(split) -> None:
    results = _scan(*(path for path, _ in split.values()))
    assert not any(canary.exists() for _, canary in split.values())  # the scan ran none
    for name, (path, _) in split.items():
        record = results[path.name]
        op = SPLIT[name][3]
        reach = [f for f in record["findings"] if f["code"] == "torchscript-reaches"]
        assert record["verdict"] == "dangerous", (name, record["findings"])
        assert any(op in f["message"] and ".__setstate__, line" in f["message"]
                   and "while loading" in f["message"] for f in reach), (name, reach)
    _jit_load(*(path for path, _ in split.values()))
    for name, (_, canary) in split.items():
        assert canary.exists(), name  # torch.jit.load compiled the split spelling and ran it


def test_the_benign_twin_split_by_a_comment_keeps_one_plain_line(tmp_path: Path) -> None:
    built = _make(tmp_path, {"benign": ("benign", tmp_path / "unused")})["benign"]
    path = _edited(built, tmp_path / "split-benign.pt", b"torch.softmax(",
                   b"(torch  # x\n      .softmax)(")
    record = _scan(path)[path.name]
    shown = [(f["code"], f["message"]) for f in record["findings"] if f["severity"] != "info"]
    assert record["verdict"] == "suspicious", record["findings"]
    assert shown == [("torchscript", "TorchScript runs its own code on load; no file, process "
                      "or network operation found")]
    _jit_load(path)


# the line is the operator's name's: it is found as any attribute of that name (3a7ccfb)
@pytest.mark.parametrize(("text", "line"), [
    ("t = (torch  # x\n  .from_file)(p, True, 8)\n", 2),
    ("t = (torch.ops  # x\n  .aten # y\n  .from_file)(p)\n", 3),
    ("s = '#'\n(ops # ' not a string to the lexer\n .aten.save)(w, p)\n", 3),
    ("(torch \\\n  # x\n  .save)(w, p)\n", 3),
    ('x = """unterminated\n(torch # x\n .save)(w, p)\n', 3),  # no tokens: every # blanked
])
def test_op_uses_reads_a_spelling_through_comments(text: str, line: int) -> None:
    uses = [(u.op, u.line) for u in op_uses(text) if u.reaches]
    assert len(uses) == 1 and uses[0][1] == line, uses


def test_a_comment_or_string_alone_splits_nothing_new() -> None:
    """A `#` inside a string starts no comment, and a comment joins no spelling: the only use
    is the operator's own name where it stands (the text reading counts it there, a comment's
    words too, since any attribute of that name may be the operator)."""
    assert [(u.op, u.line) for u in op_uses("s = 'torch # x'\ny = s.save\n")] == [
        ("aten::save", 2)]
    assert [(u.op, u.line) for u in op_uses("a = torch.add(x, y)  # then .save(\n")] == [
        ("aten::save", 1)]
    assert op_uses("s = 'torch # x'\ny = s.upper()\n") == []
