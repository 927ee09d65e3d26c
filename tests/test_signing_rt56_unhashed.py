"""A signature that holds over a folder the reference library cannot hash as it was signed
(a statement by shards or BLAKE2, which the library hashes: a folder on the way replaced by a
link where the signer allowed none, or a signed file replaced by a FIFO) was 'intact' with no
file checked: the app's badge showed 'Signed · intact' and verify's JSON said intact, while
the reference library refuses to hash the folder. Now 'changed', with the library's reason.
Each case beside its twin (the same folder unchanged: intact, and the library hashes it as signed;
its verifier cannot check shard statements at all in 1.1.1, so its hashing is the judge)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from signing_keys import write_key

from inspector.core.vocabulary import SignatureState
from inspector.signing.folder import check_folder

SIGN_BY_SHARDS = """
import sys
from model_signing import hashing, signing
config = signing.Config().use_elliptic_key_signer(private_key=sys.argv[1])
config.set_hashing_config(hashing.Config().use_shard_serialization(shard_size=512))
config.sign(sys.argv[2], sys.argv[3])
"""

HASH_AS_SIGNED = """
import sys
from pathlib import Path
from model_signing import hashing
hashing.Config().use_shard_serialization(shard_size=512).hash(Path(sys.argv[1]))
"""


def _reference(script: str, *args: Path) -> int:
    return subprocess.run([sys.executable, "-c", script, *map(str, args)],
                          capture_output=True, text=True, check=False).returncode


@pytest.mark.parametrize("harm", ["linked folder", "fifo"])
def test_a_folder_the_library_cannot_hash_as_signed_is_not_intact(tmp_path, harm) -> None:
    (tmp_path / "keys").mkdir()
    private, public = write_key(tmp_path / "keys", "signer")
    folder, signature = tmp_path / "model", tmp_path / "model.sig"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 8)
    (folder / "notes.txt").write_text("signed too\n")
    assert _reference(SIGN_BY_SHARDS, private, folder, signature) == 0

    assert _reference(HASH_AS_SIGNED, folder) == 0  # the library hashes it as signed
    twin = check_folder(folder, signature, public)
    assert twin.verdict.state == SignatureState.INTACT

    if harm == "linked folder":
        (folder / "sub").rename(folder / "real")
        (folder / "sub").symlink_to("real")
    else:
        (folder / "notes.txt").unlink()
        os.mkfifo(folder / "notes.txt")
    assert _reference(HASH_AS_SIGNED, folder) != 0  # and now refuses to
    checked = check_folder(folder, signature, public)
    assert checked.verdict.state == SignatureState.CHANGED
    assert "cannot be hashed as it was signed" in (checked.verdict.reason or "")
