"""The pickle walker and its policy: a static emulation of the unpickler (`walker`), the
allow-list, deny list and capabilities of every global (`policy`), and the presets a user may
allow (`presets`). Torch-free; imports only `core`."""
