"""Speed benchmarks (issue 6): ``python -m benchmarks.run``; the learning-rate scan: ``python -m benchmarks.lr_scan``."""
