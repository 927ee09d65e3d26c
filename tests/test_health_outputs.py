"""Outputs anyone can read: strict JSON (no NaN/Infinity tokens) and files that follow the umask."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import pytest

from inspector.core import strict_json
from inspector.core.atomic import atomic_write, current_umask, write_text_atomic


def test_non_finite_numbers_have_a_string_form() -> None:
    doc = {"a": math.nan, "b": [math.inf, -math.inf, 1.5, None], "c": {"d": (2, math.nan)}}
    text = strict_json.dumps(doc)
    assert json.loads(text, parse_constant=lambda t: pytest.fail(t)) == {
        "a": "nan", "b": ["inf", "-inf", 1.5, None], "c": {"d": [2, "nan"]}}
    assert {strict_json.NON_FINITE[k] for k in ("inf", "-inf")} == {math.inf, -math.inf}


def test_a_finite_document_is_written_as_the_strict_copy_would_be() -> None:
    doc = {"a": 1.5, "b": [(2, None), {"c": "nan", "d": True}], "e": -0.0}
    assert strict_json.dumps(doc, indent=1) == json.dumps(strict_json.strict(doc), indent=1)
    assert strict_json.dumps({**doc, "f": [math.nan]}) == json.dumps(
        strict_json.strict({**doc, "f": ["nan"]}))


@pytest.fixture
def umask():
    def set_mask(mask: int) -> None:
        os.umask(mask)
    previous = os.umask(0o022)
    yield set_mask
    os.umask(previous)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_outputs_follow_the_umask(tmp_path: Path, umask, mask: int, mode: int) -> None:
    umask(mask)
    assert current_umask() == mask
    write_text_atomic(tmp_path / "a.txt", "x")
    with atomic_write(tmp_path / "b.bin") as fh:
        fh.write(b"y")
    for name in ("a.txt", "b.bin"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode
