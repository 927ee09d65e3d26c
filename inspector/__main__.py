"""`python -m inspector` runs the same entry point as `ckpt-inspector`."""

from inspector.cli import entry

entry()
