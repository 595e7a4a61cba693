"""Model architecture and hardware catalogue: pure data and arithmetic.

Imports nothing beyond the standard library and numpy (checked by a test).
"""
