"""The worker side of the process boundary: what runs inside the jailed worker process.

Owns the worker's main loop and its operations (inspect, convert, diff, dry run, consistency),
the jail it enters before it opens any input, and the fork server that forks warm workers. It may
import `core`, `formats`, `layout`, `scan.code_text`, `checkpoint`, `tensors` and
`sandbox.protocol`, and torch; nothing in the user's process imports it (they speak to it through
`sandbox.host` and the protocol)."""
