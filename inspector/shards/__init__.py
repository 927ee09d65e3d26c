"""A checkpoint saved as several files: the set of files that hold one checkpoint's tensors (read
through `integrity.shard_index`), their combined inspection, conversion and the tied-weight
rule. Torch-free; may import `core`, `formats`, `scan`, `integrity` and `checkpoint`."""
