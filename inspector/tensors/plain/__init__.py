"""What the worker says of a checkpoint without importing torch: a safetensors or GGUF file of
small tensors read and described from its header and bytes (`reader`), and the torch-free
pieces the torch path shares with it: per-segment statistics of joined tensors (`segments`),
the byte spans tensors reach (`spans`) and a non-tensor leaf's record (`leaves`).
"""
