"""The shared vocabulary and plumbing of every layer: verdict words, errors, progress and
cancellation, atomic writes, strict JSON, terminal text, the dtype registry, environment info.

Every process imports it, so it imports nothing else of the project and never torch or Qt."""
