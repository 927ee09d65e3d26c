"""A checkpoint's tensors read as raw bytes, with no torch and no code of the input run:
safetensors, the storages of a plain torch zip archive (located by `layout.torch_save`) and
GGUF, each tensor's bytes in row-major order (`readers`), and what the trusted side computes
from them itself: content digests and NaN / Inf counts (`values`).

The user's process uses it to check what the jailed worker claims (`sandbox.host.claims`); the
worker's readers (`tensors.sources`) share its range and strided readers. Torch-free; may
import `core`, `formats` and `layout`."""
