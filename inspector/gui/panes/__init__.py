"""The main window's panes, each a view over a model: Overview, Pickle, Tensors, Integrity,
GPU, Consistency and Run. They may import `gui`'s shared modules, `gui.widgets`, the engine's
torch-free packages and `sandbox.host.client`; never torch or another pane."""
