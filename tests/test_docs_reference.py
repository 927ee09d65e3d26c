"""The exit codes and examples are defined once (`inspector.cli.reference`); the `--help`
epilogs, the command modules' `EXIT_*` constants and the reference pages under
`docs/commands/` follow it, and every link, command and exit code the README and `docs/` name
is real."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from inspector.cli import COMMANDS, main
from inspector.cli.reference import (
    EVERY_COMMAND,
    EXAMPLES,
    EXITS,
    command_parser,
    epilog,
    page_with_block,
)

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_reference_page_matches_the_registry_and_the_parser(name):
    page = REPO / "docs" / "commands" / f"{name}.md"
    assert page.exists(), f"run scripts/gen_reference.py: {page} is missing"
    text = page.read_text()
    assert page_with_block(name, text) == text, (
        f"{page.name} drifted from inspector/cli/reference.py or the parser of `{name}`; "
        "run .venv/bin/python scripts/gen_reference.py")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_help_shows_the_exit_codes_and_two_examples(name, capsys):
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert epilog(name) in out
    assert len(EXAMPLES[name]) == 2
    for e in EXITS[name]:
        assert re.search(rf"^\s+{e.code}\s+\S", out, re.M), f"`{name} --help` lacks {e.code}"
    for example in EXAMPLES[name]:
        argv = example.line.split()[1:]
        assert argv[0] == name
        words = argv[1:argv.index(">")] if ">" in argv else argv[1:]  # not a shell redirect
        args = command_parser(name).parse_args(words)
        assert args is not None


def _module_exit_constants(name: str) -> dict[str, int]:
    """The `EXIT_* = N` constants a command's module (and a helper it owns) defines."""
    package, _, module = COMMANDS[name].module.rpartition(".")
    # a command with helpers of its own is a package (cli/run/), else cli/NAME_cmd.py + NAME*.py
    pattern = ("*.py" if package != "inspector.cli"
               else f"{module.removesuffix('_cmd')}*.py")
    found = {}
    for path in (REPO / package.replace(".", "/")).glob(pattern):
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, int)):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.startswith("EXIT_"):
                        found[f"{path.name}:{target.id}"] = node.value.value
    return found


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_commands_exit_constants_are_in_the_registry(name):
    codes = {e.code for e in EXITS[name]} | {e.code for e in EVERY_COMMAND}
    for constant, value in _module_exit_constants(name).items():
        assert value in codes, f"{constant} = {value} is not an exit code of `{name}`"


def test_no_module_keeps_its_own_exit_code_list():
    for path in ((REPO / c.module.replace(".", "/")).with_suffix(".py") for c in COMMANDS.values()):
        text = path.read_text()
        assert "parser.epilog" not in text, f"{path.name} sets its own epilog"
        assert not re.search(r"^Exit codes:\n", text, re.M), f"{path.name} lists exit codes"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve(doc):
    text = doc.read_text()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


_NAMED = re.compile(r"ckpt-inspector ([a-z][a-z-]+)\b")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_named_exists(doc):
    for word in _NAMED.findall(doc.read_text()):
        if word in ("inspcet",):  # the mistyped command the reference quotes on purpose
            continue
        assert word in COMMANDS, f"{doc.name} names `ckpt-inspector {word}`, no such command"


_EXIT_CLAIM = re.compile(r"\bexit(?: status| code)? (\d+)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_exit_code_named_matches_the_code(doc):
    """Where a page or its paragraph speaks of one command, an `exit N` it names is one of
    that command's codes; elsewhere it is one of some command's."""
    text = doc.read_text()
    own = doc.stem if doc.parent.name == "commands" and doc.stem in COMMANDS else None
    every = {e.code for e in EVERY_COMMAND}
    for paragraph in text.split("\n\n"):
        named = set(_NAMED.findall(paragraph)) & set(COMMANDS)
        scope = {own} if own else named
        for claim in _EXIT_CLAIM.findall(paragraph):
            code = int(claim)
            allowed = every | ({e.code for n in scope for e in EXITS[n]} if scope
                               else {e.code for codes in EXITS.values() for e in codes})
            assert code in allowed, f"{doc.name}: exit {code} is no exit code of {scope or 'any'}"


def test_readme_is_a_quick_start():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert text.rstrip().split("\n## ")[-1].startswith("More\n")
    assert "docs/screenshots/" in text
    for name in COMMANDS:
        assert f"(docs/commands/{name}.md)" in text, f"README does not link `{name}`'s page"
    recipes = re.search(r"^## Five recipes\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert recipes, "README lost its '## Five recipes' section"
    lines = re.findall(r"^    (ckpt-inspector .+)$", recipes.group(1), re.M)
    assert len(lines) == 5
    for line in lines:
        assert _NAMED.match(line)[1] in COMMANDS
