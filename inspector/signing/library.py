"""The reference library's modules, imported without its package's `__init__`: that imports
the Sigstore keyless client (sigstore, tuf, boto3 and requests; about 1 s), which an offline
check with a key or a certificate never uses. The modules used here (the key and certificate
signers and verifiers, the bundle reader, hashing) import only what they need; the pin on
`model-signing` keeps their names fixed."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

PACKAGE = "model_signing"
MODELS = "_signing"
"""The library's signers and verifiers: each imports the Sigstore bundle's pydantic models."""
PLUGIN_LOADER = "pydantic.plugin._loader"


def reference(module: str) -> Any:
    """`model_signing.<module>`, imported as itself (the package's own names left unloaded
    unless something else imported the package whole)."""
    if PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError("the model-signing package is not installed; reinstall "
                              "checkpoint-inspector with its dependencies")
        package = types.ModuleType(PACKAGE)
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        package.__file__ = spec.origin
        sys.modules[PACKAGE] = package
    name = f"{PACKAGE}.{module}"
    if name in sys.modules or module.split(".")[0] != MODELS:
        return importlib.import_module(name)
    with _models_without_plugin_scan():
        return importlib.import_module(name)


@contextlib.contextmanager
def _models_without_plugin_scan() -> Iterator[None]:
    """The library's bundle models built without pydantic's plugin scan, which reads every
    installed distribution's entry points (about 20 ms of CPU, a tenth of the check's import)
    the first time a model is built. Only when no model has scanned yet: the scan is then left
    to the process's own first model, whose plugins load and apply as before (no environment
    switch: the ledger's checks run inside the user's training process and its children)."""
    loader = importlib.import_module(PLUGIN_LOADER)
    if getattr(loader, "_plugins", True) is not None or \
            getattr(loader, "_loading_plugins", None) is not False:
        yield  # scanned already, or a pydantic that no longer has these: built as it builds
        return
    loader._loading_plugins = True  # pydantic's own guard: get_plugins() returns none
    try:
        yield
    finally:
        loader._loading_plugins = False
