"""The scene a halted step leaves: everything needed to look at it, re-run it, or resume from it.

A scene is a folder `RUN_DIR/scenes/step-NNNNNNNN/` written whole or not at all (built in a
hidden temp folder beside it, every file fsync'd, then renamed):

- `model.pt`, `optimizer.pt`: the state dicts as they were when the alarm rose (before the
  optimizer step, so the model is the one that took the step);
- `rng.pt` (torch's CPU and CUDA generator states) and the Python and NumPy states in
  `scene.json`;
- `scene.json`: the step, the alarm, the sample ids and input hash of the batch, the ids of
  the samples to blame on a non-finite alarm (`bad_samples`), the worst
  parameters' gradient norms, the data-loader state, the guard's rule state, the model's
  fingerprint (names, shapes, dtypes), and the SHA-256 of every other file.

Loading checks all of that before it touches the model: a scene with a damaged file, or one
from another model, is refused with a one-line `CodedError` and the caller's model, optimizer and
run folder are left as they were. Tensors load with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from inspector.core import strict_json
from inspector.core.atomic import fsync_path
from inspector.core.errors import CodedError
from inspector.integrity.hashing import sha256_file
from inspector.integrity.regular_file import open_regular, read_regular

SCENE_FORMAT = "ckpt-inspector-guard-scene"
SCENE_VERSION = 1
SCENE_JSON = "scene.json"
SCENE_JSON_BYTES = 64 << 20
"""The most a scene record may hold (a batch's ids and states; /dev/zero in its place is read
no further)."""


@dataclass
class Scene:
    """What `scene.json` holds, plus the folder it was read from."""

    step: int
    alarms: list[dict]
    model_fingerprint: str
    sample_ids: list | None = None
    bad_samples: list = field(default_factory=list)
    """The ids of the batch's samples found non-finite (their inputs, or their own loss)."""
    input_hash: str | None = None
    worst_grads: list[tuple[str, float]] = field(default_factory=list)
    nonfinite_params: list[str] = field(default_factory=list)
    data_state: Any = None
    rules_state: dict = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    python_rng: Any = None
    numpy_rng: Any = None
    """The RNG states the sealed record holds (`load_scene` restores them; `write_scene`
    takes them from the caller's `rng`)."""
    folder: Path | None = None


def model_fingerprint(model: nn.Module) -> str:
    """SHA-256 of the state dict's names, shapes and dtypes: which model, not its values."""
    lines = [f"{k}:{tuple(v.shape)}:{v.dtype}" for k, v in model.state_dict().items()
             if isinstance(v, torch.Tensor)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def batch_hash(batch: Any) -> str | None:
    """SHA-256 over every tensor in a batch (nested lists, tuples, dicts); None if none."""
    tensors = list(iter_tensors(batch))
    if not tensors:
        return None
    digest = hashlib.sha256()
    for t in tensors:
        digest.update(f"{tuple(t.shape)}:{t.dtype};".encode())
        digest.update(t.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def rng_states() -> dict[str, Any]:
    """Every random generator's state: torch (CPU, each CUDA device), Python, NumPy."""
    out: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    out["python"] = _python_state(random.getstate())
    np_state = _numpy_state()
    if np_state is not None:
        out["numpy"] = np_state
    return out


def restore_rng(states: dict[str, Any]) -> None:
    """Put back what `rng_states` took."""
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    if "numpy" in states:
        import numpy as np

        kind, keys, pos, has_gauss, cached = states["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def write_scene(run_dir: Path, scene: Scene, model: nn.Module,
                optimizer: torch.optim.Optimizer | None, rng: dict[str, Any]) -> Path:
    """Write the scene folder whole (temp folder, fsync, rename); its path. Never overwrites."""
    parent = Path(run_dir) / "scenes"
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".step-{scene.step:08d}.", suffix=".tmp", dir=parent))
    try:
        tensors = {"torch": rng["torch"], **({"cuda": rng["cuda"]} if "cuda" in rng else {})}
        _save(tmp / "model.pt", model.state_dict())
        _save(tmp / "rng.pt", tensors)
        if optimizer is not None:
            _save(tmp / "optimizer.pt", optimizer.state_dict())
        scene.files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir())}
        body = {"format": SCENE_FORMAT, "version": SCENE_VERSION,
                **{k: v for k, v in scene.__dict__.items() if k != "folder"},
                "python_rng": rng["python"], "numpy_rng": rng.get("numpy")}
        body["seal"] = _seal(body)
        (tmp / SCENE_JSON).write_text(strict_json.dumps(body, indent=1))
        fsync_path(tmp / SCENE_JSON)
        target = _free_name(parent, f"step-{scene.step:08d}")
        os.rename(tmp, target)
        fsync_path(parent)
    except BaseException:
        for p in tmp.iterdir():
            p.unlink()
        tmp.rmdir()
        raise
    scene.folder = target
    return target


def read_scene(folder: str | os.PathLike[str], hashed_later: frozenset[str] = frozenset()
               ) -> Scene:
    """Read and check a scene folder (format, every file's hash but those named in
    `hashed_later`, which their reader hashes as it loads them); CodedError if it does not hold."""
    folder = Path(folder)
    try:
        body = json.loads(read_regular(folder / SCENE_JSON, "scene record", SCENE_JSON_BYTES))
    except FileNotFoundError:
        raise CodedError("scene-missing", f"{folder} holds no {SCENE_JSON}: not a guard scene; "
                         "pass the step-NNNNNNNN folder under RUN_DIR/scenes") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CodedError("scene-damaged", f"{folder / SCENE_JSON} cannot be read ({exc}); the "
                         "scene is damaged, resume from a checkpoint instead") from None
    if not isinstance(body, dict) or body.get("format") != SCENE_FORMAT:
        raise CodedError("scene-damaged", f"{folder / SCENE_JSON} is not a guard scene record")
    if body.pop("seal", None) != _seal(body):
        raise CodedError("scene-damaged", f"{folder / SCENE_JSON} was changed after it was "
                         "written (its seal differs); resume from a checkpoint instead")
    if body.get("version") != SCENE_VERSION:
        raise CodedError("scene-version", f"scene version {body.get('version')} is not "
                         f"{SCENE_VERSION}; open it with the ckpt-inspector that wrote it")
    files = body.get("files") or {}
    for name, digest in files.items():
        path = folder / name
        if name not in hashed_later and (not path.is_file() or sha256_file(path) != digest):
            raise _changed(path)
    try:
        scene = Scene(**{k: body[k] for k in Scene.__dataclass_fields__ if k in body})
    except TypeError as exc:
        raise CodedError("scene-damaged", f"{folder / SCENE_JSON} lacks a field ({exc})") from None
    scene.folder = folder
    return scene


_LOADED = frozenset({"model.pt", "optimizer.pt", "rng.pt"})


def load_scene(folder: str | os.PathLike[str], model: nn.Module,
               optimizer: torch.optim.Optimizer | None = None, restore_rngs: bool = True) -> Scene:
    """Check a scene, then load its model (and optimizer, RNG states) into the caller's objects."""
    scene = read_scene(folder, hashed_later=_LOADED)
    if scene.model_fingerprint != model_fingerprint(model):
        raise CodedError("scene-other-model", f"{scene.folder} was written for another model "
                         "(names, shapes or dtypes differ); build the model the run trained")
    if optimizer is not None and "optimizer.pt" not in scene.files:
        raise CodedError("scene-no-optimizer", f"{scene.folder} holds no optimizer state; "
                         "load it without an optimizer")
    state = _load_checked(scene, "model.pt")
    opt_state = _load_checked(scene, "optimizer.pt") if optimizer is not None else None
    tensors = _load_checked(scene, "rng.pt")
    model.load_state_dict(state)
    if optimizer is not None:
        optimizer.load_state_dict(opt_state)
    if restore_rngs:  # the states of the record read_scene checked, not a second reading
        rng = {**tensors, "python": scene.python_rng}
        if scene.numpy_rng is not None:
            rng["numpy"] = scene.numpy_rng
        restore_rng(rng)
    return scene


def _load_checked(scene: Scene, name: str) -> Any:
    """`torch.load` (weights_only) of the bytes whose SHA-256 the record names, hashed and
    loaded from one open file: a file replaced after the check is never the one loaded."""
    assert scene.folder is not None
    path = scene.folder / name
    try:
        handle, _ = open_regular(path, "a scene's file must be a regular file")
    except OSError:
        raise _changed(path) from None
    with handle:
        if name not in scene.files or hashlib.file_digest(handle, "sha256").hexdigest() != \
                scene.files[name]:
            raise _changed(path)
        handle.seek(0)
        return torch.load(handle, weights_only=True, map_location="cpu")


def _changed(path: Path) -> CodedError:
    return CodedError("scene-damaged", f"{path} is missing or changed since the scene was "
                      "written (SHA-256 differs); resume from a checkpoint instead")


def _seal(body: dict) -> str:
    """SHA-256 of the record without its seal, so an edit of scene.json itself is caught."""
    return hashlib.sha256(strict_json.dumps(body, sort_keys=True).encode()).hexdigest()


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in nested lists, tuples and dicts, in order."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from iter_tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from iter_tensors(value)


def _python_state(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _numpy_state() -> list | None:
    try:
        import numpy as np
    except ImportError:
        return None
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)]


def _save(path: Path, obj: Any) -> None:
    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())



def _free_name(parent: Path, name: str) -> Path:
    """`name`, or `name-2`, `name-3`, ... when a scene of that step is already there."""
    target, n = parent / name, 1
    while target.exists():
        n += 1
        target = parent / f"{name}-{n}"
    return target
