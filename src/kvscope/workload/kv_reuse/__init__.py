"""What-ifs over a KV-event capture: request block chains, miss-ratio curves, routing."""
