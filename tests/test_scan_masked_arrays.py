"""NumPy's masked-array rebuild (`numpy.ma.core._mareconstruct`) is a call benign saves make: a
masked array saved with torch.save, and a fitted GridSearchCV (its cv_results_ holds masked
arrays) saved with joblib or pickle, are suspicious as other NumPy and scikit-learn objects are,
never dangerous. What it constructs among its arguments (its subtype and baseclass) is still
judged against the call allow-list."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from factories import MARK, PROTO2, REDUCE, STOP, TUPLE, p_global, p_int, p_unicode

from inspector.scan.engine import scan_bytes, scan_file


def _dangerous(res) -> list[str]:
    return ([f.message for f in res.findings if f.severity == "dangerous"]
            + [g.import_name for g in res.globals if g.severity == "dangerous"])


def test_a_masked_array_saved_with_torch_is_suspicious(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "masked.pt"
    torch.save({"stats": np.ma.masked_invalid(np.array([1.0, np.nan]))}, path)
    res = scan_file(path)
    assert (res.verdict, _dangerous(res)) == ("suspicious", []), res.to_json()
    assert torch.load(path, weights_only=False)["stats"].mask.tolist() == [False, True]


@pytest.mark.parametrize("writer", ["joblib", "pickle"])
def test_a_fitted_grid_search_is_suspicious(tmp_path: Path, writer: str) -> None:
    pytest.importorskip("sklearn")
    joblib = pytest.importorskip("joblib")
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV
    x = np.random.RandomState(0).randn(40, 3)
    search = GridSearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, cv=2).fit(x, x[:, 0] > 0)
    assert isinstance(search.cv_results_["param_C"], np.ma.MaskedArray)
    path = tmp_path / f"search.{writer}"
    joblib.dump(search, path) if writer == "joblib" else path.write_bytes(pickle.dumps(search))
    res = scan_file(path)
    assert (res.verdict, _dangerous(res)) == ("suspicious", []), res.to_json()


def _mareconstruct(subtype: bytes, baseclass: bytes) -> bytes:
    return (PROTO2 + p_global("numpy.ma.core", "_mareconstruct") + MARK + subtype + baseclass
            + MARK + p_int(0) + TUPLE + p_unicode("b") + TUPLE + REDUCE + STOP)


@pytest.mark.parametrize("position", ["subtype", "baseclass"])
def test_what_mareconstruct_constructs_is_judged_as_a_call(position: str) -> None:
    ndarray, masked = p_global("numpy", "ndarray"), p_global("numpy.ma", "MaskedArray")
    hostile = p_global("mailbox", "mbox")
    args = (hostile, ndarray) if position == "subtype" else (masked, hostile)
    res = scan_bytes(_mareconstruct(*args))
    assert res.verdict == "dangerous", res.to_json()
    assert any("mailbox.mbox" in m and position in m for m in _dangerous(res)), _dangerous(res)
    assert scan_bytes(_mareconstruct(masked, ndarray)).verdict == "suspicious"
