"""`convert`: one checkpoint (`command`) or a sharded folder (`folder`) to safetensors."""
