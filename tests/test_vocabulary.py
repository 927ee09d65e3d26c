"""The closed vocabularies (`core.vocabulary`) match the public contract and are used as members.

- Each enum's values are the ones the report schema and docs/json.md (JSON contracts) list.
- A real scan, verify and diff result serialises to the same bytes with members as with words.
- No module compares a vocabulary field with a bare word (`status == "ok"`), passes one as a
  keyword (`status="not_run"`), assigns one to it or stores one under its key in a dict
  display: the words live in `core/vocabulary.py` alone.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
from enum import StrEnum
from pathlib import Path

import pytest

from inspector.core import strict_json, vocabulary
from inspector.core.verdict import EXIT_CODES, ORDER, exit_code, worst
from inspector.core.vocabulary import (
    CheckStatus,
    FileStatus,
    HealthSeverity,
    HealthStatus,
    JailLevel,
    JailRequirement,
    LoadStatus,
    ReportStatus,
    ResumeStatus,
    Severity,
    StepStatus,
    TensorCheckStatus,
    TensorStatus,
    Verdict,
)
from inspector.integrity.manifest import FileEntry, read_manifest, write_manifest
from inspector.integrity.verify import verify
from inspector.sandbox.worker.diff import diff_checkpoints
from inspector.scan.engine import scan_file
from inspector.tensors.sources import open_checkpoint
from tests import factories

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "inspector"
SCHEMA = json.loads((PACKAGE / "report" / "schema.json").read_text())
ENUMS = [e for e in vars(vocabulary).values()
         if isinstance(e, type) and issubclass(e, StrEnum) and e is not StrEnum]


def _schema_enum(pointer: str) -> list[str]:
    node = SCHEMA
    for part in pointer.split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node["enum"]


@pytest.mark.parametrize(("enum", "pointer"), [
    (ReportStatus, "properties/status"),
    (CheckStatus, "$defs/check_status"),
    (StepStatus, "$defs/file_report/properties/scan/properties/status"),
    (LoadStatus, "$defs/file_report/properties/load/properties/status"),
    (HealthStatus, "$defs/file_report/properties/health/oneOf/1/properties/status"),
    (HealthSeverity,
     "$defs/file_report/properties/health/oneOf/1/properties/findings/items/properties/severity"),
])
def test_enum_is_exactly_what_the_report_schema_allows(enum, pointer):
    assert {m.value for m in enum} == set(_schema_enum(pointer))


def test_report_verdicts_are_the_ranked_verdicts_in_order():
    assert [v.value for v in ORDER] == _schema_enum("$defs/verdict")
    assert {v: i for i, v in enumerate(ORDER)} == EXIT_CODES
    assert worst(["info", "skipped", *reversed(ORDER)]) is Verdict.ERROR
    assert exit_code(Verdict.SKIPPED) == 0


@pytest.mark.parametrize("pointer", [
    "$defs/file_report/properties/verification/oneOf/1/properties/status",
    "$defs/file_report/properties/comparison/oneOf/1/properties/status",
    "$defs/file_report/properties/conversion/oneOf/1/properties/status",
    "$defs/file_report/properties/consistency/oneOf/1/properties/status",
])
def test_report_section_statuses_are_check_statuses(pointer):
    assert set(_schema_enum(pointer)) <= {m.value for m in CheckStatus}


def _contracts() -> str:
    """docs/json.md, the JSON contracts, on one line (its bullets wrap anywhere)."""
    return " ".join((REPO / "docs" / "json.md").read_text().split())


def _documented(anchor: str) -> set[str]:
    """The words docs/json.md lists in the parentheses after `anchor`: `a|b|c`, plus any
    `, or d` clause; an ellipsis (`…`, "as above") is left out."""
    match = re.search(re.escape(anchor) + r" \(([^)]*)\)", _contracts())
    assert match, f"docs/json.md no longer documents {anchor!r}"
    first, *rest = match.group(1).split(",")
    words = {w.strip() for w in first.split("|")} - {"…"}
    words |= {m.group(1) for part in rest if (m := re.match(r"\s*or (\S+)", part))}
    return words


@pytest.mark.parametrize(("enum", "anchor"), [
    (Verdict, "verdict"),
    (HealthStatus, "health {status"),
    (FileStatus, "files [{path, status"),
    (ResumeStatus, "items [{code, label, status"),
    (ReportStatus, "`status"),
], ids=["Verdict", "HealthStatus", "FileStatus", "ResumeStatus", "ReportStatus"])
def test_enum_is_exactly_what_the_json_contracts_document(enum, anchor):
    assert {m.value for m in enum} == _documented(anchor)


def test_jail_levels_are_the_ones_the_command_reference_names():
    """Its sentence lists `full` (...), `partial` (...), or `process-only` (...)."""
    readme = " ".join((REPO / "docs" / "commands" / "README.md").read_text().split())
    sentence = readme[readme.index("it reads a byte of the input:"):]
    sentence = sentence[:sentence.index("). ") + 1]
    assert [m.value for m in reversed(JailLevel)] == re.findall(r"(?:: |, |or )`([a-z-]+)`",
                                                                 sentence)


def test_jail_requirements_are_defined_once_for_the_cli_the_client_and_the_app():
    from inspector.cli.common import add_require_jail_argument
    from inspector.gui.pipeline import JAIL_CHOICES, JAIL_MENU_TEXT
    from inspector.sandbox.host import client

    words = [r.value for r in JailRequirement]
    parser = argparse.ArgumentParser()
    add_require_jail_argument(parser)
    option = next(a for a in parser._actions if a.dest == "require_jail")
    # plain strings: argparse prints choices with repr(), a member would show as <...>
    assert option.choices == words and all(type(c) is str for c in option.choices)
    assert option.default == client.DEFAULT_REQUIRED_JAIL == vocabulary.DEFAULT_REQUIRED_JAIL
    assert list(JAIL_MENU_TEXT) == list(JailRequirement)
    assert [value for value, _ in JAIL_CHOICES] == words
    for word in words:
        client.set_required_jail(word)
    with pytest.raises(ValueError, match="full, partial, any"):
        client.set_required_jail("none")
    client.set_required_jail(client.DEFAULT_REQUIRED_JAIL)
    assert client.jail_accepted(JailLevel.PROCESS_ONLY, JailRequirement.ANY)
    assert not client.jail_accepted(JailLevel.PROCESS_ONLY, JailRequirement.PARTIAL)


def test_verify_tensor_statuses_are_documented():
    """docs/json.md lists them as the files' statuses ("…") plus `dtype_or_shape_changed`."""
    listed = _documented("tensors [{key, file, status")
    assert listed <= {m.value for m in TensorCheckStatus}
    assert {m.value for m in TensorCheckStatus} - listed <= {m.value for m in FileStatus}


@pytest.mark.parametrize(("enum", "anchors"), [
    (Severity, ("name, count, severity", "findings [{severity")),
    (TensorStatus, ("tensors [{key, status",)),
], ids=["Severity", "TensorStatus"])
def test_severity_and_diff_status_are_documented(enum, anchors):
    """Scan severities (globals and findings together) and diff statuses: docs/json.md's."""
    assert {m.value for m in enum} == set().union(*map(_documented, anchors))


def _plain(value):
    """`value` with every vocabulary member replaced by a plain `str` of its value."""
    if isinstance(value, StrEnum):
        return str.__str__(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _members(value) -> set[StrEnum]:
    if isinstance(value, StrEnum):
        return {value}
    if isinstance(value, dict):
        return set().union(*map(_members, value.keys()), *map(_members, value.values()))
    if isinstance(value, list | tuple):
        return set().union(*map(_members, value))
    return set()


def _same_bytes(record) -> set[StrEnum]:
    """Assert members and plain words serialise alike; return the members found."""
    plain = _plain(record)
    assert not _members(plain)
    assert strict_json.dumps(record) == strict_json.dumps(plain)
    assert json.dumps(record, allow_nan=False) == json.dumps(plain, allow_nan=False)
    return _members(record)


def test_a_dangerous_scan_serialises_as_words(tmp_path, canary):
    record = scan_file(factories.mal_os_system(tmp_path / "evil.pt", canary)).to_json()
    members = _same_bytes(record)
    assert record["verdict"] == "dangerous"
    assert Verdict.DANGEROUS in members


def test_a_verify_with_a_mismatch_serialises_as_words(tmp_path):
    good, bad = tmp_path / "a.bin", tmp_path / "b.bin"
    good.write_bytes(b"weights")
    bad.write_bytes(b"changed")
    write_manifest(tmp_path / "SHA256SUMS.tsv", [
        FileEntry(path=p.name, sha256=hashlib.sha256(b"weights").hexdigest(), size=7)
        for p in (good, bad)])
    record = verify(read_manifest(tmp_path / "SHA256SUMS.tsv")).to_json()
    members = _same_bytes(record)
    assert sorted(f["status"] for f in record["files"]) == ["mismatch", "ok"]
    assert {FileStatus.OK, FileStatus.MISMATCH} <= members


def test_a_diff_serialises_as_words(tmp_path):
    state = factories.small_state_dict()
    a = factories.save_state_dict(tmp_path / "a.pt", state)
    changed = {k: v.clone() for k, v in state.items()}
    first = next(k for k, v in changed.items() if v.is_floating_point())
    changed[first].view(-1)[0] += 1
    b = factories.save_state_dict(tmp_path / "b.pt", changed)
    record = diff_checkpoints(open_checkpoint(str(a)), open_checkpoint(str(b)))
    members = _same_bytes(record)
    statuses = {t["key"]: t["status"] for t in record["tensors"]}
    assert statuses[first] == "changed"
    assert set(statuses.values()) == {"changed", "identical"}
    assert TensorStatus.CHANGED in members


# --- the words stay in core/vocabulary.py ---------------------------------------------------

FIELDS = {
    "verdict": {*Verdict},
    "severity": {*Severity, *HealthSeverity},
    "status": {*FileStatus, *TensorCheckStatus, *TensorStatus, *HealthStatus, *ResumeStatus,
               *ReportStatus, *CheckStatus, *StepStatus, *LoadStatus},
    "state": {*vocabulary.DocumentState},
    "level": {*JailLevel},
}
"""A name ending in one of these holds that vocabulary (`verdict`, `doc.state`, `f["status"]`,
`rec.get("severity")`, `final_state`)."""

ALLOWED: dict[str, str] = {}
"""`path:line` -> why a bare word is right there; empty: no exception is needed yet."""


def _field(node: ast.AST) -> str | None:
    """The vocabulary a compared expression names, if any."""
    name = None
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        name = node.slice.value
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant)):
        name = node.args[0].value
    if not isinstance(name, str):
        return None
    return next((f for f in FIELDS if name == f or name.endswith("_" + f)), None)


def _words(node: ast.AST) -> list[str]:
    """The string literals an operand is made of (a word, a tuple/list/set of them, either
    branch of `a if c else b`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [w for e in node.elts for w in _words(e)]
    if isinstance(node, ast.IfExp):
        return _words(node.body) + _words(node.orelse)
    return []


def bare_words(source: str) -> list[tuple[int, str]]:
    """(line, what) for each vocabulary word compared with, passed as, assigned to or stored
    under a vocabulary field."""
    found = []
    for node in ast.walk(ast.parse(source)):
        pairs: list[tuple[str | None, ast.AST]] = []
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            pairs = [(_field(s), o) for s in sides for o in sides if o is not s]
        elif isinstance(node, ast.keyword) and node.arg:
            pairs = [(_field(ast.Name(node.arg)), node.value)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "set_state" and node.args):
            pairs = [("state", node.args[0])]
        elif isinstance(node, ast.Assign):
            pairs = [(_field(t), node.value) for t in node.targets]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs = [(_field(node.target), node.value)]
        elif isinstance(node, ast.Dict):
            pairs = [(_field(ast.Name(k.value)), v)
                     for k, v in zip(node.keys, node.values, strict=True)
                     if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        for field, operand in pairs:
            found += [(operand.lineno, f"{field} {w!r}") for w in _words(operand)
                      if field and w in FIELDS[field]]
    return sorted(found)


def test_the_rule_sees_each_form_of_a_bare_word():
    source = "\n".join([
        'a = res.verdict == "dangerous"',
        'b = f["status"] in ("ok", "extra")',
        'c = rec.get("severity") != "info"',
        'd = "loaded" == final_state',
        'e = Section(status="failed" if x else "done")',
        'doc.set_state("needs_decision")',
        'f = rec["status"] == Verdict.SAFE',
        'g = kind == "safe"',
        'res.verdict = "error"',
        'record = {"status": "ok", "kind": "safe"}',
        'severity: str = "info"',
    ])
    assert [line for line, _ in bare_words(source)] == [1, 2, 2, 3, 4, 5, 5, 6, 9, 10, 11]


def test_no_module_compares_a_vocabulary_field_with_a_bare_word():
    found = [f"{path.relative_to(REPO)}:{line}: {what}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "vocabulary.py"
             for line, what in bare_words(path.read_text())]
    assert [f for f in found if f.split(": ")[0] not in ALLOWED] == []


def test_every_vocabulary_is_a_str_enum_with_unique_values():
    for enum in ENUMS:
        values = [m.value for m in enum]
        assert len(set(values)) == len(values), enum
        assert all(m == m.value and json.dumps(m) == json.dumps(m.value) for m in enum)


def test_every_document_state_has_words():
    from inspector.gui.document import STATE_WORDS

    assert set(STATE_WORDS) == set(vocabulary.DocumentState)
