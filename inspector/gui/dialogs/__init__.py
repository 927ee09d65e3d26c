"""The app's dialogs: About, Convert, Prometheus source and Export Report. They may import
`gui`'s shared modules, `gui.widgets` and the engine's torch-free packages."""
