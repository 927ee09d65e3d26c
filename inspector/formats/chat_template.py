"""Chat templates (Jinja2 text that GGUF files and tokenizer configs carry) checked for code.

A template is rendered by its consumer: llama-cpp-python before 0.2.72 rendered it with
Jinja2's plain `Environment`, where a template reaches Python's globals through any object's
dunder attributes (CVE-2024-34359, `{{ cycler.__init__.__globals__.os.popen(...) }}`), and a
sandboxed environment only blocks what its version knows. So the template is read with
Jinja2's own parser (it parses, never renders) and its syntax tree decides: reaching a dunder
or private attribute, computing an attribute's name, or naming OS calls is dangerous; Jinja's
globals that lead to Python's (`lipsum`, `cycler`, `joiner`, `self`) and loading other
templates are suspicious. `namespace()` is what benign templates use for loop state, so it is
no finding. Text Jinja2 cannot parse is searched for the same names instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from inspector.core.vocabulary import Severity

MAX_PARSED = 1 << 20  # a longer template is only searched: no chat template comes near it

_OS_CALLS = frozenset({
    "popen", "system", "eval", "exec", "execfile", "compile", "import_module", "check_output",
    "check_call", "getoutput", "getstatusoutput", "spawnl", "spawnv", "execv", "execve",
    "fork", "load_module", "__import__", "Popen", "run_path", "unlink", "rmtree",
})
_GATEWAYS = frozenset({"lipsum", "cycler", "joiner", "self", "config", "request"})
_MODULES = frozenset({"os", "sys", "subprocess", "builtins", "importlib", "shutil"})
_DUNDER = re.compile(r"__\w+__")
_SEARCHED = (
    (re.compile(r"__(class|globals|subclasses|init|builtins|mro|bases?|import|getattribute|"
                r"dict|code|reduce(_ex)?|loader|spec)__"), Severity.DANGEROUS,
     "names the dunder attribute {0!r}, the way out of Jinja2 into Python"),
    (re.compile(r"\.(popen|system|check_output|getoutput|import_module)\s*\(|"
                r"\b(eval|exec)\s*\("), Severity.DANGEROUS, "calls {0!r}, which runs code"),
    (re.compile(r"\b(lipsum|cycler|joiner)\b"), Severity.SUSPICIOUS,
     "names the Jinja2 global {0!r}, whose functions lead to Python's globals"),
    (re.compile(r"\\x5[fF]|\\u005[fF]|\\137"), Severity.SUSPICIOUS,
     "writes an underscore as the escape {0!r}, which hides dunder names from a search"),
)


@dataclass(frozen=True)
class TemplateIssue:
    """One reason a template may run code when it is rendered."""

    severity: str
    reason: str


def check(text: str) -> list[TemplateIssue]:
    """What in a chat template may run code, worst first; [] for a plain template."""
    issues: list[TemplateIssue] = []
    tree = _parse(text) if len(text) <= MAX_PARSED else None
    if tree is None:
        issues += _searched(text)
        if len(text) > MAX_PARSED:
            issues.append(TemplateIssue(Severity.SUSPICIOUS,
                                        f"it is {len(text)} characters long, too long to be "
                                        "parsed here; it was searched instead"))
    else:
        issues += _walk(tree)
    seen: set[tuple[str, str]] = set()
    out = [i for i in issues if (i.severity, i.reason) not in seen
           and not seen.add((i.severity, i.reason))]
    return sorted(out, key=lambda i: i.severity != Severity.DANGEROUS)[:20]


def _parse(text: str):
    """Jinja2's syntax tree of the template, or None where Jinja2 is missing or refuses it."""
    try:
        import jinja2
    except ImportError:
        return None
    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
    try:
        return env.parse(text)
    except (jinja2.TemplateError, RecursionError, ValueError, MemoryError):
        return None


def _walk(tree) -> Iterator[TemplateIssue]:
    from jinja2 import nodes

    for node in tree.find_all(nodes.Node):
        if isinstance(node, nodes.Getattr):
            yield from _attribute(node.attr, "reads")
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            if isinstance(node.arg.value, str):
                yield from _attribute(node.arg.value, "indexes")
        elif isinstance(node, nodes.Filter) and node.name == "attr":
            arg = node.args[0] if node.args else None
            if isinstance(arg, nodes.Const) and isinstance(arg.value, str):
                yield from _attribute(arg.value, "reads (|attr)")
                yield TemplateIssue(Severity.SUSPICIOUS, f"reads the attribute {arg.value!r} "
                                    "through |attr, which chat templates do not need")
            else:
                yield TemplateIssue(Severity.DANGEROUS,
                                    "computes an attribute's name at render time (|attr of an "
                                    "expression), the way payloads hide `__globals__`")
        elif isinstance(node, nodes.Name) and node.ctx == "load":
            if node.name in _GATEWAYS:
                yield TemplateIssue(Severity.SUSPICIOUS,
                                    f"names the Jinja2 global {node.name!r}, whose functions "
                                    "lead to Python's globals (CVE-2024-34359's payloads start "
                                    "there); no chat template needs it")
            elif node.name in _MODULES or node.name in _OS_CALLS:
                yield TemplateIssue(Severity.SUSPICIOUS, f"names {node.name!r}, a Python module "
                                    "or function that a template has no business with")
        elif isinstance(node, nodes.Const) and isinstance(node.value, str):
            found = _DUNDER.search(node.value)
            if found:
                yield TemplateIssue(Severity.SUSPICIOUS, f"holds the string {found.group()!r}, "
                                    "a dunder name that payloads build attribute paths from")
        elif isinstance(node, (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
            yield TemplateIssue(Severity.SUSPICIOUS,
                                f"loads another template ({type(node).__name__.lower()}): a "
                                "chat template is self-contained, and the loader reads files")


def _attribute(name: str, how: str) -> Iterator[TemplateIssue]:
    if name.startswith("_"):
        yield TemplateIssue(Severity.DANGEROUS,
                            f"{how} the attribute {name!r}: private and dunder attributes "
                            "lead from Jinja2 into Python's globals (CVE-2024-34359)")
    elif name in _OS_CALLS:
        yield TemplateIssue(Severity.DANGEROUS,
                            f"{how} the attribute {name!r}, a function that runs programs or "
                            "code")


def _searched(text: str) -> Iterator[TemplateIssue]:
    for pattern, severity, reason in _SEARCHED:
        found = pattern.search(text)
        if found:
            yield TemplateIssue(severity, reason.format(found.group()) +
                                " (Jinja2 cannot parse the template, so it was searched)")
