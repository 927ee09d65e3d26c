"""Proving bytes intact: streaming hashes, checksum manifests in every dialect, `verify` (files and
tensors against a manifest, batches, the Hugging Face cache) and a sharded checkpoint's
`*.index.json` (`shard_index`: what it names, and that its shards cover it). Torch-free; may
import `core`, `formats` and `fleet`."""
