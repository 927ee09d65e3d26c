"""The host side of the process boundary: what the user's process runs to use the jailed worker.

Owns one job in a fresh worker (`jobs`: the request, the handshake, events, failures), starting
workers cold or forked from the warm fork server (`launch`, `forkclient`), the worker's process
group and its output read bounded (`process`, `events`), the scan that gates every load
(`admission`), the operations on a checkpoint (`operations`, `inspect_shards`,
`consistency_job`), running several jobs at once (`parallel`) and the public face the GUI, the
CLI and the report import (`client`). It may import `core`, `formats`, `scan`, `integrity`,
`checkpoint`, `shards` and `sandbox.protocol`; it never imports a worker module or torch."""
