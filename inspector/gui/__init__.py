"""Qt widgets, one module per pane; no business logic and no torch import."""
