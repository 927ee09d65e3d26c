"""`telemetry`: sample NVML or replay a log (`command`) and serve it to Prometheus (`serve`)."""
