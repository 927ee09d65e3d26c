"""The names of files a model's loaders read from its folder when they are present, whatever
the files beside them: an unlisted one beside a listed file changes what the model does as
surely as unlisted weights (`extras.LoadedExtras` makes it `unchecked`).

Matched by name alone (no byte of the file is read), case-blind, since a loader on a
case-blind file system opens `Chat_Template.jinja` for `chat_template.jinja`; a hidden name
(`.x.py`) is none of them. A pattern with a
folder (`additional_chat_templates/*.jinja`) is matched from the model's folder, the one that
holds a listed file. Each kind was shown to change what transformers (5.24) loads in
`tests/test_records_rt56_loaded_names.py`; the names are those its loaders open
(`utils/hub.py`, `tokenization_utils_base.py`, the tokenizer classes' `VOCAB_FILES_NAMES`,
`processing_utils.py`, `dynamic_module_utils.py`, `generation/utils.py`'s
`load_custom_generate`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class LoaderName:
    """A name pattern a loader reads when present, and what such a file changes."""

    pattern: str
    """A glob, matched case-blind; with a '/', from the model's folder down."""
    changes: str
    """What the file changes in the loaded model, for the note."""


def _names(changes: str, *patterns: str) -> tuple[LoaderName, ...]:
    return tuple(LoaderName(p, changes) for p in patterns)


CHAT_TEMPLATE = "its chat template replaces the one tokenizer_config.json holds"
TOKENIZER = "it sets the tokenizer: its vocabulary, special or added tokens"
VOCABULARY = ("it is a tokenizer's vocabulary (each tokenizer class reads its own files, unless a "
              "tokenizer.json stands beside them)")
MODEL_CONFIG = "it sets the model's configuration or its generation settings"
PROCESSOR = "it sets the processor: its feature extractor, image, video or audio settings"
REMOTE_CODE = ("it is code: with trust_remote_code the loader imports the modules a config's "
               "auto_map names, and the modules they import, from the model's folder")
CUSTOM_GENERATE = ("it is code: with trust_remote_code, from_pretrained imports "
                   "custom_generate/generate.py (and what it imports beside it) and its generate "
                   "replaces the model's, whatever the config says; its requirements.txt decides "
                   "whether that load goes on")

LOADER_NAMES: tuple[LoaderName, ...] = (
    *_names(CHAT_TEMPLATE, "chat_template.jinja", "chat_template.json",
            "additional_chat_templates/*.jinja"),
    *_names(TOKENIZER, "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
            "added_tokens.json"),
    *_names(VOCABULARY, "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model",
            "spiece.model", "sentencepiece.bpe.model", "sentencepiece.model", "spm.model",
            "spm_char.model", "source.spm", "target.spm", "bpe.codes", "dict.txt",
            "entity_vocab.json", "emoji.json", "byte_maps.json", "normalizer.json",
            "prophetnet.tokenizer", "target_vocab.json", "vocab-src.json", "vocab-tgt.json",
            "word_shape.json", "word_pronunciation.json"),
    *_names(MODEL_CONFIG, "config.json", "generation_config.json"),
    *_names(PROCESSOR, "preprocessor_config.json", "processor_config.json",
            "video_preprocessor_config.json", "audio_tokenizer_config.json"),
    *_names(REMOTE_CODE, "*.py"),
    *_names(CUSTOM_GENERATE, "custom_generate/*.py", "custom_generate/requirements.txt"),
)
"""Every name a loader reads when present; the order is the order notes are looked up in."""


def loader_read(path: str | os.PathLike[str], folders: frozenset[str]) -> LoaderName | None:
    """The entry `path` (absolute) matches from a model folder among `folders` (absolute),
    or None."""
    for entry in LOADER_NAMES:
        wanted = entry.pattern.casefold().split("/")
        folder, names = os.fspath(path), []
        for _ in wanted:
            folder, name = os.path.split(folder)
            names.insert(0, name.casefold())
        # no loader opens a hidden name (nor can import a module named `.x`)
        hidden = any(name.startswith(".") for name in names)
        if folder in folders and not hidden and all(map(fnmatchcase, names, wanted)):
            return entry
    return None
