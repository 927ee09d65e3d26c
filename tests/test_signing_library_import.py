"""The reference library's import, which is nearly all that `verify --public-key` adds to
`verify -m`: its Sigstore bundle models are built without pydantic's plugin scan (every
installed distribution's entry points read, about 20 ms of CPU), while a pydantic plugin the
user installed still applies to the user's own models built afterwards (the ledger's checks
run inside the user's training process). Each in a fresh interpreter: pydantic's plugin state
is the process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PLUGIN = '''
SEEN = []

class _Plugin:
    def new_schema_validator(self, schema, schema_type, schema_type_path, schema_kind,
                             config, plugin_settings):
        SEEN.append(schema_type_path.name)
        return None, None, None

plugin = _Plugin()
'''

PROBE = '''
import json, sys
from inspector.signing.library import reference
reference(sys.argv[1])
import pydantic.plugin._loader as loader
scanned_by_library = loader._plugins is not None
import pydantic
class UserModel(pydantic.BaseModel):
    x: int
UserModel(x=1)
seen = sys.modules["fake_pydantic_plugin"].SEEN if "fake_pydantic_plugin" in sys.modules else []
print(json.dumps({"scanned_by_library": scanned_by_library, "seen": seen,
                  "library_models_seen": [n for n in seen if n != "UserModel"]}))
'''


def _plugin_on_path(root: Path) -> Path:
    """A distribution on `root` declaring a pydantic plugin, as a user's install would."""
    (root / "fake_pydantic_plugin.py").write_text(PLUGIN)
    info = root / "fake_pydantic_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-pydantic-plugin\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nfake = fake_pydantic_plugin:plugin\n")
    return root


def _probe(module: str, path: Path | None = None) -> dict:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    done = subprocess.run([sys.executable, "-c", PROBE, module], capture_output=True,
                          text=True, env=env, check=True)
    return json.loads(done.stdout)


def test_the_key_verifier_is_imported_without_pydantics_plugin_scan() -> None:
    probe = _probe("_signing.sign_ec_key")
    assert probe["scanned_by_library"] is False


def test_the_bundle_reader_and_certificate_verifier_skip_the_scan_too() -> None:
    assert _probe("_signing.sign_sigstore_pb")["scanned_by_library"] is False
    assert _probe("_signing.sign_certificate")["scanned_by_library"] is False


def test_a_users_pydantic_plugin_still_applies_to_the_users_models(tmp_path: Path) -> None:
    probe = _probe("_signing.sign_ec_key", _plugin_on_path(tmp_path))
    assert probe["scanned_by_library"] is False
    assert probe["seen"] == ["UserModel"]


def test_the_plugin_twin_without_the_library_sees_the_users_model(tmp_path: Path) -> None:
    """The probe's plugin is real: a process that never imports the library loads it too."""
    env = dict(os.environ, PYTHONPATH=str(_plugin_on_path(tmp_path)))
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    script = ("import sys, pydantic\nclass UserModel(pydantic.BaseModel):\n    x: int\n"
              "print(sys.modules['fake_pydantic_plugin'].SEEN)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, check=True)
    assert done.stdout.strip() == "['UserModel']"
