"""`run`: a training run's ledgered checkpoints: `latest`, `verify`, `order-diff` (`command`
dispatches to them)."""
