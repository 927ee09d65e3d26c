"""A checkpoint saved as several files: the `*.index.json`, the set of files that hold one
checkpoint's tensors, their combined inspection and the tied-weight rule. Torch-free; may import
`core`, `formats`, `scan`, `integrity` and `checkpoint`."""
