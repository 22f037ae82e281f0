"""The benchmark suite: every arm in a fresh process on the same data.

Run it from the checkout: ``python -m benchmarks.suite --help``.
"""
