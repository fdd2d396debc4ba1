"""Benchmarks (``make bench``): figures taken in one run on the machine at hand, as ratios."""
