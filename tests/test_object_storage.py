"""Checkpoints in object storage: scan, verify, inspect and report of s3:// URLs against a local
S3-compatible server (moto's server mode on 127.0.0.1, started here), credentials and endpoint
from the usual environment variables, as a user sets them.

Every command runs as a user runs it (a subprocess); each one's private temp folder must be
gone when it ends, so TMPDIR points at a folder the test checks is empty.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import factories
import pytest

CLI = [sys.executable, "-m", "inspector"]
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def endpoint() -> str:
    """A local S3 server for this module's tests."""
    # moto and boto3 are imported by the fixtures that use them, not at module level: they
    # added half a second to every collection, and one test here needs neither
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the dev extra")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(endpoint, tmp_path, request):
    """A fresh bucket of this test's own, its client, and the environment a user would set."""
    boto3 = pytest.importorskip("boto3")
    client = boto3.client("s3", endpoint_url=endpoint, **{
        "aws_access_key_id": KEYS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": KEYS["AWS_SECRET_ACCESS_KEY"],
        "region_name": KEYS["AWS_DEFAULT_REGION"]})
    bucket = request.node.name.lower().replace("_", "-")[:50].strip("-")
    client.create_bucket(Bucket=bucket)
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    env = {**os.environ, **KEYS, "AWS_ENDPOINT_URL": endpoint, "TMPDIR": str(temp)}
    yield Store(client, bucket, env, temp)
    assert list(temp.iterdir()) == [], "a command left its temp files behind"


class Store:
    """One test's bucket."""

    def __init__(self, client, bucket: str, env: dict, temp: Path) -> None:
        self.client, self.bucket, self.env, self.temp = client, bucket, env, temp

    def put(self, key: str, path: Path) -> str:
        self.client.upload_file(str(path), self.bucket, key)
        return f"s3://{self.bucket}/{key}"

    def cli(self, *args: object) -> subprocess.CompletedProcess:
        return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True,
                              timeout=240, env=self.env)


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    factories.save_safetensors(folder / "model.safetensors")
    factories.save_state_dict(folder / "sub" / "optim.pt")
    (folder / "config.json").write_text('{"hidden": 8}')
    return folder


def _upload(s3: Store, folder: Path, prefix: str) -> str:
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        s3.put(f"{prefix}/{path.relative_to(folder).as_posix()}", path)
    return f"s3://{s3.bucket}/{prefix}/"


def test_scan_of_a_malicious_object_is_dangerous_and_never_runs_it(s3, tmp_path, canary):
    proof = tmp_path / "proof"
    proof.mkdir()
    sample = factories.mal_os_system(proof / "evil.pkl", proof / "ran")
    run = subprocess.run([sys.executable, "-c", "import pickle,sys; pickle.load(open("
                          "sys.argv[1], 'rb'))", str(sample)], capture_output=True, timeout=60)
    assert (proof / "ran").exists(), run.stderr  # the payload is real under pickle.load
    url = s3.put("incoming/model.pt", factories.mal_os_system(tmp_path / "evil.pt", canary))
    out = s3.cli("scan", "--json", url)
    assert out.returncode == 2, out.stderr
    res = json.loads(out.stdout)
    assert res["path"] == url and res["verdict"] == "dangerous"
    assert any(g["module"] in ("os", "posix") and g["name"] == "system" for g in res["globals"])
    assert str(s3.temp) not in out.stdout + out.stderr
    sarif = tmp_path / "scan.sarif"
    s3.cli("scan", url, "--sarif", sarif)
    log = json.loads(sarif.read_text())
    assert {loc["physicalLocation"]["artifactLocation"]["uri"]
            for result in log["runs"][0]["results"] for loc in result["locations"]} == {url}


def test_scan_of_a_prefix_lists_every_object_under_its_url(s3, tmp_path):
    url = _upload(s3, _folder(tmp_path), "run-1")
    out = s3.cli("scan", "--json", url)
    assert out.returncode == 0, out.stderr
    paths = [json.loads(line)["path"] for line in out.stdout.splitlines()]
    assert paths == [url + "config.json", url + "model.safetensors", url + "sub/optim.pt"]


def test_verify_a_prefix_ok_then_a_flipped_byte_and_a_truncation_caught(s3, tmp_path):
    folder = _folder(tmp_path)
    manifest = folder / "MANIFEST.tsv"  # sizes and hashes, uploaded with the files
    made = s3.cli("manifest", "create", folder, "-o", manifest)
    assert manifest.is_file(), made.stderr
    url = _upload(s3, folder, "release")
    ok = s3.cli("verify", "-m", manifest, url, "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc = json.loads(ok.stdout)
    assert {f["path"]: f["status"] for f in doc["files"]} == {
        url + "config.json": "ok", url + "model.safetensors": "ok", url + "sub/optim.pt": "ok"}
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-3] ^= 0x01
    flipped = tmp_path / "flipped.safetensors"
    flipped.write_bytes(bytes(data))
    s3.put("release/model.safetensors", flipped)
    s3.client.put_object(Bucket=s3.bucket, Key="release/sub/optim.pt", Body=b"short")
    bad = s3.cli("verify", "-m", manifest, url)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    lines = bad.stdout.splitlines()
    assert any(line.startswith("MISMATCH") and f"{url}model.safetensors" in line
               and hashlib.sha256(bytes(data)).hexdigest() in line for line in lines), lines
    assert any(line.startswith("SIZE DIFFERS") and f"{url}sub/optim.pt  size 5" in line
               for line in lines), lines


def test_verify_one_object_shards_and_merge(s3, tmp_path):
    folder = _folder(tmp_path)
    manifest = folder / "MANIFEST.json"
    s3.cli("manifest", "create", "--no-tensors", folder, "-o", manifest)
    url = _upload(s3, folder, "fleet")
    one = s3.cli("verify", "-m", manifest, url + "model.safetensors", "--json")
    assert one.returncode == 0, one.stdout + one.stderr
    assert [f["path"] for f in json.loads(one.stdout)["files"]] == [url + "model.safetensors"]
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    by_hand = s3.cli("verify", "--sha256", digest, url + "model.safetensors")
    assert by_hand.returncode == 0, by_hand.stdout + by_hand.stderr
    assert by_hand.stdout.startswith(f"OK             {url}model.safetensors")
    wrong = s3.cli("verify", "--sha256", "0" * 64, url + "model.safetensors")
    assert wrong.returncode == 1 and wrong.stdout.startswith("MISMATCH"), wrong.stdout
    seen = []
    for i in range(2):
        out = s3.cli("verify", "-m", manifest, url, "--json", "--shard", f"{i}/2",
                     "--results", tmp_path / f"v{i}.jsonl")
        assert out.returncode == 0, out.stdout + out.stderr
        seen += [f["path"] for f in json.loads(out.stdout)["files"]]
    assert sorted(seen) == [url + "config.json", url + "model.safetensors",
                            url + "sub/optim.pt"]
    again = s3.cli("verify", "-m", manifest, url, "--shard", "0/2", "--results",
                   tmp_path / "v0.jsonl")
    assert " kept from earlier runs" in again.stderr
    merged = s3.cli("merge", tmp_path / "v0.jsonl", tmp_path / "v1.jsonl", "-o",
                    tmp_path / "fleet.json")
    assert "3 files from 2 results files" in merged.stdout, merged.stdout + merged.stderr
    report = json.loads((tmp_path / "fleet.json").read_text())
    assert sorted(f["file"]["path"] for f in report["files"]) == sorted(seen)


def test_verify_of_objects_that_match_no_listed_file_checks_nothing_and_fails(s3, tmp_path):
    folder = _folder(tmp_path)
    manifest = folder / "MANIFEST.json"
    s3.cli("manifest", "create", "--no-tensors", folder, "-o", manifest)
    stray = tmp_path / "stray.bin"
    stray.write_bytes(b"not in the manifest")
    url = s3.put("other/stray.bin", stray)
    out = s3.cli("verify", "-m", manifest, url, "--json")
    assert out.returncode == 3, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert [f["status"] for f in doc["files"]] == ["extra"] and not doc["ok"]
    assert doc["errors"][0].startswith("nothing was checked: none of the 3 files")


def test_inspect_and_report_of_an_object_name_its_url(s3, tmp_path):
    url = s3.put("models/tiny.safetensors",
                 factories.save_safetensors(tmp_path / "tiny.safetensors"))
    shown = s3.cli("inspect", url)
    assert shown.returncode == 0, shown.stderr
    assert f"file:     {url} (" in shown.stdout
    as_json = s3.cli("inspect", "--json", url)
    assert json.loads(as_json.stdout)["path"] == url
    out = s3.cli("report", url, "-o", tmp_path / "r.json", "-q")
    assert out.returncode == 0, out.stdout + out.stderr
    report = (tmp_path / "r.json").read_text()
    assert [f["file"]["path"] for f in json.loads(report)["files"]] == [url]
    assert str(s3.temp) not in report + out.stdout + out.stderr
    assert f"ckpt-inspector report {url} -o" in report
    results = tmp_path / "r.jsonl"
    for _ in range(2):  # the second run keeps the first's result: the object did not change
        again = s3.cli("report", url, "-o", tmp_path / "r2.json", "-q", "--force",
                       "--results", results)
        assert again.returncode == 0, again.stderr
    assert "1 result kept from earlier runs" in again.stderr
    merged = s3.cli("merge", results, "-o", tmp_path / "m.json")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert [f["file"]["path"] for f in json.loads((tmp_path / "m.json").read_text())[
        "files"]] == [url]


def test_a_missing_object_or_bucket_is_one_clear_line(s3):
    for url in (f"s3://{s3.bucket}/no/such.pt", "s3://no-such-bucket-here/x.pt"):
        out = s3.cli("inspect", url)
        assert out.returncode == 3
        assert out.stderr.strip().splitlines() == [
            f"ckpt-inspector inspect: {url}: no such bucket, object or prefix; check the URL "
            "(and AWS_ENDPOINT_URL for a private server)"]
        scan = s3.cli("scan", url)
        assert scan.returncode == 3
        assert scan.stdout.startswith(f"COULD NOT BE READ {url}: no such bucket, object or prefix")


def test_an_s3_url_without_s3fs_names_the_extra_to_install(tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "s3fs.py").write_text("raise ImportError('s3fs is not installed')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    out = subprocess.run([*CLI, "inspect", "s3://bucket/model.pt"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 3
    assert out.stderr.strip() == (
        "ckpt-inspector inspect: s3://bucket/model.pt: reading s3:// needs its fsspec driver; "
        "install it with pip install 'checkpoint-inspector[s3]'")


def test_an_object_streams_in_bounded_chunks(s3, tmp_path, monkeypatch):
    from inspector.fleet import objstore

    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    body = os.urandom(3 * 1024 * 1024 + 17)
    s3.client.put_object(Bucket=s3.bucket, Key="big.bin", Body=body)
    monkeypatch.setattr(objstore, "CHUNK", 1 << 20)
    [obj] = objstore.list_objects(f"s3://{s3.bucket}/big.bin")
    assert obj.size == len(body) and obj.etag
    chunks = [len(c) for c in objstore.stream(obj)]
    assert max(chunks) <= 1 << 20 and sum(chunks) == len(body)
    assert objstore.sha256_object(obj) == hashlib.sha256(body).hexdigest()
    header = objstore.safetensors_header_bytes(objstore.list_objects(
        s3.put("h.safetensors", factories.save_safetensors(tmp_path / "h.safetensors")))[0])
    data = (tmp_path / "h.safetensors").read_bytes()
    assert header == data[:8 + int.from_bytes(data[:8], "little")]


def test_verify_of_recorded_tensors_reads_them_from_a_private_copy(s3, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    factories.save_safetensors(folder / "model.safetensors")
    manifest = folder / "MANIFEST.json"  # with every tensor's digest
    made = s3.cli("manifest", "create", folder, "-o", manifest)
    assert made.returncode == 0, made.stderr
    url = _upload(s3, folder, "tensors")
    out = s3.cli("verify", "-m", manifest, url, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert [(f["path"], f["status"]) for f in doc["files"]] == [(url + "model.safetensors",
                                                                 "ok")]
    assert doc["tensors"] and {t["status"] for t in doc["tensors"]} == {"ok"}
    assert {t["file"] for t in doc["tensors"]} == {url + "model.safetensors"}


def test_verify_against_an_index_reads_only_each_shards_header(s3, tmp_path, monkeypatch):
    import torch

    from inspector.fleet import objstore
    from inspector.integrity.manifest import read_manifest
    from inspector.integrity.verify_batch import verify_objects

    folder = tmp_path / "sharded"
    folder.mkdir()
    shards = {"model-00001-of-00002.safetensors": {"a": torch.ones(256, 256)},
              "model-00002-of-00002.safetensors": {"b": torch.zeros(128, 512), "c": torch.ones(3)}}
    for name, state in shards.items():
        factories.save_safetensors(folder / name, state)
    weight_map = {key: name for name, state in shards.items() for key in state}
    weight_map["gone"] = "model-00002-of-00002.safetensors"
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    url = _upload(s3, folder, "sharded")
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    ranges = []
    real_range = objstore.read_range

    def read_range(obj, start, end):
        ranges.append(end - start)
        return real_range(obj, start, end)

    def no_download(*args, **kwargs):
        raise AssertionError("an object was downloaded")

    monkeypatch.setattr(objstore, "read_range", read_range)
    monkeypatch.setattr(objstore, "stream", no_download)
    result = verify_objects(read_manifest(index), url, tensor_digests=no_download)
    assert {t.key: t.status for t in result.tensors} == {"a": "ok", "b": "ok", "c": "ok",
                                                         "gone": "missing"}
    assert not result.errors and [f.status for f in result.files] == ["ok", "ok"]
    assert len(ranges) == 4 and max(ranges) < 1000  # two range requests a shard, headers only


def test_a_bucket_with_odd_keys_is_scanned_whole_each_key_reported(s3, tmp_path):
    sample = factories.save_safetensors(tmp_path / "m.safetensors")
    for key in ("run/..", "run/.", "run/a", "run/a/b.safetensors", "run/ok.safetensors"):
        s3.put(key, sample)
    out = s3.cli("scan", "--json", f"s3://{s3.bucket}/run/")
    assert "Traceback" not in out.stderr, out.stderr
    paths = {json.loads(line)["path"] for line in out.stdout.splitlines()}
    assert {f"s3://{s3.bucket}/run/ok.safetensors", f"s3://{s3.bucket}/run/a"} <= paths
    assert len(paths) >= 4, out.stdout
