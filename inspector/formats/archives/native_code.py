"""Native libraries inside a zip: machine code, which an AOTInductor `.pt2` package's loader runs.

`torch._inductor.aoti_load_package` unpacks a `.pt2` package and loads the compiled model
library it carries (`<name>/data/aotinductor/<model>/*.so`) with `dlopen`, which runs the
library's constructors before torch looks at anything in it: native code by design. So a
native library (known by its magic, ELF or Mach-O, or by its name) in a package of that
shape is dangerous (`native-code`); one in any other zip is suspicious (`native-library`):
nothing in that archive's loaders runs it, but it is code, not data. A package that carries
its model as C++ source (`data/aotinductor/<model>/*.cpp`, no library) is native code too:
the loader (torch's C++ `AOTIModelPackageLoader`, where the Python reading falls back to it)
compiles it with a shell command built unescaped from the package's own
`*_compile_flags.json` and `*_linker_flags.json` strings (`compiler`, `cflags`, ...), runs it
with `system()`, and dlopens what it built.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from inspector.core.vocabulary import Severity
from inspector.formats.archives import zipread

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

LOADER = "torch._inductor.aoti_load_package"
# ELF, Mach-O (both byte orders, 32 and 64 bits) and universal binaries; a PE's two-byte `MZ`
# is too short to tell from tensor bytes, so a Windows library is known by its name
_MAGIC = (b"\x7fELF", b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe",
          b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")
_NAMED = re.compile(r"\.(?:so(?:\.\d+)*|dylib|dll|pyd)$", re.IGNORECASE)
_AOTI_FOLDER = "data/aotinductor/"


def _in_aoti_folder(name: str) -> bool:
    """Whether the member lies in AOTInductor's folder, at the top or under the package's."""
    return name.startswith(_AOTI_FOLDER) or f"/{_AOTI_FOLDER}" in name


def is_compiled_source(member: zipread.Member) -> bool:
    """Whether the member is C++ source the package's loader compiles and loads: a `.cpp`
    in AOTInductor's folder (the loader picks it by that ending, as it picks a `.so`)."""
    return member.name.endswith(".cpp") and _in_aoti_folder(member.name)


def is_native(buf, member: zipread.Member, by_name_only: bool = False) -> bool:
    """Whether the member is a native library, by its name or (unless `by_name_only`) its
    first bytes."""
    return bool(_NAMED.search(member.name)) or (not by_name_only and zipread.member_head(
        buf, member, 4).startswith(_MAGIC))


def is_aoti_package(buf, members: list[zipread.Member]) -> bool:
    """Whether the zip has a `.pt2` package's shape: an `archive_format` reading `pt2`, or
    AOTInductor's `data/aotinductor/` folder."""
    for m in members:
        if _in_aoti_folder(m.name):
            return True
        if m.name.rsplit("/", 1)[-1] == "archive_format" and zipread.member_head(
                buf, m, 8).strip() == b"pt2":
            return True
    return False


def report(ctx: FormatContext, buf, members: list[zipread.Member],
           records: set[str] = frozenset()) -> None:
    """A finding for each native library and each compiled C++ source in the archive (at most
    8 of each named). `records`: the tensor records its pickles name, data to every loader,
    known by name only (a .pt2's loader finds its library by name; reading thousands of
    records' first bytes costs)."""
    for m in [m for m in members if is_compiled_source(m)][:8]:  # its folder makes a package
        ctx.find(Severity.DANGEROUS, "native-code",
                 f"C++ source in a .pt2 package: {LOADER} compiles it with a shell command "
                 "built from the package's own *_compile_flags.json and *_linker_flags.json "
                 "strings, then loads what it built with dlopen", m.name)
    native = [m for m in members if m.size and not m.name.endswith("/")
              and is_native(buf, m, m.name in records)]
    if not native:
        return
    package = is_aoti_package(buf, members)
    for m in native[:8]:
        if package:
            ctx.find(Severity.DANGEROUS, "native-code",
                     f"a native library in a .pt2 package: {LOADER} loads it with dlopen, "
                     "which runs its code before torch checks anything", m.name)
        else:
            ctx.find(Severity.SUSPICIOUS, "native-library",
                     "a native library (machine code, not data): it runs wherever something "
                     "loads it", m.name)
