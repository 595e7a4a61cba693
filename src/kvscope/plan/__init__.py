"""Capacity planning: memory budget per engine, roofline, communication, cost, advice.

Pure arithmetic over :mod:`kvscope.specs`; imports no torch, HTTP or NVML code.
"""
