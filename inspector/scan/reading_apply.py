"""One scanned file's real readings folded into its scan result (`apply`), as
`scan.readings` gets them from the jailed dry run. It folds in:

- imports the real readings resolve, classified as any import (`policy.classify`);
- `parser-differential`: the real readers resolve an import the walker did not see (dangerous:
  a grammar difference is the mark of a crafted file), or a real reader reads a pickle where
  the walker found none, or the walker sees imports no real reader reaches: those leave the
  globals (the verdict's imports are the real readers') and the finding is as severe as the
  worst of them (`walker_only`);
- calls outside the call allow-list (`policy.call_verdict`), with their reconstructed call and
  code-like arguments read whole;
- pickles held in values (raw, base64, hex, in stages), as `nested-pickle-value` on the key that
  holds them, and code-like text in values (`code-in-value`, info);
- `unreached-pickle`: imports read in bytes no loader reads as a pickle (a blob not `reached`:
  a member of an archive no zip reader hands out so), kept apart from the globals and as
  severe as the worst of them (`unreached`).

A file the walker called no checkpoint becomes one when a real reading reads a pickle from it.
"""

from __future__ import annotations

import functools
import importlib.util
import re

from inspector.core.verdict import worst
from inspector.core.vocabulary import Severity, Verdict
from inspector.scan.pickles.policy import (
    call_verdict,
    classify,
    numpy_dtype_classes,
    weights_only_rules,
)
from inspector.scan.reading_record import Blob, NestedPickle, StreamReading
from inspector.scan.result import HANDED_TO_CODE, Finding, GlobalUse

_NAME = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*")


def _importable(module: str, name: str) -> bool:
    """A name the import system could resolve: anything else fails before any code runs."""
    return bool(_NAME.fullmatch(module) and _NAME.fullmatch(name))


@functools.lru_cache(maxsize=1024)
def _exists(module: str) -> bool:
    """Whether the module's top-level package can be found (found, not imported)."""
    try:
        return importlib.util.find_spec(module.partition(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def recount(res) -> str:
    """The verdict from the result's globals and findings, as `ScanContext.finish` gives it."""
    if res.verdict == Verdict.SKIPPED:
        return Verdict.SKIPPED
    verdict = worst([g.severity for g in res.globals] + [f.severity for f in res.findings])
    return Verdict.ERROR if res.error and verdict != Verdict.DANGEROUS else verdict


def apply(res, blob: Blob, records: list[StreamReading]) -> tuple[set[tuple[str, str]],
                                                        set[tuple[str, str]]]:
    """Fold one blob's real readings into `res` (a `scan.ScanResult`); returns the imports
    they resolved (`walker_only` then takes out what only the walk saw), and those that only
    readings no loader makes (`apart` records) resolved."""
    rules = weights_only_rules()
    uses = {(g.module, g.name): g for g in res.globals}
    real: dict[tuple[str, str], int] = {}
    apart: set[tuple[str, str]] = set()
    read_pickle = False
    where = blob.member
    found_in: dict[tuple[str, str], str | None] = {}  # the record of a zip blob naming each

    seen = {(f.code, f.message, f.member) for f in res.findings}
    # a call the walk already reported (with its opcode's offset) is not reported again
    seen_calls = {(f.code, f.call) for f in res.findings if f.call}
    # nor one of a global already dangerous: it is shown under that global, with its call
    dangerous_calls = {c for g in res.globals if g.severity == Severity.DANGEROUS
                       for c in g.calls}

    def find(severity: str, code: str, message: str, call: str | None = None,
             member: str | None = where) -> None:
        if call is not None and ((code, call) in seen_calls or call in dangerous_calls):
            return
        if len(res.findings) < 4000 and (code, message, member) not in seen:
            seen.add((code, message, member))
            res.findings.append(Finding(severity, code, message, member, None, call))

    # the walk saw a pickle handed to a class whose own code may unpickle it (BUILD state,
    # constructor arguments): no value of this file is then said to run nothing
    handed = [f.message.split(":", 1)[0] for f in res.findings
              if f.code == "nested-pickle" and HANDED_TO_CODE in f.message]
    for rec in records:
        read_pickle |= rec.pickles > 0 and not rec.apart
        if rec.cut:
            res.weights_only_ok = False
            find(Severity.SUSPICIOUS, "readings-budget",
                 f"the pure-Python unpickler's reading (joblib's) {rec.error}; what lies "
                 "past that is read by the C unpicklers only")
        looked_up = _class_attributes(rec)
        for module, name, count in rec.imports + [[m, n, 1] for m, n in looked_up]:
            if not _importable(module, name) or (looked_up and (module, name) == _GETATTR):
                continue
            if rec.apart:
                apart.add((module, name))
            else:
                real[(module, name)] = max(real.get((module, name), 0), count)
                found_in.setdefault((module, name), rec.member or where)
        for call in rec.calls:
            if not (looked_up and (call["target"], call["op"]) == (".".join(_GETATTR), "call")):
                _judge_call(_looked_up_call(call, looked_up), find, rules)
        for inner in rec.nested:
            _nested(inner, find, rules, where, handed)
        for value in rec.code_values[:5]:
            find(Severity.INFO, "code-in-value",
                 f"the value at {value['key'] or '<root>'} reads like code: "
                 f"{value['text'][:120]!r}", None, _key(where, value["key"]))
    for (module, name), count in real.items():
        if (module, name) not in uses and blob.reached:
            verdict = classify(module, name, rules)
            member = found_in.get((module, name))
            use = GlobalUse(module, name, count, verdict.severity, verdict.reason,
                            [member] if member else [])
            res.globals.append(use)
            uses[(module, name)] = use
            res.weights_only_ok = res.weights_only_ok and verdict.severity == Severity.SAFE
    only_real = sorted(f"{m}.{n}" for m, n in (set(real) | apart) - blob.walker)
    if only_real and blob.zip:
        find(Severity.SUSPICIOUS, "zip-reader-differential",
             "torch's own zip reader hands torch.load pickles of this damaged archive that "
             "the scan's reading of it did not give (" + ", ".join(only_real[:6]) + "); the "
             "real unpicklers read them")
    elif only_real:
        find(Severity.DANGEROUS, "parser-differential",
             "CPython's unpickler resolves imports the static walk did not see ("
             + ", ".join(only_real[:6]) + "): the bytes are crafted to read differently")
    # imports before a failure count too, when the module exists (text opening with `c`
    # reads as a GLOBAL of words that name no module: a real load fails right there)
    read_pickle = read_pickle or any(_exists(m) for m, _ in real)
    if read_pickle and res.error and res.error.startswith(("not a model file",
                                                           "not a readable")):
        find(Severity.SUSPICIOUS, "parser-differential",
             "CPython's unpickler reads a pickle here that the static walk could not read: "
             f"{res.error[:160]}")
        res.error = None
        res.format = "pickle" if res.format == "unknown" else res.format
        if res.verdict == Verdict.SKIPPED:
            res.verdict = Verdict.SAFE
    res.globals.sort(key=lambda g: (-_RANK[g.severity], g.module, g.name))
    res.verdict = recount(res)
    return set(real), apart - set(real)


def unreached(res, blobs: list[Blob], holding: list[Blob], real: set[tuple[str, str]],
               over: set[tuple[str, str]]) -> None:
    """Imports of pickles in bytes no loader reads as pickles, which no loader's reading
    resolves, are not the verdict's globals: they are one `unreached-pickle` finding, as
    severe as the worst of them (a crafted file keeps its payload dangerous), naming what the
    scan found there. Those bytes are the `blobs` not `reached` (members of an archive no
    loader opens that way, a compressed stream's content past where the stdlib's decoder
    stops) and the `over` readings: from starts past where every loader's reading stops.
    `holding`: the blobs that hold them."""
    names = (over | set().union(*(b.walker for b in blobs))) - real
    rules = weights_only_rules()
    # names no import system resolves leave too, and are shown only when dangerous
    judged = {n: classify(*n, rules).severity for n in names}
    shown_names = {n for n, s in judged.items() if _importable(*n) or s == Severity.DANGEROUS}
    if not shown_names:
        _set_apart(res, names, [], Severity.INFO, "unreached-pickle", None)
        return
    severity = worst([Severity.INFO, *(judged[n] for n in shown_names)])
    severity = Severity.INFO if severity == Severity.SAFE else severity
    shown = ", ".join(sorted(f"{m}.{n}" for m, n in shown_names)[:6])
    _set_apart(res, names, [b for b in holding if b.member], severity, "unreached-pickle",
               f"{shown} imported in bytes no loader reads as a pickle; the scan read them "
               "because a repairing reader might")


def walker_only(res, blobs: list[Blob], real: set[tuple[str, str]]) -> None:
    """Imports the walk saw in blobs the real readers read, and that no real reading of the
    file resolves, leave the verdict's globals: they are one `parser-differential` finding,
    as severe as the worst of them (a dangerous name the walk alone sees keeps the file
    dangerous). Names no import system resolves (Python source in a TorchScript archive read
    as protocol-0 text) fail in any loader before code runs: no finding unless one is worse
    than suspicious."""
    walked = set().union(*(b.walker for b in blobs)) - real
    if ("numpy", "dtype") in walked:  # the dtype classes listed for what it builds go with it
        walked |= {tuple(c.rsplit(".", 1)) for c in numpy_dtype_classes()} - real
    gone = [g for g in res.globals if (g.module, g.name) in walked]
    if not gone:
        return
    shown = [g for g in gone if _importable(g.module, g.name) or g.severity == Severity.DANGEROUS]
    severity = worst([Severity.SUSPICIOUS] + [g.severity for g in shown])
    names = ", ".join(sorted(g.import_name for g in shown)[:6])
    _set_apart(res, walked, [b for b in blobs if b.walker & walked], severity,
               "parser-differential",
               f"the static walk sees imports no real unpickler reaches ({names})" if shown
               else None)


def _set_apart(res, names: set[tuple[str, str]], holding: list[Blob], severity: str, code: str,
               message: str | None) -> None:
    """Takes `names` out of the verdict's globals into one finding `code` (none when `message`
    is None), on the member of the `holding` blobs when they are all one, and recounts."""
    res.globals[:] = [g for g in res.globals if (g.module, g.name) not in names]
    members = {b.member for b in holding}
    if message is not None and len(res.findings) < 4000:
        res.findings.append(Finding(Severity(severity), code, message,
                                    next(iter(members)) if len(members) == 1 else None))
    res.verdict = recount(res)


_RANK = {Severity.SAFE: 0, Severity.INFO: 0, Severity.SUSPICIOUS: 1, Severity.DANGEROUS: 2}


def _key(member: str | None, key: str) -> str:
    return f"{member}!{key}" if member and key else (member or key or "<root>")


_GETATTR = ("builtins", "getattr")
# a getattr call as the dry run shows it: an import's stand-in by its label, a literal name
_LOOKUP = re.compile(r"builtins\.getattr\(([A-Za-z_][\w.]*), '([A-Za-z_]\w*)'\)")


def _class_attributes(rec: StreamReading) -> list[tuple[str, str]]:
    """The dotted imports (`module`, `Class.name`) a reading's getattr calls look up, where
    every one of them (each shown: the count no larger than the texts kept) is
    `getattr(<import>, '<identifier>')`: each is judged as a dotted STACK_GLOBAL is, as the
    walk judges it (`WalkState.class_attribute`), and the getattr import with them. Empty
    for any other reading: a computed owner or name leaves getattr a call of its own."""
    call = next((c for c in rec.calls if c["target"] == ".".join(_GETATTR)), None)
    if call is None or call["op"] != "call" or call["computed"] or (
            call["count"] > len(call["texts"])):
        return []
    labels = {f"{m}.{n}": (m, n) for m, n, _ in rec.imports}
    out = []
    for text in call["texts"]:
        found = _LOOKUP.fullmatch(text)
        owner = labels.get(found.group(1)) if found else None
        if owner is None:
            return []
        out.append((owner[0], f"{owner[1]}.{found.group(2)}"))
    return out


_CALLED_LOOKUP = re.compile(_LOOKUP.pattern + r"(\(.*\))", re.DOTALL)


def _looked_up_call(call: dict, looked_up: list[tuple[str, str]]) -> dict:
    """A computed call whose every shown text calls what a class-attribute lookup of this
    reading returned (`getattr(zoneinfo.ZoneInfo, '_unpickle')('UTC', 1)`) is a call of that
    dotted import, judged as the walk judges it; any other call unchanged."""
    if not (looked_up and call["computed"] and call["texts"]) or (
            call["count"] > len(call["texts"])):
        return call
    found = [_CALLED_LOOKUP.fullmatch(t) for t in call["texts"]]
    targets = {f"{m.group(1)}.{m.group(2)}" for m in found if m}
    known = {f"{module}.{name}" for module, name in looked_up}
    if not all(found) or len(targets) != 1 or not targets <= known:
        return call
    target = targets.pop()
    return {**call, "target": target, "computed": False,
            "texts": [f"{target}{m.group(3)}" for m in found]}


def _judge_call(call: dict, find, rules) -> None:
    """A recorded call outside the allow-list is dangerous; code in its arguments too."""
    if call["op"] not in ("call", "new"):
        return
    text = call["texts"][0] if call["texts"] else call["target"]
    if call["op"] == "call":
        verdict = call_verdict(call["target"], call["computed"], call["texts"], rules)
        if verdict is not None:
            find(verdict.severity, "call-outside-allowlist", verdict.reason, text)
    if call.get("code"):
        find(Severity.DANGEROUS, "code-in-arguments",
             f"{call['target']} is called with an argument that reads like code: "
             f"{call['code'][:120]!r}", text)


def _nested(inner: NestedPickle, find, rules, member: str | None,
            handed: list[str] | None = None) -> None:
    """A pickle held in a value: its dangerous imports and calls are a finding on its key.
    `handed`: how the walk saw this file hand a pickle to a class whose own code may unpickle
    it (then loading the file may well run it: dangerous)."""
    bad = [f"{m}.{n}" for m, n, _ in inner.imports
           if classify(m, n, rules).severity == Severity.DANGEROUS]
    bad += [c["target"] for c in inner.calls if c["op"] == "call" and call_verdict(
        c["target"], c["computed"], c["texts"], rules) is not None]
    key = _key(member, inner.key)
    shown = next((c["texts"][0] for c in inner.calls if c["texts"]), None)
    if bad and handed:
        find(Severity.DANGEROUS, "nested-pickle-value",
             f"the value at {inner.key or '<root>'} is a pickle ({inner.encoding}) that "
             f"calls {', '.join(sorted(set(bad))[:4])}, and loading this file hands a pickle "
             f"to a class whose own code may unpickle it ({handed[0][:160]})", shown, key)
    elif bad:
        find(Severity.SUSPICIOUS, "nested-pickle-value",
             f"the value at {inner.key or '<root>'} is a pickle ({inner.encoding}) that "
             f"calls {', '.join(sorted(set(bad))[:4])}: loading this file runs nothing, but "
             "never unpickle that value", shown, key)
    else:
        find(Severity.INFO, "nested-pickle-value",
             f"the value at {inner.key or '<root>'} is a pickle ({inner.encoding}) of "
             "plain data", shown, key)
