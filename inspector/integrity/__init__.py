"""Proving bytes intact: streaming hashes, checksum manifests in every dialect, `verify`
(files and tensors against a manifest, batches, the Hugging Face cache). Torch-free; may import
`core`, `formats` and `fleet`."""
