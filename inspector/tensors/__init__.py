"""Reading tensors out of a checkpoint with torch: the loaders (torch zip, legacy, safetensors,
DCP, TorchScript, GGUF; `by_format` picks one by the scanned format), tensors' layout records,
per-tensor statistics and digests (`stats`, run over every tensor by `describe`) and their
encoding.

This package runs in two processes: inside the jailed worker (for `inspect`, `convert`, `diff`)
and inside the user's own training process (the ledger re-reads what it saved). It may import
torch, safetensors, `core`, `formats`, `layout`, `scan.pickles` (the allow-list) and
`checkpoint`; never the sandbox, the GUI, the CLI or the report."""
