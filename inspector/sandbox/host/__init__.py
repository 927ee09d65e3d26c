"""The host side of the process boundary: what the user's process runs to use the jailed worker.

Owns starting workers (cold or forked from the warm fork server), sending requests, reading
their events, limits and cancellation (`client`), running several jobs at once (`parallel`),
sharded inspections and the consistency job. It may import `core`, `formats`, `scan`,
`integrity`, `checkpoint`, `shards` and `sandbox.protocol`; it never imports a worker module or
torch."""
