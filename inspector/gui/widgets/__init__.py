"""Reusable widgets the panes share (code view, charts' style and event marks, the radar, the
evidence list, empty states, toggle buttons, the model summary). Qt and the engine's torch-free
records only; no pane and no job."""
