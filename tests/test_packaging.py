"""Packaging: the wheel installs and runs from a fresh venv; desktop files validate; PyInstaller."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import factories
import pytest
from PySide6.QtGui import QImage

from inspector import __version__, formats, resources_path

REPO = Path(__file__).resolve().parent.parent
LINUX = REPO / "packaging" / "linux"
APP_ID = resources_path.APP_ID
BUILD_INPUTS = ("pyproject.toml", "README.md", "inspector", "resources")


def _copy_source(dest: Path) -> Path:
    """The files a wheel is built from, so the build never writes into the checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    dest.mkdir(parents=True, exist_ok=True)
    for name in BUILD_INPUTS:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


def _source_packages() -> set[str]:
    found = {"inspector.resources", "inspector.resources.icons", "inspector.resources.telemetry"}
    for init in (REPO / "inspector").rglob("__init__.py"):
        found.add(".".join(init.parent.relative_to(REPO).parts))
    return found


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"])
    assert listed == _source_packages(), "update [tool.setuptools] packages in pyproject.toml"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = _copy_source(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(src)],
                   check=True, capture_output=True, timeout=300)
    (found,) = out.glob("checkpoint_inspector-*.whl")
    return found


def test_the_wheels_metadata_says_the_license_in_spdx_and_needs_what_the_readme_runs(wheel):
    meta = zipfile.ZipFile(wheel).read(
        f"checkpoint_inspector-{__version__}.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in meta
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert "prometheus-client" in requires  # `telemetry --serve`, a README line
    # `sign` and `verify --public-key`, README lines: the reference library and the pyOpenSSL
    # its wheel imports without declaring
    assert {"model-signing", "pyOpenSSL"} <= set(requires)


def test_building_the_package_prints_no_deprecation(tmp_path):
    src = _copy_source(tmp_path / "src")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                          "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
                         capture_output=True, text=True, timeout=300, check=True)
    said = (out.stdout + out.stderr).lower()
    assert "deprecat" not in said
    assert "absent from the `packages` configuration" not in said  # a data folder unlisted


def test_wheel_holds_every_module_and_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert f"checkpoint_inspector-{__version__}.dist-info/entry_points.txt" in names
    for package in _source_packages() - {"inspector.resources.icons",
                                         "inspector.resources.telemetry"}:
        assert package.replace(".", "/") + "/__init__.py" in names, package
    for py in (REPO / "inspector").rglob("*.py"):
        assert py.relative_to(REPO).as_posix() in names, py
    assert "inspector/report/schema.json" in names
    assert "inspector/resources/checkpoint-inspector.svg" in names
    shipped = {p.name for p in (REPO / "resources" / "telemetry").glob("*.csv")}
    assert shipped and all(f"inspector/resources/telemetry/{n}" in names for n in shipped)
    for size in (16, 24, 32, 48, 64, 128, 256, 512):
        assert f"inspector/resources/icons/checkpoint-inspector-{size}.png" in names


def test_wheel_in_a_fresh_venv_runs_version_and_scan(wheel, tmp_path, canary):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = Path(subprocess.run(
        [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True).stdout.strip())
    # The dependencies (torch, Qt, ...) come from the test venv as a plain path entry: its
    # .pth files, including the editable install of this checkout, are not processed.
    (site / "zz-test-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "-q", "--no-deps", "--no-compile", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    exe = venv / "bin" / "ckpt-inspector"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    run = {"capture_output": True, "text": True, "timeout": 120, "cwd": tmp_path, "env": env}

    version = subprocess.run([exe, "--version"], **run)
    assert (version.returncode, version.stdout.strip()) == (0, f"ckpt-inspector {__version__}")

    where = subprocess.run([venv / "bin" / "python", "-I", "-c",
                            "import inspector, inspector.resources_path as r; "
                            "print(inspector.__file__, len(r.icon_png(512)))"], **run)
    module_file, icon_bytes = where.stdout.split()
    assert Path(module_file).is_relative_to(venv), "imported the checkout, not the wheel"
    assert int(icon_bytes) > 1000

    good = factories.save_state_dict(tmp_path / "good.pt")
    evil = factories.mal_os_system(tmp_path / "evil.pt", canary)
    scan = subprocess.run([exe, "scan", "--json", good, evil], **run)
    assert scan.returncode == 2, scan.stderr
    verdicts = {Path(d["path"]).name: d["verdict"]
                for d in map(json.loads, scan.stdout.splitlines())}
    assert verdicts == {"good.pt": "safe", "evil.pt": "dangerous"}


def test_frozen_entry_runs_modules_and_code_like_python(tmp_path, python_exe):
    entry = REPO / "packaging" / "frozen_entry.py"
    run = {"capture_output": True, "text": True, "timeout": 60, "cwd": tmp_path}
    code = subprocess.run([python_exe, entry, "-I", "-c", "import sys; print(sys.argv)", "x"],
                          **run)
    assert code.stdout.strip() == "['-c', 'x']"
    module = subprocess.run([python_exe, entry, "-I", "-m", "inspector", "--version"], **run)
    assert module.stdout.strip() == f"ckpt-inspector {__version__}"
    cli = subprocess.run([python_exe, entry, "--version"], **run)
    assert cli.stdout.strip() == f"ckpt-inspector {__version__}"


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None,
                    reason="desktop-file-validate not installed (apt-get install "
                           "desktop-file-utils)")
def test_desktop_entry_validates():
    out = subprocess.run(["desktop-file-validate", LINUX / f"{APP_ID}.desktop"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "error" not in out.stdout.lower(), out.stdout


@pytest.mark.skipif(shutil.which("appstreamcli") is None,
                    reason="appstreamcli not installed (apt-get install appstream)")
def test_appstream_metainfo_validates():
    out = subprocess.run(["appstreamcli", "validate", "--no-net",
                          LINUX / f"{APP_ID}.metainfo.xml"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.skipif(shutil.which("update-mime-database") is None,
                    reason="update-mime-database not installed (apt-get install shared-mime-info)")
def test_desktop_integration_installs_mime_types_icons_and_entry(tmp_path):
    data = tmp_path / "share"
    out = subprocess.run(["bash", LINUX / "install-desktop-integration.sh", data],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (data / "applications" / f"{APP_ID}.desktop").is_file()
    assert (data / "metainfo" / f"{APP_ID}.metainfo.xml").is_file()
    assert (data / "icons/hicolor/scalable/apps" / f"{APP_ID}.svg").is_file()
    assert (data / "icons/hicolor/48x48/apps" / f"{APP_ID}.png").is_file()
    globs = (data / "mime" / "globs2").read_text()
    for pattern, mime in (("*.pt", "application/x-pytorch-checkpoint"),
                          ("*.pth", "application/x-pytorch-checkpoint"),
                          ("*.ckpt", "application/x-pytorch-checkpoint"),
                          ("*.safetensors", "application/x-safetensors"),
                          ("*.gguf", "application/x-gguf"), ("*.onnx", "application/x-onnx")):
        assert f":{mime}:{pattern}" in globs, pattern
    assert ":application/x-pytorch-checkpoint:*.bin" not in globs  # too common a name to claim
    desktop = (data / "applications" / f"{APP_ID}.desktop").read_text()
    mimes = next(line for line in desktop.splitlines() if line.startswith("MimeType="))
    assert set(mimes[9:].strip(";").split(";")) == set(formats.mime_types())


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(shutil.which("pyinstaller", path=str(Path(sys.executable).parent)) is None,
                    reason="PyInstaller not installed (pip install -c constraints.txt "
                           "-e '.[packaging]')")
def test_pyinstaller_one_folder_build(tmp_path, canary):
    exe_dir = Path(sys.executable).parent
    src = _copy_source(tmp_path / "src")
    shutil.copytree(REPO / "packaging", src / "packaging")
    build = subprocess.run(
        [exe_dir / "pyinstaller", "--noconfirm", "--log-level", "WARN",
         "--distpath", tmp_path / "dist", "--workpath", tmp_path / "build",
         src / "packaging" / "ckpt-inspector.spec"],
        capture_output=True, text=True, timeout=1700, cwd=src)
    assert build.returncode == 0, build.stderr[-4000:]
    app = tmp_path / "dist" / "ckpt-inspector" / "ckpt-inspector"
    run = {"capture_output": True, "text": True, "timeout": 300, "cwd": tmp_path}
    assert subprocess.run([app, "--version"], **run).stdout.strip() == \
        f"ckpt-inspector {__version__}"
    evil = factories.mal_os_system(tmp_path / "evil.pt", canary)
    scan = subprocess.run([app, "scan", "--json", evil], **run)
    assert scan.returncode == 2 and json.loads(scan.stdout)["verdict"] == "dangerous"
    good = factories.save_state_dict(tmp_path / "good.pt")
    # inspect starts the jailed worker through the frozen entry's `-I -m` form
    inspected = subprocess.run([app, "inspect", "--json", good], **run)
    assert inspected.returncode == 0, inspected.stderr[-2000:]
    doc = json.loads(inspected.stdout)
    assert {t["key"] for t in doc["tensors"]} == set(factories.small_state_dict())
    # the report's environment probe runs torch through the frozen entry's `-I -c` form, and
    # package versions come from the metadata the spec bundles
    reported = subprocess.run([app, "report", good, "-o", tmp_path / "r.json"], **run)
    assert reported.returncode == 0, reported.stderr[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    env = report["environment"]
    assert env["packages"]["torch"] not in ("not found", "") and env["cudnn"] != "not found"
    assert env["torch_cuda_runtime"] != "unknown (torch did not start)"
    assert report["files"][0]["load"]["status"] == "loaded"


def _build_icons_module():
    spec = importlib.util.spec_from_file_location("build_icons",
                                                  REPO / "packaging" / "build_icons.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_icon_pngs_match_the_svg(qapp):
    build_icons = _build_icons_module()
    for size in resources_path.ICON_SIZES:
        committed = QImage.fromData(resources_path.icon_png(size), "PNG").convertToFormat(
            QImage.Format.Format_ARGB32)
        fresh = build_icons.render(build_icons.SVG, size).convertToFormat(
            QImage.Format.Format_ARGB32)
        assert (committed.width(), committed.height()) == (size, size)
        diff = sum(abs(a - b) for a, b in zip(committed.constBits().tobytes(),
                                              fresh.constBits().tobytes(), strict=True))
        # rerun packaging/build_icons.py after editing the SVG
        assert diff / (size * size * 4) < 1.0, f"{size} px icon is stale"


def test_app_icon_holds_every_size(qapp):
    icon = resources_path.app_icon()
    assert sorted(s.width() for s in icon.availableSizes()) == list(resources_path.ICON_SIZES)
    assert b"<svg" in resources_path.icon_svg()
    with pytest.raises(ValueError, match="no 20 px icon"):
        resources_path.icon_png(20)
