"""Cluster layer: replicas of the engine behind a router, on one shared clock."""
