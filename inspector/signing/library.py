"""The reference library's modules, imported without its package's `__init__`: that imports
the Sigstore keyless client (sigstore, tuf, boto3 and requests; about 1 s), which an offline
check with a key or a certificate never uses. The modules used here (the key and certificate
signers and verifiers, the bundle reader, hashing) import only what they need; the pin on
`model-signing` keeps their names fixed."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

PACKAGE = "model_signing"


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
    return importlib.import_module(f"{PACKAGE}.{module}")
