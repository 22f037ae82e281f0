"""aisio's benchmarks: run from the checkout, never installed with the library."""
