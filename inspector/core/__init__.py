"""Pure-Python engine: formats, pickle scan, hashing, manifests, diff, environment info.

Nothing here imports Qt or torch at module import time."""
