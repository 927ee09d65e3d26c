"""Inputs that once raised a traceback in a command (issue 22): a DCP `.metadata` whose
`_StorageInfo` state is not a dict of pairs, an HF `*.index.json` that repeats a key at any
depth, and a `diff --json` side that cannot be read. Each command answers in one line (and
`diff --json` with a JSON error object); a payload beside the odd `.metadata` is still found."""

from __future__ import annotations

import copyreg
import io
import json
import pickle
import subprocess
from pathlib import Path

import factories
import pytest
from safetensors.torch import save_file

from inspector.cli import main
from inspector.integrity.shard_index import check_files, read_index
from inspector.layout.dcp_items import NotFollowed, item_ranges
from inspector.scan.dcp_folder import scan_folder
from inspector.scan.engine import scan_file

# states a `_StorageInfo`'s BUILD may carry that are no dict of (name, value) pairs
ODD_STATES = {"list": [1, 2, 3], "triples": [("relative_path", "x", "y")],
              "unhashable": [([1], 2)], "slots": (None, {"offset": 0})}


def _odd_metadata(folder: Path, state: object) -> None:
    """Rewrite the folder's `.metadata` with every `_StorageInfo` built from `state`."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    class Odd(pickle.Pickler):
        def reducer_override(self, obj):
            if type(obj) is _StorageInfo:
                return copyreg.__newobj__, (_StorageInfo,), state
            return NotImplemented

    buf = io.BytesIO()
    Odd(buf, protocol=2).dump(factories.dcp_metadata(folder))
    (folder / ".metadata").write_bytes(buf.getvalue())


@pytest.mark.parametrize("state", sorted(ODD_STATES))
def test_an_odd_storage_info_state_is_not_followed_and_nothing_crashes(tmp_path, state):
    folder = factories.dcp_save(factories.dcp_state(), tmp_path / "ckpt")
    _odd_metadata(folder, ODD_STATES[state])
    with pytest.raises(NotFollowed):
        item_ranges((folder / ".metadata").read_bytes())
    scan = scan_folder(folder).to_json()
    assert scan["verdict"] != "error" and all(f["error"] is None for f in scan["files"]), scan
    # not followed: the data file's bytes are all read in full, so it cannot be safe
    assert scan_file(folder / factories.DCP_DATA, []).verdict != "safe"
    # DCP cannot read such a folder either (no file name, offset and length): one-line refusals
    assert main(["inspect", str(folder)]) != 0
    assert main(["convert", str(folder), "-o", str(tmp_path / "o.safetensors")]) != 0
    assert not (tmp_path / "o.safetensors").exists()
    assert main(["diff", str(folder), str(folder)]) != 0
    main(["report", str(folder), "-o", str(tmp_path / "report")])  # answers, never raises


def test_a_payload_beside_an_odd_metadata_is_dangerous_not_an_error(tmp_path, canary,
                                                                    python_exe):
    folder = factories.dcp_save(factories.dcp_state(), tmp_path / "ckpt")
    data = folder / factories.DCP_DATA
    offset = data.stat().st_size
    with open(data, "ab") as fh:
        fh.write(factories.call("os", "system", factories.touch_cmd(canary)))
    _odd_metadata(folder, ODD_STATES["list"])
    # the payload is real: torch.load of the bytes there (what DCP does with an item) runs it
    subprocess.run([python_exe, "-c", "import io, sys, torch; raw = open(sys.argv[1], 'rb')"
                    ".read(); torch.load(io.BytesIO(raw[int(sys.argv[2]):]), weights_only=False)",
                    str(data), str(offset)], capture_output=True, timeout=300)
    assert canary.exists(), "the payload did not run under torch.load"
    canary.unlink()
    assert scan_file(data).verdict == "dangerous"
    scan = scan_folder(folder).to_json()
    assert scan["verdict"] == "dangerous", scan
    assert any(g["import"] == "os.system" for g in scan["globals"])
    assert main(["inspect", str(folder)]) == 2


def _index(folder: Path, text: str) -> Path:
    save_file({"a": __import__("torch").ones(2)}, str(folder / "model-00001-of-00001.safetensors"))
    path = folder / "model.safetensors.index.json"
    path.write_text(text)
    return path


SHARD = '"model-00001-of-00001.safetensors"'
REPEATS = {
    "metadata": f'{{"metadata": {{"x": {{"k": 1}}, "x": {{"k": 2}}}}, '
                f'"weight_map": {{"a": {SHARD}}}}}',
    "deep": f'{{"metadata": {{"x": [{{"k": [1]}}, {{"k": 1, "k": {{"q": 2, "q": 3}}}}]}}, '
            f'"weight_map": {{"a": {SHARD}}}}}',
    "top": f'{{"weight_map": {{"a": 1}}, "weight_map": {{"a": {SHARD}}}}}',
    "value": f'{{"weight_map": {{"a": 7, "a": {SHARD}}}}}',
}


@pytest.mark.parametrize("where", sorted(REPEATS))
def test_an_index_that_repeats_a_key_at_any_depth_is_read_as_json_reads_it(tmp_path, where):
    path = _index(tmp_path, REPEATS[where])
    index = read_index(path)
    assert index.weight_map == json.loads(REPEATS[where])["weight_map"]
    problems = check_files(index)
    # a repeat inside weight_map is a key in two shards; elsewhere json keeps the last copy
    assert [p.code for p in problems] == (["key-in-two-shards"] if where == "value" else [])
    for argv in (["inspect", str(path)], ["diff", str(path), str(path)],
                 ["convert", str(path), "-o", str(tmp_path / "o.safetensors")],
                 ["report", str(path), "-o", str(tmp_path / f"r-{where}")]):
        main(argv)  # answers with an exit status, never a traceback


def test_diff_json_prints_an_error_object_when_a_side_cannot_be_read(tmp_path, capsys):
    good = tmp_path / "a.safetensors"
    save_file({"a": __import__("torch").ones(2)}, str(good))
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint\n")
    for other, code in ((text, "unsupported_format"), (tmp_path / "absent", "not_found")):
        capsys.readouterr()
        assert main(["diff", "--json", str(good), str(other)]) == 2
        out = json.loads(capsys.readouterr().out)
        assert out["error"]["code"] == code and out["error"]["message"], out
        assert out["b"] == str(other)
