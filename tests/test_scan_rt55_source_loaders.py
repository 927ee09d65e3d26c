"""A loader that builds remote code's classes runs their methods: each one counts as run at load.

transformers' from_pretrained calls methods of the config and model it builds that no fixed
list keeps up with (get_text_config, named_buffers, ...), and sentence-transformers reads
`modules.json` and runs `load` of each module class its `type` names from the folder. So every
method and function of remote code is judged (but the ones only a user's save runs), and
`modules.json` is read for the code it names. Each hostile folder runs its payload under the
real loader (offline, a throwaway process: its canary appears) after the scan ran nothing; each
benign twin stays suspicious and loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inspector.formats.archives.source_judge import judge_source

_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _run(script: str, folder: Path, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, **_OFFLINE, "HF_HOME": str(home)}
    return subprocess.run([sys.executable, "-c", script, str(folder)], env=env,
                          capture_output=True, text=True, timeout=600)


def _verdicts(folder: Path) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", str(folder)],
                         capture_output=True, text=True, timeout=600)
    return {Path(r["path"]).name: r["verdict"] for r in map(json.loads, out.stdout.splitlines())}


def _hooks_source(canary: Path | None) -> str:
    touch = f"        os.system('touch {canary}')\n" if canary else ""
    return ("import os\nimport torch\nfrom transformers import PretrainedConfig, "
            "PreTrainedModel\n\n\nclass HookConfig(PretrainedConfig):\n"
            "    model_type = 'hooktest'\n\n    def __init__(self, hidden=4, **kw):\n"
            "        self.hidden = hidden\n        super().__init__(**kw)\n\n"
            "    def get_text_config(self, *args, **kwargs):\n" + touch +
            "        return super().get_text_config(*args, **kwargs)\n\n\n"
            "class HookModel(PreTrainedModel):\n    config_class = HookConfig\n\n"
            "    def __init__(self, config):\n        super().__init__(config)\n"
            "        self.lin = torch.nn.Linear(config.hidden, config.hidden)\n"
            "        self.post_init()\n\n    def named_buffers(self, *args, **kwargs):\n" + touch +
            "        return super().named_buffers(*args, **kwargs)\n\n"
            "    def save_pretrained(self, *args, **kwargs):\n"
            "        with open(os.path.join(args[0], 'saved.txt'), 'w') as fh:\n"
            "            fh.write('x')\n        return super().save_pretrained(*args, **kwargs)\n")


_SAVE = ("import sys\nfrom transformers import AutoConfig, AutoModel\n"
         "c = AutoConfig.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
         "AutoModel.from_config(c, trust_remote_code=True).save_pretrained(sys.argv[1])\n")
_LOAD_MODEL = ("import sys\nfrom transformers import AutoModel\n"
               "AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)\n")


def _hooks_folder(root: Path, canary: Path | None) -> Path:
    """A model folder whose weights the benign code saved, then `canary`'s source put in."""
    folder = root / ("hooks" if canary else "hooks_twin")
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "hooktest", "hidden": 4,
        "auto_map": {"AutoConfig": "hook_mod.HookConfig", "AutoModel": "hook_mod.HookModel"}}))
    (folder / "hook_mod.py").write_text(_hooks_source(None))
    saved = _run(_SAVE, folder, root / "hf-save")
    assert saved.returncode == 0, saved.stderr[-2000:]
    (folder / "hook_mod.py").write_text(_hooks_source(canary))
    return folder


def test_methods_from_pretrained_runs_unlisted_are_judged_and_run(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    canary = tmp_path / "canary"
    folder = _hooks_folder(tmp_path, canary)
    verdicts = _verdicts(folder)
    assert verdicts["hook_mod.py"] == verdicts["config.json"] == "dangerous", verdicts
    assert not canary.exists()
    loaded = _run(_LOAD_MODEL, folder, tmp_path / "hf-home")
    assert loaded.returncode == 0 and canary.exists(), loaded.stderr[-2000:]


def test_the_hooks_twin_stays_suspicious_and_loads(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    folder = _hooks_folder(tmp_path, None)
    verdicts = _verdicts(folder)
    assert verdicts["hook_mod.py"] == verdicts["config.json"] == "suspicious", verdicts
    loaded = _run(_LOAD_MODEL, folder, tmp_path / "hf-home")
    assert loaded.returncode == 0, loaded.stderr[-2000:]


def test_any_method_name_counts_but_a_save_does_not() -> None:
    base = "import os\n\n\nclass C:\n    def {name}(self):\n        os.system('x')\n"
    for name in ("get_text_config", "named_buffers", "a_hook_of_the_next_release"):
        assert judge_source(base.format(name=name), every_method=True)[1], name
        assert judge_source(base.format(name=name))[1] == [], name  # unpickling runs none
    assert judge_source(base.format(name="save_vocabulary"), every_method=True)[1] == []


# sentence-transformers resolves a module `type` outside its package with transformers'
# get_class_from_dynamic_module and calls the class's `load` (sentence_transformers/util/misc.py
# import_module_class; base/model.py _load_module_class_from_ref): run the library where it is
# installed, else that documented call
_ST_LOAD = """
import sys
folder = sys.argv[1]
try:
    from sentence_transformers import SentenceTransformer
except ImportError:
    from transformers.dynamic_module_utils import get_class_from_dynamic_module
    get_class_from_dynamic_module("custom_st.Custom", folder).load(folder)
else:
    SentenceTransformer(folder, trust_remote_code=True)
"""


def _st_folder(root: Path, canary: Path | None) -> Path:
    folder = root / ("st" if canary else "st_twin")
    folder.mkdir()
    touch = f"        os.system('touch {canary}')\n" if canary else ""
    (folder / "custom_st.py").write_text(
        "import os\nimport torch\n\n\nclass Custom(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(2, 2)\n\n    def forward(self, features):\n"
        "        return features\n\n    @classmethod\n"
        "    def load(cls, model_name_or_path, **kwargs):\n" + touch + "        return cls()\n")
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "custom_st.Custom"}]))
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"model_type": "SentenceTransformer"}))
    return folder


def test_a_sentence_transformers_module_class_is_judged_and_runs(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    canary = tmp_path / "canary"
    folder = _st_folder(tmp_path, canary)
    verdicts = _verdicts(folder)
    assert verdicts["custom_st.py"] == verdicts["modules.json"] == "dangerous", verdicts
    assert not canary.exists()
    loaded = _run(_ST_LOAD, folder, tmp_path / "hf-home")
    assert canary.exists(), loaded.stderr[-2000:]


def test_the_sentence_transformers_twin_stays_suspicious_and_loads(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    folder = _st_folder(tmp_path, None)
    verdicts = _verdicts(folder)
    assert verdicts["custom_st.py"] == verdicts["modules.json"] == "suspicious", verdicts
    loaded = _run(_ST_LOAD, folder, tmp_path / "hf-home")
    assert loaded.returncode == 0, loaded.stderr[-2000:]
