"""Pick the weights out of a training checkpoint: `convert --key PATH --strip-prefix P`.

A Lightning checkpoint keeps the model under `state_dict` with the LightningModule's
attribute names in front (`model.layer.weight`), beside optimizer, scheduler and loop state;
what users want from it is the model's own state dict (`layer.weight`). `select` walks a
dotted key path into the loaded object, `strip_prefixes` renames the leaves. Both are plain
Python (no torch), so the worker applies them after the jailed load and before the plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from inspector.core.errors import CodedError
from inspector.core.termtext import escape

_LISTED = 20


def select(obj: object, path: str) -> object:
    """The object at dotted `path` (mapping keys, list indexes); CodedError `key_not_found`."""
    parts = path.split(".")
    here, walked = obj, []
    while parts:
        # Keys may hold dots themselves ("model.layer.weight" in a flat state dict), so the
        # longest run of parts that is a key wins.
        for cut in range(len(parts), 0, -1):
            found, child = _child(here, ".".join(parts[:cut]))
            if found:
                here, walked, parts = child, [*walked, ".".join(parts[:cut])], parts[cut:]
                break
        else:
            raise CodedError("key_not_found", _not_found(path, here, walked))
    return here


def _child(obj: object, name: str) -> tuple[bool, object]:
    if isinstance(obj, Mapping):
        return (True, obj[name]) if name in obj else (False, None)
    if type(obj) in (list, tuple) and name.isdigit() and int(name) < len(obj):
        return True, obj[int(name)]
    return False, None


def _not_found(path: str, here: object, walked: list[str]) -> str:
    where = f"under {escape('.'.join(walked))}" if walked else "in the checkpoint"
    if isinstance(here, Mapping):
        keys = [escape(str(k)) for k in here]
        listed = ", ".join(keys[:_LISTED]) + (f" and {len(keys) - _LISTED} more"
                                              if len(keys) > _LISTED else "")
        what = f"its keys are: {listed}" if walked else f"its top-level keys are: {listed}"
    elif type(here) in (list, tuple):
        what = f"it is a list of {len(here)}"
    else:
        what = f"it is a {type(here).__name__}, not a mapping"
    return f"--key {escape(path)}: nothing {where} is called that; {what}"


def strip_prefixes(keys: Iterable[str], prefixes: Sequence[str]) -> dict[str, str]:
    """{old: new} for keys, each prefix (in the order given) removed where a key starts with
    it; CodedError `key_collision` when two keys would get one name."""
    renamed: dict[str, str] = {}
    owner: dict[str, str] = {}
    for key in keys:
        new = key
        for prefix in prefixes:
            # A key that is exactly the prefix keeps its name: it would have none left.
            if prefix and new.startswith(prefix) and new != prefix:
                new = new[len(prefix):]
        if new in owner:
            raise CodedError(
                "key_collision",
                f"--strip-prefix makes {escape(owner[new])} and {escape(key)} both "
                f"{escape(new)}; strip less, or pick a narrower --key")
        owner[new] = key
        renamed[key] = new
    return renamed


_TRAINING_STATE = ("optimizer", "optimizer_states", "lr_schedulers", "scheduler",
                   "optimizer_state")
_MODEL_KEYS = ("state_dict", "model", "model_state_dict", "module")
_WRAPPERS = ("model", "net", "module", "network")
"""The attribute a LightningModule (or DDP) conventionally keeps its network under."""


def extract_hint(keys: Iterable[str]) -> str | None:
    """The `--key`/`--strip-prefix` options that take only the model's weights out of a
    training checkpoint converted whole (tensor names as written), or None for weights alone."""
    keys = list(keys)
    tops = {k.split(".", 1)[0] for k in keys}
    model = next((m for m in _MODEL_KEYS if m in tops), None)
    if model is None or len(tops) < 2:
        return None
    if model != "state_dict" and not tops & set(_TRAINING_STATE):
        return None
    inner = {k[len(model) + 1:].split(".", 1)[0] for k in keys if k.startswith(model + ".")}
    strip = f" --strip-prefix {inner.pop()}." if len(inner) == 1 and inner <= set(_WRAPPERS) \
        else ""
    return f"--key {model}{strip}"
