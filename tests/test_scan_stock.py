"""Stock files are not alarms: a real torch.distributed.checkpoint folder, a Hugging Face model
folder and cache (config, tokenizer, README beside the weights; blobs and snapshot links) and
training checkpoints scan as they are, and the README's CI gate passes them."""

from __future__ import annotations

import json
import os
import subprocess
import warnings

from factories import save_safetensors, save_state_dict, save_training_checkpoint, small_state_dict

from inspector.scan.engine import scan_paths

HF_SIDE_FILES = {
    "config.json": json.dumps({"model_type": "gpt2", "n_layer": 2}),
    "generation_config.json": "{}",
    "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}}}),
    "tokenizer_config.json": "{}",
    "special_tokens_map.json": "{}",
    "vocab.txt": "[PAD]\n[UNK]\nhello\n",
    "merges.txt": "#version: 0.2\nh e\n",
    "README.md": "---\nlicense: mit\n---\n# Model\n",
    ".gitattributes": "*.bin filter=lfs diff=lfs merge=lfs -text\n",
    "tokenizer.model": "\x0a\x05hello\x12\x03abc",
}


def _hf_folder(folder):
    folder.mkdir(parents=True)
    for name, text in HF_SIDE_FILES.items():
        (folder / name).write_text(text)
    (folder / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    save_safetensors(folder / "model.safetensors")
    save_state_dict(folder / "pytorch_model.bin")
    return folder


def _gate(python_exe, *paths):
    return subprocess.run([python_exe, "-m", "inspector", "scan", "--json", "--fail-on",
                           "suspicious", *map(str, paths)], capture_output=True, text=True,
                          timeout=120, check=False)


def test_dcp_folder_is_safe(tmp_path, python_exe):
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(small_state_dict(), checkpoint_id=str(tmp_path / "dcp"))
    results = {os.path.basename(r.path): r for r in scan_paths([tmp_path / "dcp"])}
    assert set(results) == {".metadata", "__0_0.distcp"}
    meta = results[".metadata"]
    assert meta.verdict == "safe", meta.to_json()
    assert {g.module for g in meta.globals} >= {"torch.distributed.checkpoint.metadata"}
    assert meta.weights_only_ok is False  # DCP reads it with plain pickle; torch.load refuses
    data = results["__0_0.distcp"]
    assert (data.format, data.verdict) == ("distcp", "safe"), data.to_json()
    assert len({f.code for f in data.findings} - {"zip-concatenated"}) == 0
    assert _gate(python_exe, tmp_path / "dcp").returncode == 0


def test_hf_folder_side_files_are_skipped(tmp_path, python_exe):
    folder = _hf_folder(tmp_path / "gpt2")
    results = {os.path.basename(r.path): r.verdict for r in scan_paths([folder])}
    assert results.pop("model.safetensors") == "safe"
    assert results.pop("pytorch_model.bin") == "safe"
    assert set(results.values()) == {"skipped"}, results
    assert set(results) == set(HF_SIDE_FILES) | {"logo.png"}
    proc = _gate(python_exe, folder)
    assert proc.returncode == 0, proc.stdout
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == len(HF_SIDE_FILES) + 3


def test_a_pickle_named_like_a_side_file_is_still_scanned(tmp_path, canary, python_exe):
    from factories import call, touch_cmd

    folder = _hf_folder(tmp_path / "m")
    (folder / "config.json").write_bytes(call("os", "system", touch_cmd(canary)))
    results = {os.path.basename(r.path): r.verdict for r in scan_paths([folder])}
    assert results["config.json"] == "dangerous"
    assert _gate(python_exe, folder).returncode == 2


def test_hf_cache_blobs_and_snapshot_links_count_once(tmp_path, python_exe):
    repo = tmp_path / "hub" / "models--org--name"
    blobs = repo / "blobs"
    blobs.mkdir(parents=True)
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    files = {"model.safetensors": save_safetensors(tmp_path / "m.safetensors").read_bytes(),
             "config.json": b'{"a": 1}'}
    for i, (name, data) in enumerate(files.items()):
        (blobs / f"{i:064x}").write_bytes(data)
        os.symlink(f"../../blobs/{i:064x}", snap / name)
    results = list(scan_paths([tmp_path / "hub"]))
    names = sorted(os.path.relpath(r.path, repo) for r in results)
    assert names == ["refs/main", "snapshots/abc123/config.json",
                     "snapshots/abc123/model.safetensors"]
    verdicts = {os.path.basename(r.path): r.verdict for r in results}
    assert verdicts == {"main": "skipped", "config.json": "skipped", "model.safetensors": "safe"}
    assert _gate(python_exe, tmp_path / "hub").returncode == 0


def test_training_checkpoint_is_not_dangerous(tmp_path):
    path = save_training_checkpoint(tmp_path / "last.ckpt")
    (res,) = scan_paths([path])
    assert res.verdict == "safe" and res.weights_only_ok


def test_a_broken_checkpoint_in_a_folder_stays_an_error(tmp_path, python_exe):
    (tmp_path / "m").mkdir()
    good = save_state_dict(tmp_path / "m" / "good.pt")
    (tmp_path / "m" / "truncated.pt").write_bytes(good.read_bytes()[:300])
    (tmp_path / "m" / "bad.safetensors").write_bytes(b"\x0a" + bytes(7) + b"{not json}")
    verdicts = {os.path.basename(r.path): r.verdict for r in scan_paths([tmp_path / "m"])}
    assert verdicts["good.pt"] == "safe"
    assert verdicts["truncated.pt"] != "skipped" and verdicts["bad.safetensors"] == "error"
    assert _gate(python_exe, tmp_path / "m").returncode != 0
