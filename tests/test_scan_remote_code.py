"""Hugging Face remote code: a folder whose JSON `auto_map` names a `.py` beside it. The `.py`
is reported as code (imports and calls listed, never skipped, never an error) and the JSON
names the code it makes `from_pretrained(trust_remote_code=True)` run; each hostile folder is
proven to run its payload under the real transformers loader (offline), never under the scan.
The folders are built once per module, never changed by a test, and loaded each in a child
forked from one interpreter that imported transformers; each canary is removed once seen."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from remote_code_support import Loaded, LoadRun, load_each, scan_records

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


_EVIL = {"model_type": "evil", "auto_map": {"AutoConfig": "configuration_evil.EvilConfig"}}
_TINY = {"model_type": "tiny", "auto_map": {"AutoConfig": "configuration_tiny.TinyConfig"}}
FOLDERS: dict[str, tuple[str, dict[str, str | dict]]] = {
    "config_map": ("AutoConfig", {"config.json": _EVIL, "configuration_evil.py": _CONFIG_PAYLOAD}),
    "tokenizer_map": ("AutoTokenizer", {
        "tokenizer_config.json": {"tokenizer_class": "EvilTokenizer",
                                  "auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer",
                                                                 None]}},
        "tokenization_evil.py": _TOKENIZER_PAYLOAD}),
    "relay": ("AutoConfig", {
        "config.json": {"model_type": "relay",
                        "auto_map": {"AutoConfig": "configuration_relay.RelayConfig"}},
        "configuration_relay.py": _RELAY_CONFIG, "helpers.py": _RELAY_HELPERS}),
    "tiny": ("AutoConfig", {"config.json": {**_TINY, "hidden_size": 8},
                            "configuration_tiny.py": _BENIGN_CONFIG}),
    # `\u0061uto_map` is `auto_map` to json.loads: the scan parses, never greps, the key
    "escaped": ("AutoConfig", {"configuration_evil.py": _CONFIG_PAYLOAD, "config.json": (
        '{"model_type": "evil", "\\u0061uto_map": {"AutoConfig": '
        '"configuration_evil.EvilConfig"}}')}),
    **{name: ("AutoConfig", {"config.json": _EVIL, "configuration_evil.py": source})
       for name, source in _REACHED.items()},
    "twin": ("AutoConfig", {"config.json": _TINY, "configuration_tiny.py": _REACHED_TWIN}),
}
"""Each folder of the module: the Auto class that loads it and its files."""


def _folder(root: Path, name: str, files: dict[str, str | dict]) -> Path:
    folder = root / name
    folder.mkdir()
    for file, content in files.items():
        text = json.dumps(content) if isinstance(content, dict) else textwrap.dedent(content)
        (folder / file).write_text(text)
    return folder


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory,
           python_exe: str) -> dict[str, tuple[Path, Path, Loaded]]:
    """Each of FOLDERS built once, with what the real loader did to it (its canary was removed
    after it was seen, so each test's scan is judged by what it leaves)."""
    root = tmp_path_factory.mktemp("remote-code")
    runs = {name: LoadRun(kind, _folder(root, name, files), root / f"canary-{name}")
            for name, (kind, files) in FOLDERS.items()}
    results = load_each(python_exe, list(runs.values()), root / "hf-home")
    return {name: (run.folder, run.canary, result)
            for (name, run), result in zip(runs.items(), results, strict=True)}


def test_auto_map_code_is_reported_dangerous_and_runs_under_from_pretrained(loaded) -> None:
    config, tokenizer = loaded["config_map"], loaded["tokenizer_map"]
    results = scan_records([config[0], tokenizer[0]])
    assert not config[1].exists() and not tokenizer[1].exists()  # the scan imported nothing
    for (folder, _, load), json_name, py_name, key in (
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
        assert load.ran, (key, load.output[-2000:])  # the real loader ran the payload


def test_code_the_named_module_imports_relatively_is_judged_with_it(loaded) -> None:
    """The payload sits in a helper the named module imports from its own folder: the loader
    copies and imports that too."""
    folder, canary, load = loaded["relay"]
    results = scan_records([folder])
    assert not canary.exists()
    named = results["relay/config.json"]
    remote = next(f["message"] for f in named["findings"] if f["code"] == "remote-code")
    assert named["verdict"] == "dangerous" and "helpers.py" in remote, remote
    assert results["relay/helpers.py"]["verdict"] == "dangerous"
    assert results["relay/configuration_relay.py"]["verdict"] == "suspicious"
    assert load.ran, load.output[-2000:]  # the real loader imported the helper


def test_benign_remote_code_is_listed_suspicious_and_loads(loaded) -> None:
    folder, _, load = loaded["tiny"]
    results = scan_records([folder])
    assert {k: r["verdict"] for k, r in results.items()} == {
        "tiny/config.json": "suspicious", "tiny/configuration_tiny.py": "suspicious"}
    source = next(f["message"] for f in results["tiny/configuration_tiny.py"]["findings"]
                  if f["code"] == "python-code")
    assert "imports transformers.PretrainedConfig" in source and "super().__init__" in source
    assert load.exit_code == 0, load.output[-500:]


def test_an_auto_map_key_written_with_escapes_is_read_as_the_loader_reads_it(loaded) -> None:
    """`\\u0061uto_map` is `auto_map` to json.loads: the scan parses, never greps, the key."""
    folder, canary, load = loaded["escaped"]
    named = scan_records([folder])["escaped/config.json"]
    assert named["verdict"] == "dangerous", named
    assert not canary.exists()
    assert load.ran, load.output[-2000:]


def test_code_that_loading_reaches_through_methods_and_names_is_dangerous(loaded) -> None:
    """What from_pretrained runs beyond __init__'s body: a classmethod it calls on the class
    (`_dict_from_json_file`), a method __init__ calls through `self.`, a denied callable bound
    to a local name. Each is dangerous and runs under the real loader; a twin whose reached
    code is harmless stays suspicious and loads."""
    results = scan_records([loaded[name][0] for name in (*_REACHED, "twin")])
    assert not any(loaded[name][1].exists() for name in _REACHED)
    for name in _REACHED:
        assert results[f"{name}/configuration_evil.py"]["verdict"] == "dangerous", name
        assert results[f"{name}/config.json"]["verdict"] == "dangerous", name
        assert loaded[name][2].ran, (name, loaded[name][2].output[-2000:])
    assert {k: r["verdict"] for k, r in results.items() if k.startswith("twin/")} == {
        "twin/config.json": "suspicious", "twin/configuration_tiny.py": "suspicious"}
    assert loaded["twin"][2].exit_code == 0, loaded["twin"][2].output[-500:]
