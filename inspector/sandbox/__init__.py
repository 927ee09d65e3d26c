"""The jailed worker process that is the only place a checkpoint is deserialised, and its client."""
