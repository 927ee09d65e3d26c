"""Hugging Face remote code: the `.py` files a folder's JSON makes `from_pretrained` import.

`from_pretrained(..., trust_remote_code=True)` reads `auto_map` in `config.json`,
`tokenizer_config.json` and the other processor configs (`{"AutoConfig": "module.Class"}`, a
tokenizer's `[slow, fast]` pair; `repo--module.Class` names another repository), and
`custom_pipelines` (`{"task": {"impl": "module.Class"}}`): it imports `module.py` from the folder,
with every module that file imports relatively, and builds the class. So a JSON that names code
gets a `remote-code` finding naming the code and the loader, and every `.py` is reported as code
(`python-code`, never skipped): its imports and calls listed, read with `ast`, never imported.
What runs at import or construction that reaches a deny-list capability makes it dangerous
(`formats.archives.torch_package.judge_source`, the rule every Python source an artifact ships
is judged by).
"""

from __future__ import annotations

import ast
import functools
import json
import os
from dataclasses import dataclass

from inspector.core.verdict import worst
from inspector.core.vocabulary import Severity, Verdict
from inspector.formats.archives import python_source
from inspector.formats.archives.source_judge import judge_source
from inspector.scan.context import not_a_checkpoint
from inspector.scan.result import Finding, ScanResult

LOADER = "from_pretrained(trust_remote_code=True)"
ST_LOADER = "SentenceTransformer(trust_remote_code=True)"
MAX_SOURCE_BYTES = 4 << 20  # a larger source is reported unread
MAX_JSON_BYTES = 64 << 20  # as `other_files` reads text
MAX_SIBLINGS = 256  # JSON files of one folder read for the auto_map naming a .py
_SHOWN = 12  # imports or calls named in one finding
@dataclass(frozen=True)
class Reference:
    """One class a JSON names for the loader: where (`auto_map.AutoConfig`), the module file
    it imports and the class, and the repository when the code lies in another one."""

    key: str
    module: str
    name: str
    repo: str | None
    loader: str = LOADER


@dataclass(frozen=True)
class PythonCode:
    """What reading a `.py` with `ast` found: its imports, calls, the modules it imports from
    its own folder, and the deny-list reasons of what it calls at import or construction."""

    imports: list[str]
    calls: list[str]
    relative: list[str]
    at_load: list[str]
    error: str | None = None

    @property
    def severity(self) -> str:
        """Dangerous where what runs at load reaches a deny-list capability."""
        return Severity.DANGEROUS if self.at_load else Severity.SUSPICIOUS

    def summary(self) -> str:
        """Its imports and calls (and what is dangerous in them) as one clause."""
        if self.error:
            return f"its source could not be read ({self.error})"
        parts = [f"imports {_list(self.imports)}" if self.imports else "imports nothing",
                 f"calls {_list(self.calls)}" if self.calls else "calls nothing"]
        if self.at_load:
            parts.append("at import or construction it calls " + "; ".join(self.at_load[:3]))
        return "; ".join(parts)


def _list(names: list[str]) -> str:
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def _references(data: object) -> list[Reference]:
    """The classes a parsed JSON names for the loader (`auto_map`, `custom_pipelines`, and a
    sentence-transformers `modules.json`'s `type` of each module)."""
    if isinstance(data, list):
        return _module_types(data)
    if not isinstance(data, dict):
        return []
    named: list[tuple[str, object]] = []
    auto_map = data.get("auto_map")
    if isinstance(auto_map, dict):
        for key, value in auto_map.items():
            values = value if isinstance(value, list) else [value]
            named += [(f"auto_map.{key}", v) for v in values]
    pipelines = data.get("custom_pipelines")
    if isinstance(pipelines, dict):
        named += [(f"custom_pipelines.{task}.impl", spec.get("impl"))
                  for task, spec in pipelines.items() if isinstance(spec, dict)]
    out = []
    for key, value in named:
        if not isinstance(value, str) or "." not in value:
            continue
        repo, _, reference = value.rpartition("--")
        module, _, name = reference.rpartition(".")
        out.append(Reference(key, module, name, repo or None))
    return out


def _module_types(modules: list) -> list[Reference]:
    """The classes a sentence-transformers `modules.json` names: SentenceTransformer(...,
    trust_remote_code=True) imports each `type` outside its own package as remote code
    (`get_class_from_dynamic_module`, as transformers' auto_map) and builds it."""
    out = []
    for i, entry in enumerate(modules):
        named = entry.get("type") if isinstance(entry, dict) else None
        if not isinstance(named, str) or "." not in named or named.startswith(
                "sentence_transformers."):
            continue
        repo, _, reference = named.rpartition("--")
        module, _, name = reference.rpartition(".")
        out.append(Reference(f"modules[{i}].type", module, name, repo or None, ST_LOADER))
    return out


_TOO_LARGE = object()
# keys a loader reads code names from; an escaped key (`\u0061uto_map`) reads the same to it
_MARKERS = (b"auto_map", b"custom_pipelines", b"\\u")
_MODULES = "modules.json"  # sentence-transformers' list of module classes


def _read_json(path: str) -> object:
    """The parsed JSON (None where it is none), `_TOO_LARGE` past MAX_JSON_BYTES; one that
    cannot name code (no marker in its bytes) is not parsed: a tokenizer.json runs to tens of
    megabytes."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            return _TOO_LARGE
        named = os.path.basename(path) == _MODULES or any(m in raw for m in _MARKERS)
        return json.loads(raw) if named else None
    except (OSError, ValueError, RecursionError):
        return None


@functools.lru_cache(maxsize=256)
def read_python(path: str, mtime_ns: int = 0) -> PythonCode:
    """A `.py` read with `ast` (never imported); `mtime_ns` keys the cache."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_SOURCE_BYTES + 1)
        if len(raw) > MAX_SOURCE_BYTES:
            return PythonCode([], [], [], [], f"larger than {MAX_SOURCE_BYTES >> 20} MiB")
        tree = python_source.parse(raw)  # decoded as the import system decodes it
        imports, at_load = judge_source(tree, every_method=True)
    except (OSError, ValueError) as exc:
        return PythonCode([], [], [], [], str(exc)[:120])
    calls = sorted({ast.unparse(n.func)[:80] for n in ast.walk(tree) if isinstance(n, ast.Call)})
    relative = sorted({n.module.split(".")[0] for n in ast.walk(tree)
                       if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module})
    return PythonCode(imports, calls, relative, at_load)


def _python(folder: str, module: str) -> tuple[str, PythonCode] | None:
    """The module's file in `folder` and what it holds, or None where there is none."""
    path = os.path.join(folder, f"{module}.py")
    try:
        st = os.stat(path)
    except OSError:
        return None
    return path, read_python(path, st.st_mtime_ns)


def _runs(folder: str, module: str) -> list[tuple[str, PythonCode]]:
    """The module's file and every file of the folder it imports relatively, as the loader
    copies and imports them."""
    seen: dict[str, tuple[str, PythonCode]] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        found = None if name in seen else _python(folder, name)
        if found is not None:
            seen[name] = found
            todo += found[1].relative
    return list(seen.values())


def _naming(folder: str) -> dict[str, list[tuple[str, Reference]]]:
    """module -> (JSON file name, reference) for every auto_map in the folder's JSON files."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))[:MAX_SIBLINGS]
        stamps = tuple((n, os.stat(os.path.join(folder, n)).st_mtime_ns) for n in names)
    except OSError:
        return {}
    return _naming_of(folder, stamps)


@functools.lru_cache(maxsize=64)
def _naming_of(folder: str, stamps: tuple[tuple[str, int], ...]
               ) -> dict[str, list[tuple[str, Reference]]]:
    """`_naming` for the JSON files `stamps` lists (name, mtime: the cache's key)."""
    out: dict[str, list[tuple[str, Reference]]] = {}
    for name, _ in stamps:
        for ref in _references(_read_json(os.path.join(folder, name))):
            if ref.repo is None:
                out.setdefault(ref.module, []).append((name, ref))
    return out


def judge(res: ScanResult) -> None:
    """Add what a file means as remote code: a JSON naming code, a `.py` as code."""
    path = res.path
    if path.endswith(".json"):
        data = _read_json(path)
        findings = [_json_finding(os.path.dirname(path), ref) for ref in _references(data)]
        if data is _TOO_LARGE:
            findings.append(Finding(Severity.SUSPICIOUS, "remote-code",
                                    f"larger than {MAX_JSON_BYTES >> 20} MiB, so not read for "
                                    f"an auto_map: {LOADER} would read every byte of it"))
    elif path.endswith(".py"):
        findings = [_python_finding(path)]
    else:
        return
    if not findings:
        return
    if not_a_checkpoint(res):  # text or JSON: this is what it means
        res.error = None
    res.findings.extend(findings)
    verdict = worst([g.severity for g in res.globals] + [f.severity for f in res.findings])
    res.verdict = Verdict.ERROR if res.error and verdict != Verdict.DANGEROUS else verdict


def _json_finding(folder: str, ref: Reference) -> Finding:
    label = f"{ref.module}.{ref.name}"
    if ref.repo is not None:
        return Finding(Severity.SUSPICIOUS, "remote-code",
                       f"{ref.key} names {label} in the repository {ref.repo}: {ref.loader} "
                       "downloads that code and runs it; it was not scanned")
    runs = _runs(folder, ref.module)
    if not runs:
        return Finding(Severity.SUSPICIOUS, "remote-code",
                       f"{ref.key} names {label}, but {ref.module}.py is not in the folder: "
                       f"{ref.loader} looks for it and runs it wherever it comes from")
    files = ", ".join(os.path.basename(p) for p, _ in runs)
    severity = worst([Severity.SUSPICIOUS, *(code.severity for _, code in runs)])
    danger = [r for _, code in runs for r in code.at_load]
    tail = f"; at import or construction it calls {'; '.join(danger[:2])}" if danger else ""
    return Finding(Severity(severity), "remote-code",
                   f"{ref.key} names {label}: {ref.loader} imports and runs {files} from this "
                   f"folder{tail}")


def _python_finding(path: str) -> Finding:
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        mtime = 0
    code = read_python(path, mtime)
    module = os.path.basename(path)[:-3]
    refs = _naming(os.path.dirname(path) or ".").get(module, [])
    named = [f"{json_name}'s {ref.key} ({ref.module}.{ref.name})" for json_name, ref in refs]
    loaders = " and ".join(sorted({ref.loader for _, ref in refs}))
    who = (f"named by {', '.join(named[:3])}: {loaders} imports and runs it"
           if named else "it runs wherever it is imported")
    return Finding(Severity(code.severity), "python-code",
                   f"Python source, {who}; {code.summary()}")
