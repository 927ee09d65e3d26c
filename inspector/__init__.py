"""Checkpoint Inspector: open PyTorch checkpoints safely and prove their contents are intact."""

__version__ = "0.1.0"
