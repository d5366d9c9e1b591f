"""Measured, not timed-in-tests: retrieval, LM calls per method, overhead, throughput, startup, memory.

Run everything with `make bench` (`python -m benchmarks`), or one with `python -m benchmarks.<name>`.
"""
