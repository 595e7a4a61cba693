"""Live KV-cache events: the engine's block-pool stream (ZeroMQ + msgpack) into watch."""
