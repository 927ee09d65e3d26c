"""GGUF (llama.cpp, ggml): recognised by its magic, its header read and bounds-checked
(`gguf_header`), its chat templates checked for code (`chat_template`), and its dense tensors
read by the worker (`tensors.gguf_load`) for statistics and digests.

llama.cpp reads no code from the file; what runs is the chat template, rendered by whatever
serves the model, and the header parser itself, which older llama.cpp releases overflowed on
crafted counts and lengths. So `holds_code`: its template engine may run what the file carries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inspector.core.vocabulary import Format
from inspector.formats.chat_template import check as check_template
from inspector.formats.gguf_header import read as read_header
from inspector.formats.gguf_header import sniff as sniff_header
from inspector.formats.registry import FormatAdvice, FormatSpec, register

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

TEMPLATE_KEY = "tokenizer.chat_template"


def scan(ctx: FormatContext, buf) -> None:
    """Report the header's problems and every chat template's code."""
    header = read_header(buf)
    for p in header.problems:
        ctx.find(p.severity, p.code, p.message)
    for key, text in templates(header.kv):
        for issue in check_template(text):
            ctx.find(issue.severity, "gguf-chat-template",
                     f"the chat template {key!r} {issue.reason}; never render it outside a "
                     "sandboxed Jinja2 environment", member=key)
    if not header.complete:
        ctx.not_fully_read("gguf-header", "the GGUF header could not be read to its end")


def templates(kv: dict[str, Any]) -> list[tuple[str, str]]:
    """Every chat template the pairs hold: `tokenizer.chat_template`, its named variants
    (`tokenizer.chat_template.tool_use`), and string items of any of them."""
    out = []
    for key, value in kv.items():
        if key != TEMPLATE_KEY and not key.startswith(TEMPLATE_KEY + "."):
            continue
        if isinstance(value, str):
            out.append((key, value))
        elif isinstance(value, list):
            out += [(f"{key}[{i}]", v) for i, v in enumerate(value) if isinstance(v, str)]
    return out


SAFE = FormatAdvice(
    "Safe — no code found in the GGUF file",
    "A GGUF file is a header, metadata and tensor data; its header keeps within the file and "
    "its chat template uses nothing a template injection needs.",
    "Load it with llama.cpp or the gguf package; record its SHA-256 in a manifest so later "
    "copies can be checked.")
SUSPICIOUS = FormatAdvice(
    "Suspicious — read the findings before loading it",
    "llama.cpp refuses parts of its header or data layout, or its chat template uses "
    "constructs that can reach outside Jinja's sandbox.",
    "Read the findings; render its chat template only with a sandboxed Jinja environment "
    "(llama-cpp-python 0.2.72 or later), or get the file again from its source.")

SPEC = register(FormatSpec(
    Format.GGUF, "GGUF model (llama.cpp, ggml)", (".gguf",), "application/x-gguf",
    holds_code=True, loaders=("llama.cpp (gguf_init_from_file)", "gguf.GGUFReader"),
    sniff=sniff_header, scan=scan, tensors="inspector.tensors.gguf_load:load_gguf",
    pickled=False, safe_advice=SAFE, suspicious_advice=SUSPICIOUS))
