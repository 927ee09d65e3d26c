"""TorchScript code read as code: the operators in an archive's `code/` that reach files or the
network, found in the text (nothing is compiled or run).

`torch.jit.load` compiles every `code/**.py` of a TorchScript archive and runs a class's
scripted `__setstate__` while it loads; the rest runs when the model is called. Tensor maths
stays in memory, but a few of torch's operators reach outside the process: `REACHING_OPS` and
`REACHING_NAMESPACES` name them, and `tests/test_scan_script_code.py` derives the same set from
torch's own operator registry (an argument that names a file, a process group or an RPC), so a
torch that adds one fails the test. An archive whose code calls one is dangerous, naming the
operator and where; one without is suspicious with one plain line, and the classes its
`data.pkl` names (`__torch__.…`, which torch resolves against that code, never by import)
are judged as that code, not listed as imports.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inspector.core.vocabulary import Severity
from inspector.formats.archives import zipread

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

LOADER = "torch.jit.load"
MAX_CODE_BYTES = 16 << 20  # a larger code file is reported unread
FILES, NETWORK = "files", "the network"
REACHING_OPS: dict[str, str] = {
    "aten::from_file": FILES,  # maps a file; shared=True creates it
    "aten::save": FILES,
    "debugprims::load_tensor": FILES,
    "prim::rpc_async": NETWORK, "prim::rpc_sync": NETWORK, "prim::rpc_remote": NETWORK,
    "_dtensor::shard_dim_alltoall": NETWORK,
}
"""Single operators that reach outside the process (their schema's qualified name)."""
REACHING_NAMESPACES: dict[str, str] = {
    "c10d": NETWORK, "_c10d_functional": NETWORK, "_c10d_functional_autograd": NETWORK,
    "c10d_functional": NETWORK, "symm_mem": NETWORK,
}
"""Operator namespaces (and `torch.classes` namespaces) whose every member reaches a process
group: collectives, point-to-point sends, rendezvous."""
REACHING_CLASS_NAMESPACES: dict[str, str] = {"c10d": NETWORK, "dist_rpc": NETWORK}
"""`torch.classes` namespaces of custom classes that hold a process group or an RPC agent."""
TORCH_NAMESPACES = frozenset({"aten", "prim", "prims", "quantized", "_quantized",
                              "higher_order"})
"""Operator namespaces of torch itself; any other one runs the native library that
registered it."""
_SEP = r"[\s\\]*\.[\s\\]*"  # TorchScript's lexer, like Python's, allows space around a dot
# (comments, which it skips as well, are blanked out of the text first: `_readings`)


# What the compiler can reach an operator through: its module (`torch`, `ops.aten`,
# `torch.autograd`, which torch's BuiltinModule maps back to aten, `ops.<any>.autograd`), a
# local name bound to any of them (`t = torch`, `s = torch.save`, even `self = torch`), or
# `getattr(module, "name")`. Whatever the binding, the operator's own name is an attribute of
# something (`.save`, `getattr(_, "save")` read as `_.save`), so a reaching operator is known
# by its name as any attribute, and a reaching namespace by its name as any attribute; a
# `prim` operator is also a builtin bare name (`rpc_async(...)`).
_LEAVES = {op.split("::")[1]: (op, what) for op, what in REACHING_OPS.items()}
_PRIM_LEAVES = frozenset(op.split("::")[1] for op in REACHING_OPS if op.startswith("prim::"))
_REACHING_SPACES = REACHING_NAMESPACES | REACHING_CLASS_NAMESPACES
_ATTRIBUTE = re.compile(rf"{_SEP}({'|'.join(sorted(_LEAVES))})\b")
_BARE = re.compile(rf"(?<![\w.])({'|'.join(sorted(_PRIM_LEAVES))})(?=[\s\\]*\()")
_SPACE = re.compile(rf"{_SEP}({'|'.join(sorted(_REACHING_SPACES))})\b")
_NAMESPACE = re.compile(rf"\bops{_SEP}(\w+){_SEP}(\w+)")
_CLASS = re.compile(rf"\bclasses{_SEP}(\w+){_SEP}(\w+)")
# a name every spelling of a reaching operator holds whole, or `getattr`, whose string may
# spell it in pieces (`"sa" "ve"`): without one, the parsed code holds no such spelling either
_NEEDED = re.compile(r"\b(?:{})\b".format("|".join(sorted(
    set(_LEAVES) | set(_REACHING_SPACES) | {"getattr"}))))


@dataclass(frozen=True)
class OpUse:
    """One operator reference in a code file: the operator, what it reaches, its line."""

    op: str
    reaches: str | None  # None: an operator outside torch's namespaces that reaches nothing known
    line: int


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with each span's characters but line breaks turned to spaces: every offset and
    line stays where it was."""
    out = list(text)
    for start, end in spans:
        for i in range(start, end):
            if out[i] not in "\r\n":
                out[i] = " "
    return "".join(out)


def _comments_by_tokenizer(text: str) -> list[tuple[int, int]] | None:
    """The comments' spans as Python's tokenizer finds them (strings and all, which a `#`
    inside does not start a comment); None where it cannot tokenize the text."""
    lines = io.StringIO(text, newline="").readlines()  # as tokenize numbers them
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    spans = []
    try:
        for tok in tokenize.generate_tokens(iter(lines).__next__):
            if tok.type == tokenize.COMMENT:
                (row, col), (end_row, end_col) = tok.start, tok.end
                spans.append((starts[row - 1] + col, starts[end_row - 1] + end_col))
    except (tokenize.TokenError, SyntaxError, StopIteration):
        return None
    return spans


def _readings(text: str) -> list[str]:
    """The code file's text as read for operator spellings: as it is, and with its comments
    blanked. TorchScript's lexer skips a comment as it skips space, so `(torch  # x` on one
    line and `.from_file)(...)` on the next call torch.from_file; blanked, the spelling reads
    whole. The comments are Python's tokenizer's (TorchScript's code is Python's syntax); where
    it cannot tokenize the text, every `#` to its line's end is blanked instead. The text as
    it is stays a reading: nothing matched before is lost."""
    spans = _comments_by_tokenizer(text)
    if spans is None:
        spans = [m.span() for m in re.finditer(r"#[^\r\n]*", text)]
    return [text, _blank(text, spans)] if spans else [text]


def _spellings(text: str) -> list[tuple[str, int]]:
    """Each attribute chain (`torch.save`; rooted at `_` where its root is no name:
    `getattr(...).save`), each `getattr(x, "name")` as `_.name` (its string as the parser
    joins its pieces), and each bare name of a `prim` operator (`rpc_async(`), as Python's
    parser reads the code, with its line: a spelling with parentheses, spaces, comments or
    line breaks inside (`(torch).save`, `(ops.aten)\n.save`) reads as what TorchScript's
    compiler resolves it to. Empty where the text does not parse (its text readings still
    hold), and where the text holds no name such a spelling needs (the parser reads names
    NFKC-normalised: `_NEEDED`)."""
    if not _NEEDED.search(text if text.isascii() else unicodedata.normalize("NFKC", text)):
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _PRIM_LEAVES:
            out.append((f"{node.id}(", node.lineno))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "getattr" and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            out.append((f"_.{node.args[1].value}", node.lineno))  # the parser joined its pieces
        elif isinstance(node, ast.Attribute):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            root = inner.id if isinstance(inner, ast.Name) else "_"  # `getattr(...).save`
            # the line of its last name, where the text readings find `.save`
            out.append((".".join([root, *reversed(chain)]), node.end_lineno or node.lineno))
    return out


def _matches(read: str, line: Callable[[int], int]) -> list[OpUse]:
    """The operator spellings in one reading of the code (`line`: a match's line from its
    offset)."""
    found = [OpUse(*_LEAVES[m.group(1)], line(m.start(1)))
             for pattern in (_ATTRIBUTE, _BARE) for m in pattern.finditer(read)]
    named: set[int] = set()  # where a namespace is named with its operator or class
    for m in _NAMESPACE.finditer(read):
        namespace = m.group(1)
        named.add(m.start(1))
        if namespace in REACHING_NAMESPACES:
            found.append(OpUse(f"{namespace}::{m.group(2)}", REACHING_NAMESPACES[namespace],
                               line(m.start())))
        elif namespace not in TORCH_NAMESPACES:
            found.append(OpUse(f"{namespace}::{m.group(2)}", None, line(m.start())))
    for m in _CLASS.finditer(read):
        named.add(m.start(1))
        if m.group(1) in REACHING_CLASS_NAMESPACES:
            found.append(OpUse(f"torch.classes.{m.group(1)}.{m.group(2)}",
                               REACHING_CLASS_NAMESPACES[m.group(1)], line(m.start())))
    found += [OpUse(f"{m.group(1)}::*", _REACHING_SPACES[m.group(1)], line(m.start(1)))
              for m in _SPACE.finditer(read) if m.start(1) not in named]  # through a binding
    return found


def op_uses(text: str) -> list[OpUse]:
    """The operators a code file's text refers to that reach files or the network, and those
    outside torch's own namespaces, in text order; read in the text (a spelling split by a
    comment counts) and in the parsed code (a parenthesised one counts: `_spellings`)."""
    found: list[OpUse] = []
    for read in _readings(text):
        found += _matches(read, lambda pos, read=read: _line(read, pos))
    spellings = _spellings(text)  # matched as one text, a spelling a line
    joined, lines = "\n".join(s for s, _ in spellings), [n for _, n in spellings]
    found += _matches(joined, lambda pos: lines[joined.count("\n", 0, pos)])
    return sorted(set(found), key=lambda u: (u.line, u.op))


@dataclass(frozen=True)
class _Function:
    """Where a function's text lies, its name, and whether `torch.jit.load` runs it (a class's
    `__setstate__`, or a method of the class that one calls, through `self.method(...)`)."""

    first: int
    last: int
    name: str
    at_load: bool


def _functions(text: str) -> list[_Function]:
    """The functions of a code file, where its text parses as Python (TorchScript's serialized
    code does); empty where it does not."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in tree.body:
        inner = node.body if isinstance(node, ast.ClassDef) else [node]
        prefix = f"{node.name}." if isinstance(node, ast.ClassDef) else ""
        methods = {f.name: f for f in inner if isinstance(f, ast.FunctionDef)}
        loading = _called_from(methods, "__setstate__")
        out += [_Function(f.lineno, f.end_lineno or f.lineno, prefix + name, name in loading)
                for name, f in methods.items()]
    return out


def _called_from(methods: dict[str, ast.FunctionDef], start: str) -> set[str]:
    """`start` and every method it reaches through `self.method(...)` calls."""
    seen: set[str] = set()
    todo = [start] if start in methods else []
    while todo:
        name = todo.pop()
        seen.add(name)
        for call in (n for n in ast.walk(methods[name]) if isinstance(n, ast.Call)):
            func = call.func
            if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and func.value.id == "self" and func.attr in methods
                    and func.attr not in seen):
                todo.append(func.attr)
    return seen


def _where(functions: list[_Function], line: int) -> tuple[str, bool]:
    """Where a line lies (`Class.method, line N`) and whether it runs while loading."""
    inside = [f for f in functions if f.first <= line <= f.last]
    if not inside:
        return f"line {line}", False
    return f"{inside[-1].name}, line {line}", inside[-1].at_load


def classes_defined(text: str) -> set[str]:
    """The class names a code file defines (at its top level)."""
    return set(re.findall(r"^class\s+(\w+)", text, re.MULTILINE))


def code_members(members: list[zipread.Member]) -> list[zipread.Member]:
    """The code files `torch.jit.load` compiles: `<folder>/code/**.py`, as its reader finds
    them (`code/__torch__/m.py` opens `CODE/__TORCH__/M.PY`: `zipread.torch_name`)."""
    return [m for m in members if _code_path(m.name) is not None]


def _code_path(name: str) -> str | None:
    """The path under `code/` a member is to torch's reader, without `.py` (`__torch__/m`),
    or None where it is no code file."""
    folded = zipread.torch_name(name)
    if "/code/" not in folded or not folded.endswith(".py"):
        return None
    return folded.split("/code/", 1)[1][:-3]


def report(ctx: FormatContext, buf, members: list[zipread.Member]) -> None:
    """Judge a TorchScript archive's code: a finding per operator that reaches files or the
    network (dangerous), else one plain suspicious line; its own classes leave the imports."""
    dangerous: list[tuple[OpUse, str, tuple[str, bool]]] = []
    foreign: set[str] = set()
    unread: list[str] = []
    own: set[str] = set()
    for m in code_members(members):
        try:
            text = zipread.member_bytes(buf, m, MAX_CODE_BYTES).decode("utf-8", "replace")
        except ValueError as exc:
            unread.append(f"{m.name} ({str(exc)[:80]})")
            continue
        module = _code_path(m.name).replace("/", ".")
        own |= {f"{module}.{name}" for name in classes_defined(text)}
        functions = _functions(text)
        for use in op_uses(text):
            if use.reaches is None:
                foreign.add(use.op)
            else:
                dangerous.append((use, m.name, _where(functions, use.line)))
    for use, member, (where, at_load) in dangerous[:8]:
        when = (f"{LOADER} runs it while loading (from a class's __setstate__)" if at_load
                else "it runs when the model or that method is called")
        ctx.find(Severity.DANGEROUS, "torchscript-reaches",
                 f"TorchScript code calls {use.op}, which reaches {use.reaches}, in {where}: "
                 f"{when}", member)
    for name in unread:
        ctx.not_fully_read("torchscript-code-unread", f"code file {name} was not read")
    if not dangerous:
        extra = (f"; it calls operators outside torch ({', '.join(sorted(foreign)[:4])}), "
                 "which run whatever native library registered them") if foreign else ""
        ctx.find(Severity.SUSPICIOUS, "torchscript",
                 "TorchScript runs its own code on load; no file, process or network "
                 f"operation found{extra}")
    _judge_own_classes(ctx, own)


_SCRIPT_PICKLE_HELPERS = "torch.jit._pickle"  # build_intlist...: TorchScript's unpickler, in C++


def _judge_own_classes(ctx: FormatContext, own: set[str]) -> None:
    """The archive's own classes and TorchScript's list builders are what torch.jit.save
    writes into data.pkl; torch resolves them against the code above, never by import."""
    for use in ctx.uses.values():  # torch finds a class's code file by its folded module
        name = f"{zipread.torch_name(use.module)}.{use.name}"
        if use.module == _SCRIPT_PICKLE_HELPERS:
            use.severity = Severity.SAFE
            use.reason = ("TorchScript's own unpickler builds this list in C++ (the archive "
                          "is judged by its code: finding torchscript)")
        elif name in own:
            use.severity = Severity.SAFE
            use.reason = (f"a class of this archive's own TorchScript code: {LOADER} compiles "
                          "it from code/ (judged there)")
