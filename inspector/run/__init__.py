"""The reading side of a training run's folder: the hash-chained journal, block logs of metrics,
the data-order ledger, which checkpoint to resume from (`checkpoints`) and the run's status;
and what its writers share (`health_gate`, `optimizer_settings`). Torch-free; may import
`core` and `integrity`. Its writers are `ledger` and `guard`."""
