"""A loader that builds remote code's classes runs their methods: each one counts as run at load.

transformers' from_pretrained calls methods of the config and model it builds that no fixed
list keeps up with (get_text_config, named_buffers, ...), and sentence-transformers reads
`modules.json` and runs `load` of each module class its `type` names from the folder. So every
method and function of remote code is judged (but the ones only a user's save runs), and
`modules.json` is read for the code it names. Each hostile folder runs its payload under the
real loader (offline, a throwaway process: its canary appears, and is removed) and the scan runs
nothing (no canary after it); each benign twin stays suspicious and loads. The folders are built
once per module (one benign save for both hooks folders) and never changed by a test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from remote_code_support import Loaded, LoadRun, load_each

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


def _saved_model(root: Path) -> Path:
    """A model folder whose weights the benign code saved (the hooks folders copy it)."""
    folder = root / "saved"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "hooktest", "hidden": 4,
        "auto_map": {"AutoConfig": "hook_mod.HookConfig", "AutoModel": "hook_mod.HookModel"}}))
    (folder / "hook_mod.py").write_text(_hooks_source(None))
    saved = _run(_SAVE, folder, root / "hf-save")
    assert saved.returncode == 0, saved.stderr[-2000:]
    return folder


def _hooks_folder(saved: Path, root: Path, canary: Path | None) -> Path:
    """The saved model folder with `canary`'s source put in."""
    folder = shutil.copytree(saved, root / ("hooks" if canary else "hooks_twin"))
    (folder / "hook_mod.py").write_text(_hooks_source(canary))
    return folder


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory,
           python_exe: str) -> dict[str, tuple[Path, Path, Loaded]]:
    """Each folder of the module ('hooks', 'st' and their twins), built once and never changed,
    with what the real loader did to it (offline, one forked child each): its canary was
    removed after it was seen, so each test's scan is judged by what it leaves."""
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("rt55-loaders")
    saved = _saved_model(root)
    canaries = {"hooks": root / "canary-hooks", "st": root / "canary-st"}
    folders = {"hooks": _hooks_folder(saved, root, canaries["hooks"]),
               "hooks_twin": _hooks_folder(saved, root, None),
               "st": _st_folder(root, canaries["st"]), "st_twin": _st_folder(root, None)}
    runs = {name: LoadRun("sentence-transformers" if name.startswith("st") else "AutoModel",
                          folder, canaries.get(name, root / f"unused-{name}"))
            for name, folder in folders.items()}
    results = load_each(python_exe, list(runs.values()), root / "hf-home")
    return {name: (run.folder, run.canary, result)
            for (name, run), result in zip(runs.items(), results, strict=True)}


def test_methods_from_pretrained_runs_unlisted_are_judged_and_run(loaded) -> None:
    folder, canary, result = loaded["hooks"]
    verdicts = _verdicts(folder)
    assert verdicts["hook_mod.py"] == verdicts["config.json"] == "dangerous", verdicts
    assert not canary.exists()
    assert result.exit_code == 0 and result.ran, result.output[-2000:]


def test_the_hooks_twin_stays_suspicious_and_loads(loaded) -> None:
    folder, _, result = loaded["hooks_twin"]
    verdicts = _verdicts(folder)
    assert verdicts["hook_mod.py"] == verdicts["config.json"] == "suspicious", verdicts
    assert result.exit_code == 0, result.output[-2000:]


def test_any_method_name_counts_but_a_save_does_not() -> None:
    base = "import os\n\n\nclass C:\n    def {name}(self):\n        os.system('x')\n"
    for name in ("get_text_config", "named_buffers", "a_hook_of_the_next_release"):
        assert judge_source(base.format(name=name), every_method=True)[1], name
        assert judge_source(base.format(name=name))[1] == [], name  # unpickling runs none
    assert judge_source(base.format(name="save_vocabulary"), every_method=True)[1] == []


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


def test_a_sentence_transformers_module_class_is_judged_and_runs(loaded) -> None:
    folder, canary, result = loaded["st"]
    verdicts = _verdicts(folder)
    assert verdicts["custom_st.py"] == verdicts["modules.json"] == "dangerous", verdicts
    assert not canary.exists()
    assert result.ran, result.output[-2000:]


def test_the_sentence_transformers_twin_stays_suspicious_and_loads(loaded) -> None:
    folder, _, result = loaded["st_twin"]
    verdicts = _verdicts(folder)
    assert verdicts["custom_st.py"] == verdicts["modules.json"] == "suspicious", verdicts
    assert result.exit_code == 0, result.output[-2000:]
