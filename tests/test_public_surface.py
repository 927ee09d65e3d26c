"""What training scripts import from `inspector.ledger` and `inspector.guard` is pinned: a name
leaves or joins the public surface only with this test (and the docs that show it)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

SURFACE = {
    "inspector.ledger": ["LedgerError", "SaveRecord", "latest_valid", "record_folder", "save",
                         "save_dcp", "save_folder", "save_pretrained"],
    "inspector.guard": ["EXIT_HALTED", "BitFlip", "Guard", "GuardConfig", "GuardHalt",
                        "OrderLedger", "Shadow", "audit", "intended", "track"],
}


@pytest.mark.parametrize("package", list(SURFACE))
def test_the_public_names_are_pinned_and_each_resolves(package):
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(SURFACE[package])
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"


def test_importing_the_guard_package_imports_no_torch():
    # the CLI's torch-free `order_diff` sits in this package: its face must stay torch-free
    code = "import sys, inspector.guard; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
