"""Plain-language words for verdicts and findings: what it means and what to do."""

from __future__ import annotations

from dataclasses import dataclass

from inspector.core.vocabulary import DocumentState, HealthStatus, Verdict
from inspector.layout.torchscript import CODE_ARCHIVES
from inspector.scan.advice import INTEGRITY_CODES, advise
from inspector.scan.result import ScanResult

HEALTH_PROBLEM_ACTION = (
    "Do not use these weights. Diff against an earlier good copy (Tools → Compare With…) to "
    "see whether single bits flipped (memory or storage) or training diverged, and restore "
    "that copy.")


@dataclass(frozen=True)
class Explanation:
    """A headline, why it matters, and what the user should do about it."""

    headline: str
    meaning: str
    action: str


VERDICT_TEXT: dict[str, Explanation] = {
    Verdict.SAFE: Explanation(
        "Safe — no code in the pickle",
        "Every import in the file is one that torch.load(weights_only=True) allows, so "
        "loading it cannot run code.",
        "Load it with torch.load(path, weights_only=True). Convert it to safetensors to drop "
        "pickle altogether, and record its SHA-256 in a manifest so later copies can be "
        "checked.",
    ),
    Verdict.SUSPICIOUS: Explanation(
        "Suspicious — your decision is needed",
        "It imports globals outside weights_only's allowlist (custom classes, NumPy objects, "
        "argparse.Namespace…). None is known to run code, but torch.load(weights_only=True) "
        "refuses the file until they are allowed.",
        "Allow exactly the globals you recognise (your own training code's classes) for this "
        "one load — never weights_only=False. Once loaded, convert it to safetensors so no one "
        "has to make this decision again.",
    ),
    Verdict.DANGEROUS: Explanation(
        "Dangerous — do not load this file",
        "Unpickling it would import something that runs code or touches the system. It was "
        "not loaded, and no sandbox worker was started for it.",
        "Do not open it with torch.load(weights_only=False), pickle or joblib. Get the file "
        "again from its original source and verify it against the publisher's checksum; ask "
        "for a safetensors version.",
    ),
    Verdict.ERROR: Explanation(
        "Could not be scanned",
        "The file is not a checkpoint this tool recognises, or it is damaged.",
        "Check that the download finished (compare its size and SHA-256 with the source) and "
        "that it is a PyTorch, safetensors or NumPy file.",
    ),
}

CODE_ARCHIVE = Explanation(
    "Suspicious — it carries code that runs when loaded",
    "A TorchScript or torch.export archive: torch.jit.load or torch.export.load runs the code "
    "inside it. Its weights were read here from their records, and none of its code ran.",
    "Read its code (Code → Show code…) before loading it anywhere else; if you only need the "
    "weights, convert it to safetensors.",
)

SAFETENSORS = Explanation(
    "Safe — safetensors holds no code",
    "A safetensors file is a JSON header and raw tensor bytes: there is no pickle in it, so "
    "loading it cannot run code.",
    "Load it with safetensors (safetensors.torch.load_file(path)), and record its SHA-256 in "
    "a manifest so later copies can be checked.",
)

NO_CODE_DAMAGED_WEIGHTS = Explanation(
    "No code found — but the weights are damaged",
    "Loading it runs no code, but some weights hold NaN or Inf, values far beyond the rest "
    "of their tensor, or a negative running variance (see Weights health).",
    HEALTH_PROBLEM_ACTION,
)

PENDING = Explanation("Scanning…", "Reading the pickle opcodes; nothing from the file runs.", "")

CORRUPT = Explanation(
    "Damaged — the file's data is corrupted",
    "Its bytes do not match the checksums or sizes the file itself records: a damaged "
    "download or copy, failing storage, or tampering. This is not about which code to allow.",
    "Get the file again and compare its SHA-256 with the publisher's; if a copy on your own "
    "storage keeps changing, check the disk.",
)


# The app's wording of each case `scan.advice.advise` decides (bad weights is worded above).
_CASE_TEXT: dict[str, Explanation] = {
    "damaged": CORRUPT,
    "dangerous": VERDICT_TEXT[Verdict.DANGEROUS],
    "unreadable": VERDICT_TEXT[Verdict.ERROR],
    "code_archive": CODE_ARCHIVE,
    "suspicious": VERDICT_TEXT[Verdict.SUSPICIOUS],
    "safe_pickle": VERDICT_TEXT[Verdict.SAFE],
    "safe_safetensors": SAFETENSORS,
}


HEALTH_TEXT: dict[str, Explanation] = {
    HealthStatus.OK: Explanation(
        "Weights look healthy",
        "No NaN or Inf, no value orders of magnitude above the rest of its tensor, no constant "
        "or duplicated weight matrix.", ""),
    HealthStatus.WARNING: Explanation(
        "Weights: worth a look",
        "A weight matrix is constant or all zero, or two weights are bit-for-bit copies of "
        "each other.",
        "Check that this is intended: fresh LoRA layers are all zero, and tied weights saved "
        "twice are duplicates."),
    HealthStatus.PROBLEM: Explanation(
        "Weights are corrupted or diverged",
        "Some weights hold NaN or Inf, values far beyond the rest of their tensor (the "
        "signature of a flipped exponent bit), or a negative running variance (of a flipped "
        "sign bit).",
        HEALTH_PROBLEM_ACTION),
}
HEALTH_PENDING = Explanation("Weights health: not judged yet",
                             "The weights are judged once the sandbox has read them.", "")
HEALTH_NOT_LOADED = Explanation("Weights health: not judged",
                                "The weights were not loaded, so their values were not read.", "")

NOT_JUDGED_WHY: dict[str, str] = {
    DocumentState.BLOCKED: "the scan called it dangerous, so it was never loaded",
    DocumentState.DECLINED: "you chose not to load it",
    DocumentState.ERROR: "the scan could not read it, so it was not loaded",
    DocumentState.LOAD_FAILED: "the sandbox could not load it",
    DocumentState.CANCELLED: "the load was cancelled",
    DocumentState.SKIPPED: "it is not a checkpoint",
    DocumentState.LOADED: "it holds no weights to judge",
}
"""Why the weights were not judged, by where the pipeline stopped."""

# Finding codes from the static scan; unknown codes fall back to the severity's advice.
# an archive whose structure zip readers disagree on, or refuse: damaged, or made to differ
_ZIP_STRUCTURE = (
    "The archive's own structure is broken or inconsistent: zip readers refuse it, or each "
    "reads a different file from it.",
    "Do not repair or extract it; get the file from its source again.",
)

FINDING_TEXT: dict[str, tuple[str, str]] = {
    "dangerous_global": (
        "The pickle imports a function that can run code or reach the operating system.",
        "Do not load it; get the file from its source again.",
    ),
    "unresolved_global": (
        "An import is assembled in a way that cannot be worked out without running it — a "
        "classic trick to hide a payload.",
        "Treat the file as hostile; do not load it.",
    ),
    "code-in-arguments": (
        "A call receives a string that looks like source code or a shell command.",
        "Treat the file as hostile; do not load it.",
    ),
    "torchscript": (
        "This is a TorchScript archive; it carries compiled code that runs when loaded.",
        "Its weights are read here without running that code (convert them to safetensors); "
        "open it with torch.jit.load only if you trust the source.",
    ),
    "torch-export": (
        "This is a torch.export archive; loading it rebuilds and runs its graph, and custom "
        "operators in it run native code.",
        "Its weights are read here without loading it (convert them to safetensors); open it "
        "with torch.export.load only if you trust the source.",
    ),
    "torchscript-reaches": (
        "The archive's TorchScript code calls an operator that reaches files or the network; "
        "code run from a __setstate__ does so while torch.jit.load loads it.",
        "Do not load it; get the file from its source again.",
    ),
    "native-code": (
        "A .pt2 package carries a native library: its loader opens it with dlopen, which runs "
        "the library's code before torch checks anything.",
        "Load it only if you trust its source as you would a program you run.",
    ),
    "native-library": (
        "The archive holds a native library (machine code, not data).",
        "Do not load or run anything from it unless you trust its source.",
    ),
    "remote-code": (
        "This JSON names Python classes that from_pretrained(trust_remote_code=True) imports "
        "from the folder and runs.",
        "Read the named .py files (their findings list what they import and call); load "
        "without trust_remote_code unless you trust the source.",
    ),
    "python-code": (
        "Python source: it runs whenever a loader imports it (trust_remote_code, "
        "torch.package).",
        "Read it before any loader may import it; its imports and calls are listed here.",
    ),
    "zip-crc-mismatch": (
        "A zip member's checksum does not match its bytes: the file is damaged (or was "
        "edited). This is corruption, not a question of trust in code.",
        "Download it again and verify it against the publisher's checksum.",
    ),
    "duplicate_name": (
        "Two zip members have the same name; loaders may pick a different one than scanners.",
        "Treat the file as tampered with; get it from its source again.",
    ),
    "path_traversal": (
        "A zip member name points outside the archive (../ or an absolute path).",
        "Treat the file as tampered with; do not extract it.",
    ),
    "zip-missing-record": (
        "The pickle refers to a tensor record that is not in the archive: the file is "
        "incomplete.",
        "Download it again; the checkpoint cannot load as is.",
    ),
    "zip-unreferenced-record": (
        "The archive holds a data record that no tensor uses.",
        "Usually harmless (an edited archive); verify the file against its checksum.",
    ),
    "storage-size-mismatch": (
        "A storage declares more bytes than its record holds — a known way to corrupt memory "
        "in older torch versions.",
        "Do not load it with torch older than 2.10; get the file from its source again.",
    ),
    "parse_error": (
        "The pickle stops or breaks part-way; everything before the break was still scanned.",
        "A damaged download or a deliberately corrupt tail; get the file again.",
    ),
    **dict.fromkeys(("zip-central-directory", "zip-offset-shift", "zip-bad-offset",
                     "zip-name-mismatch", "zip64-records", "zip-entry-fields",
                     "zip-directory-bounds", "zip-trailing-bytes", "zip-name-encoding",
                     "zip-end-record"),
                    _ZIP_STRUCTURE),
    "parser-differential": (
        "Python's own unpickler and the scanner's parser read these bytes differently: the "
        "mark of a file crafted to slip past scanners.",
        "Treat the file as hostile; do not load it.",
    ),
    "unreached-pickle": (
        "A pickle sits in bytes no loader reads as one (past where the loaders' reading of "
        "the file stops at an error, or in an archive their zip readers refuse); it was read "
        "anyway, since a tool that repairs the file would run it.",
        "Do not repair or extract the file; get it from its source again.",
    ),
    "zip-reader-differential": (
        "A loader's own zip reader (torch's, or Python's zipfile for numpy) hands out other "
        "bytes for a member than the archive's own records give: two readers see two "
        "different files. Both were scanned.",
        "Treat the file as tampered with; get it from its source again.",
    ),
}

CALLS_CAPTION = ("Unpickling it would call (rebuilt from the opcodes; nothing was run). "
                 "Click a call to see its opcode:")
OPCODE_LINK_TIP = "Show this opcode in the Pickle pane"
INDICATORS_LABEL = "Copy threat summary"
"""The button that copies `indicators_text` (flagged imports and calls) for a security ticket."""
MORE_NOT_SHOWN = ("… and {n} more, not shown here; " + INDICATORS_LABEL + " copies every "
                  "dangerous or suspicious one.")
INDICATORS_TIP = ("Copy a plain-text block for a security ticket: file name, size, SHA-256, "
                  "verdict, flagged imports and the calls they would make")
INDICATORS_DISABLED_TIP = "Only a dangerous or suspicious file has indicators to copy"

# a suspicious import in a file that is dangerous for another reason (code in its arguments)
SUSPICIOUS_IN_DANGEROUS_ADVICE = ("Do not allow it: the file is dangerous (see the findings), "
                                  "so it must not be loaded at all.")

SEVERITY_ADVICE = {
    "dangerous": "Do not load the file; get it again from its source.",
    "suspicious": "Load only with the named globals allowed, if you trust the source.",
    "warning": "Verify the file against its publisher's checksum.",
    "info": "No action needed.",
}

CODE_ARCHIVE_IMPORT_ADVICE = ("A class this archive's own code defines: torch.jit.load builds "
                              "it by running that code. Read the code; never allow it for "
                              "torch.load.")


def import_advice(severity: str, verdict: str | None, fmt: str | None) -> str:
    """What to do about one flagged import, given the file's verdict and format."""
    if fmt in CODE_ARCHIVES:
        return CODE_ARCHIVE_IMPORT_ADVICE
    if verdict == Verdict.DANGEROUS and severity != verdict:
        return SUSPICIOUS_IN_DANGEROUS_ADVICE
    return SEVERITY_ADVICE[severity]


def verdict_explanation(verdict: str | None) -> Explanation:
    """The banner and advice text of a verdict (None while scanning)."""
    if verdict is None:
        return PENDING
    return VERDICT_TEXT.get(verdict, VERDICT_TEXT[Verdict.ERROR])


def code_safety_explanation(scan: ScanResult | None, health: str | None = None) -> Explanation:
    """Banner and advice text for the code-safety badge. Which case applies is decided once,
    by `scan.advice.advise` (damage first, then danger, then bad weights: the worse verdict
    leads, as in the CLI and the report); this only words each case for the app."""
    if scan is None:
        return PENDING
    verdict = scan.verdict
    advice = advise(scan, health)
    case = advice.case
    if case == "bad_weights":
        if verdict == Verdict.SAFE:
            return NO_CODE_DAMAGED_WEIGHTS
        shown = VERDICT_TEXT.get(verdict, VERDICT_TEXT[Verdict.ERROR])
        return Explanation(shown.headline, shown.meaning, HEALTH_PROBLEM_ACTION)
    if case in _CASE_TEXT:
        return _CASE_TEXT[case]
    return Explanation(advice.headline, advice.meaning, advice.action)  # a format's own (GGUF)


def health_explanation(status: str | None, loaded: bool | None) -> Explanation:
    """Banner text for the weights-health badge of a `Health.status` (None until judged;
    loaded None while the load may still run)."""
    if status:
        return HEALTH_TEXT.get(status, HEALTH_TEXT[HealthStatus.PROBLEM])
    return HEALTH_PENDING if loaded is None else HEALTH_NOT_LOADED


def not_judged_text(state: str, message: str = "") -> str:
    """'Not judged: the sandbox could not load it: <its message>', for the weights badge."""
    why = NOT_JUDGED_WHY.get(state, "the weights were not read")
    return f"Not judged: {why}" + (f": {message}" if message else "") + "."


def finding_explanation(code: str, severity: str) -> tuple[str, str]:
    """(what it means, what to do) for one finding."""
    for known, text in FINDING_TEXT.items():
        if code == known or code.startswith(known):
            return text
    if code in INTEGRITY_CODES:  # any other damage: what damage means, and what to do
        return (CORRUPT.meaning, CORRUPT.action)
    return ("", SEVERITY_ADVICE.get(severity, SEVERITY_ADVICE["warning"]))
