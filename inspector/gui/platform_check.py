"""Before the QApplication exists: can Qt's xcb platform plugin load on this desktop?

On a stock Linux desktop the xcb plugin's system libraries may be missing (libxcb-icccm4 and
libxcb-keysyms1 on a fresh Debian or Ubuntu); Qt then aborts with a message that names the
plugin, or a library that is in fact present. This asks the dynamic loader (`ldd`) which of
the plugin's libraries it cannot find, and names the packages that provide them on this
distribution in one line. Nothing here imports Qt: it runs before the first Qt library loads.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

EXIT_MISSING_LIBRARIES = 1
"""The exit status of the app when its platform plugin cannot load."""
OS_RELEASE = Path("/etc/os-release")
LDD_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Family:
    """A family of distributions: how it installs packages and the column of `PACKAGES`."""

    name: str
    install: str
    column: int


FAMILIES = (
    Family("debian", "sudo apt-get install", 0),
    Family("fedora", "sudo dnf install", 1),
    Family("arch", "sudo pacman -S", 2),
    Family("suse", "sudo zypper install", 0),  # openSUSE names these as Debian does
)
ID_FAMILIES = {"debian": "debian", "ubuntu": "debian", "linuxmint": "debian", "pop": "debian",
               "fedora": "fedora", "rhel": "fedora", "centos": "fedora", "rocky": "fedora",
               "almalinux": "fedora", "arch": "arch", "manjaro": "arch", "endeavouros": "arch",
               "opensuse": "suse", "suse": "suse", "sles": "suse"}
"""os-release ID / ID_LIKE words -> the family's name."""

PACKAGES: dict[str, tuple[str, str, str]] = {
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil",
                                "xcb-util-renderutil"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util", "xcb-util"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb", "libxcb"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb", "libx11"),
    "libX11.so.6": ("libx11-6", "libX11", "libx11"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon", "libxkbcommon"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype", "freetype2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs", "dbus"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2", "glib2"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl", "libglvnd"),
    "libGL.so.1": ("libgl1", "libglvnd-glx", "libglvnd"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl", "libglvnd"),
}
"""The xcb plugin's system libraries: soname -> (Debian/Ubuntu, Fedora/RHEL, Arch) package."""

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found", re.MULTILINE)


def xcb_will_load(env: Mapping[str, str]) -> bool:
    """True when Qt will try its xcb plugin: on Linux, QT_QPA_PLATFORM unset or xcb, an X
    display set, and not a Wayland session (where Qt picks its wayland plugin first)."""
    if not sys.platform.startswith("linux"):
        return False
    forced = env.get("QT_QPA_PLATFORM", "")
    if forced:
        return forced.split(":")[0].split(";")[0] == "xcb"
    wayland = env.get("WAYLAND_DISPLAY") and env.get("XDG_SESSION_TYPE") == "wayland"
    return bool(env.get("DISPLAY")) and not wayland


def xcb_plugin(env: Mapping[str, str]) -> Path | None:
    """The xcb platform plugin Qt will load: from QT_QPA_PLATFORM_PLUGIN_PATH, else PySide6's."""
    folder = env.get("QT_QPA_PLATFORM_PLUGIN_PATH")
    if not folder:
        spec = importlib.util.find_spec("PySide6")
        if spec is None or spec.origin is None:
            return None
        folder = str(Path(spec.origin).parent / "Qt" / "plugins" / "platforms")
    plugin = Path(folder) / "libqxcb.so"
    return plugin if plugin.is_file() else None


def missing_libraries(plugin: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """Sonames the dynamic loader cannot find for `plugin` and what it needs, in ldd's order
    (empty when everything is found, or when ldd itself is not there to ask)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return []
    try:
        out = subprocess.run([ldd, str(plugin)], capture_output=True, text=True,
                             timeout=LDD_TIMEOUT_S, env=dict(env if env is not None
                                                             else os.environ)).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return list(dict.fromkeys(_NOT_FOUND.findall(out)))


def family(os_release: str) -> Family | None:
    """The distribution family an /etc/os-release text names (ID, then ID_LIKE)."""
    fields = dict(re.findall(r'^(\w+)=["\']?([^"\'\n]*)', os_release, re.MULTILINE))
    for word in [fields.get("ID", ""), *fields.get("ID_LIKE", "").split()]:
        name = ID_FAMILIES.get(word.lower()) or ID_FAMILIES.get(word.lower().split("-")[0])
        if name:
            return next(f for f in FAMILIES if f.name == name)
    return None


def install_hint(missing: list[str], fam: Family | None) -> str:
    """One line: what is missing and the command that installs it on this distribution."""
    system = [lib for lib in missing if lib in PACKAGES]
    bundled = [lib for lib in missing if lib not in PACKAGES]
    column = fam.column if fam is not None else 0
    packages = list(dict.fromkeys(PACKAGES[lib][column] for lib in system))
    parts = [f"ckpt-inspector: the desktop app cannot start: Qt's xcb platform plugin needs "
             f"{', '.join(missing)}, which the system cannot find"]
    if packages and fam is not None:
        parts.append(f"install them with: {fam.install} {' '.join(packages)}")
    elif packages:
        parts.append(f"install the packages {' '.join(packages)} (their Debian/Ubuntu names)")
    if bundled:
        parts.append("reinstall PySide6 (pip install --force-reinstall PySide6)")
    parts.append("or use the headless commands (ckpt-inspector inspect FILE)")
    return "; ".join(parts)


def startup_problem(env: Mapping[str, str] | None = None,
                    os_release: Path = OS_RELEASE) -> str | None:
    """The one line to print instead of starting Qt, or None when the app can start."""
    env = os.environ if env is None else env
    if not xcb_will_load(env):
        return None
    plugin = xcb_plugin(env)
    if plugin is None:
        return None
    missing = missing_libraries(plugin, env)
    if not missing:
        return None
    try:
        text = os_release.read_text(errors="replace")
    except OSError:
        text = ""
    return install_hint(missing, family(text))
