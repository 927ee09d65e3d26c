"""The jailed worker, the only place a checkpoint is deserialised, and its client.

The process boundary is the package boundary: `sandbox.host` runs in the user's process,
`sandbox.worker` in the jailed worker, and `sandbox.protocol` is all the two share."""
