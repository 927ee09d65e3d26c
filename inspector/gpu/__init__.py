"""GPU health: NVML telemetry, recorded-log replay and repeat-inference consistency tests."""
