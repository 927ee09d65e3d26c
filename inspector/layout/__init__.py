"""Where a torch save's tensors lie, read statically: the storages of a torch zip or legacy
file, a TorchScript archive's code and constants, a DCP `.metadata`. Nothing is unpickled and no
code runs; torch-free. May import `core`, `formats` and the folder walk (`scan.discover`)."""
