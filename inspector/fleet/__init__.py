"""Scale-out: batch jobs (`--shard I/N`, results files, `merge`) and object storage (`s3://`).
Torch-free; may import `core`, `formats` and `run.journal`."""
