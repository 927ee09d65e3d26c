"""The static scan: what loading a file would do, decided without running any of it.

Owns the scan of a file or folder (`engine`), the context format modules report through
(`context`), the result record (`result`), budgets, the readings of the loaders' own parsers
(`readings`), and what the findings mean (`advice`, `damage`, `indicators`); the pickle walker
and its policy live in `scan.pickles`. Torch-free; may import `core`, `formats` and `layout`."""
