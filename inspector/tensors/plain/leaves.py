"""The record of a checkpoint's non-tensor leaf, torch-free (the worker's readers with and
without torch both make it)."""

from __future__ import annotations

REPR_LIMIT = 200


def describe_object(key: str, value: object) -> dict:
    """The `object` record of a non-tensor leaf: key, Python type and a bounded repr."""
    text = repr(value)
    if len(text) > REPR_LIMIT:
        text = text[: REPR_LIMIT - 3] + "..."
    kind = type(value)
    return {"key": key, "type": f"{kind.__module__}.{kind.__qualname__}", "repr": text}
