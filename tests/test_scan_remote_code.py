"""Hugging Face remote code: a folder whose JSON `auto_map` names a `.py` beside it. The `.py`
is reported as code (imports and calls listed, never skipped, never an error) and the JSON
names the code it makes `from_pretrained(trust_remote_code=True)` run; each hostile folder is
proven to run its payload under the real transformers loader (offline), never under the scan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

_CONFIG_PAYLOAD = """
    import os
    from transformers import PretrainedConfig

    with open(os.environ["CANARY"], "w") as fh:  # runs when the loader imports the module
        fh.write("ran")


    class EvilConfig(PretrainedConfig):
        model_type = "evil"
"""

_TOKENIZER_PAYLOAD = """
    import os
    import subprocess
    from transformers import PreTrainedTokenizer


    class EvilTokenizer(PreTrainedTokenizer):
        def __init__(self, **kwargs):
            subprocess.run(["touch", os.environ["CANARY"]], check=False)
            super().__init__(**kwargs)
"""

_RELAY_CONFIG = """
    from transformers import PretrainedConfig

    from .helpers import hidden_size


    class RelayConfig(PretrainedConfig):
        model_type = "relay"
"""

_RELAY_HELPERS = """
    import os
    import pathlib

    pathlib.Path(os.environ["CANARY"]).write_text("ran")  # runs when the config imports it
    hidden_size = 8
"""

_BENIGN_CONFIG = """
    from transformers import PretrainedConfig


    class TinyConfig(PretrainedConfig):
        model_type = "tiny"

        def __init__(self, hidden_size=8, **kwargs):
            self.hidden_size = hidden_size
            super().__init__(**kwargs)
"""


def _folder(root: Path, name: str, files: dict[str, str | dict]) -> Path:
    folder = root / name
    folder.mkdir()
    for file, content in files.items():
        text = json.dumps(content) if isinstance(content, dict) else textwrap.dedent(content)
        (folder / file).write_text(text)
    return folder


def _scan(*paths: Path) -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json",
                          *map(str, paths)], capture_output=True, text=True, timeout=600)
    records = [json.loads(line) for line in out.stdout.splitlines()]
    return {f"{Path(r['path']).parent.name}/{Path(r['path']).name}": r for r in records}


def _load(kind: str, folder: Path, canary: Path, home: Path) -> subprocess.CompletedProcess:
    """The real loader, offline, with its module cache in `home`."""
    env = {**os.environ, "CANARY": str(canary), "HF_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    code = (f"import sys, transformers; transformers.{kind}.from_pretrained(sys.argv[1], "
            "trust_remote_code=True)")
    return subprocess.run([sys.executable, "-c", code, str(folder)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_auto_map_code_is_reported_dangerous_and_runs_under_from_pretrained(
        tmp_path: Path) -> None:
    config = _folder(tmp_path, "config_map", {
        "config.json": {"model_type": "evil",
                        "auto_map": {"AutoConfig": "configuration_evil.EvilConfig"}},
        "configuration_evil.py": _CONFIG_PAYLOAD})
    tokenizer = _folder(tmp_path, "tokenizer_map", {
        "tokenizer_config.json": {"tokenizer_class": "EvilTokenizer",
                                  "auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer",
                                                                 None]}},
        "tokenization_evil.py": _TOKENIZER_PAYLOAD})
    results = _scan(config, tokenizer)
    canaries = {"AutoConfig": tmp_path / "canary-config",
                "AutoTokenizer": tmp_path / "canary-tokenizer"}
    assert not any(c.exists() for c in canaries.values())  # the scan imported nothing
    for folder, json_name, py_name, key in (
            (config, "config.json", "configuration_evil.py", "AutoConfig"),
            (tokenizer, "tokenizer_config.json", "tokenization_evil.py", "AutoTokenizer")):
        source = results[f"{folder.name}/{py_name}"]
        named = results[f"{folder.name}/{json_name}"]
        assert (source["verdict"], source["error"]) == ("dangerous", None), source
        finding = next(f for f in source["findings"] if f["code"] == "python-code")
        assert f"auto_map.{key}" in finding["message"] and "imports os" in finding["message"]
        assert named["verdict"] == "dangerous", named
        remote = next(f for f in named["findings"] if f["code"] == "remote-code")
        assert py_name in remote["message"] and "trust_remote_code" in remote["message"]
        _load(key, folder, canaries[key], tmp_path / "hf-home")
        assert canaries[key].exists(), key  # the real loader ran the payload


def test_code_the_named_module_imports_relatively_is_judged_with_it(tmp_path: Path) -> None:
    """The payload sits in a helper the named module imports from its own folder: the loader
    copies and imports that too."""
    folder = _folder(tmp_path, "relay", {
        "config.json": {"model_type": "relay",
                        "auto_map": {"AutoConfig": "configuration_relay.RelayConfig"}},
        "configuration_relay.py": _RELAY_CONFIG, "helpers.py": _RELAY_HELPERS})
    results = _scan(folder)
    canary = tmp_path / "canary-relay"
    assert not canary.exists()
    named = results["relay/config.json"]
    remote = next(f["message"] for f in named["findings"] if f["code"] == "remote-code")
    assert named["verdict"] == "dangerous" and "helpers.py" in remote, remote
    assert results["relay/helpers.py"]["verdict"] == "dangerous"
    assert results["relay/configuration_relay.py"]["verdict"] == "suspicious"
    _load("AutoConfig", folder, canary, tmp_path / "hf-home")
    assert canary.exists()  # the real loader imported the helper


def test_benign_remote_code_is_listed_suspicious_and_loads(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "tiny", {
        "config.json": {"model_type": "tiny", "hidden_size": 8,
                        "auto_map": {"AutoConfig": "configuration_tiny.TinyConfig"}},
        "configuration_tiny.py": _BENIGN_CONFIG})
    results = _scan(folder)
    assert {k: r["verdict"] for k, r in results.items()} == {
        "tiny/config.json": "suspicious", "tiny/configuration_tiny.py": "suspicious"}
    source = next(f["message"] for f in results["tiny/configuration_tiny.py"]["findings"]
                  if f["code"] == "python-code")
    assert "imports transformers.PretrainedConfig" in source and "super().__init__" in source
    loaded = _load("AutoConfig", folder, tmp_path / "unused", tmp_path / "hf-home")
    assert loaded.returncode == 0, loaded.stderr[-500:]


def test_an_auto_map_key_written_with_escapes_is_read_as_the_loader_reads_it(
        tmp_path: Path) -> None:
    """`\\u0061uto_map` is `auto_map` to json.loads: the scan parses, never greps, the key."""
    folder = _folder(tmp_path, "escaped", {"configuration_evil.py": _CONFIG_PAYLOAD})
    (folder / "config.json").write_text(
        '{"model_type": "evil", "\\u0061uto_map": {"AutoConfig": '
        '"configuration_evil.EvilConfig"}}')
    named = _scan(folder)["escaped/config.json"]
    assert named["verdict"] == "dangerous", named
    canary = tmp_path / "canary-escaped"
    assert not canary.exists()
    _load("AutoConfig", folder, canary, tmp_path / "hf-home")
    assert canary.exists()


_REACHED = {  # each runs under AutoConfig.from_pretrained, though not in __init__'s own body
    "classmethod": """
        import os
        from transformers import PretrainedConfig


        class EvilConfig(PretrainedConfig):
            model_type = "evil"

            @classmethod
            def _dict_from_json_file(cls, json_file):  # from_pretrained reads the JSON so
                open(os.environ["CANARY"], "w").close()
                return super()._dict_from_json_file(json_file)
    """,
    "self_call": """
        import os
        import pathlib
        from transformers import PretrainedConfig


        class EvilConfig(PretrainedConfig):
            model_type = "evil"

            def __init__(self, **kwargs):
                self._prepare()
                super().__init__(**kwargs)

            def _prepare(self):
                pathlib.Path(os.environ["CANARY"]).write_text("ran")
    """,
    "alias": """
        import os
        from transformers import PretrainedConfig


        class EvilConfig(PretrainedConfig):
            model_type = "evil"

            def __init__(self, **kwargs):
                run = os.system
                run("touch " + os.environ["CANARY"])
                super().__init__(**kwargs)
    """,
}
_REACHED_TWIN = """
    import os
    from transformers import PretrainedConfig


    class TinyConfig(PretrainedConfig):
        model_type = "tiny"

        def __init__(self, hidden_size=8, **kwargs):
            self.hidden_size = self._checked(hidden_size)
            join = os.path.join
            self.where = join("a", "b")
            super().__init__(**kwargs)

        def _checked(self, size):
            return int(size)

        @property
        def width(self):
            return self.hidden_size

        def dump(self, path):
            return os.path.join(path, "config.json")
"""


def test_code_that_loading_reaches_through_methods_and_names_is_dangerous(
        tmp_path: Path) -> None:
    """What from_pretrained runs beyond __init__'s body: a classmethod it calls on the class
    (`_dict_from_json_file`), a method __init__ calls through `self.`, a denied callable bound
    to a local name. Each is dangerous and runs under the real loader; a twin whose reached
    code is harmless stays suspicious and loads."""
    folders = {name: _folder(tmp_path, name, {
        "config.json": {"model_type": "evil",
                        "auto_map": {"AutoConfig": "configuration_evil.EvilConfig"}},
        "configuration_evil.py": source}) for name, source in _REACHED.items()}
    twin = _folder(tmp_path, "twin", {
        "config.json": {"model_type": "tiny",
                        "auto_map": {"AutoConfig": "configuration_tiny.TinyConfig"}},
        "configuration_tiny.py": _REACHED_TWIN})
    results = _scan(*folders.values(), twin)
    canaries = {name: tmp_path / f"canary-{name}" for name in folders}
    assert not any(c.exists() for c in canaries.values())
    for name, folder in folders.items():
        assert results[f"{name}/configuration_evil.py"]["verdict"] == "dangerous", name
        assert results[f"{name}/config.json"]["verdict"] == "dangerous", name
        _load("AutoConfig", folder, canaries[name], tmp_path / "hf-home")
        assert canaries[name].exists(), name
    assert {k: r["verdict"] for k, r in results.items() if k.startswith("twin/")} == {
        "twin/config.json": "suspicious", "twin/configuration_tiny.py": "suspicious"}
    loaded = _load("AutoConfig", twin, tmp_path / "unused", tmp_path / "hf-home")
    assert loaded.returncode == 0, loaded.stderr[-500:]
