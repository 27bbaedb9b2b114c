"""Hypothesis settings for the compression tests: short runs, no example database on disk.

`FEDSQUEEZE_HYPOTHESIS=stress pytest tests/compression` runs 40x more examples.
"""
import os

from hypothesis import settings

settings.register_profile("compression", database=None, deadline=None, max_examples=50, print_blob=True)
settings.register_profile("stress", database=None, deadline=None, max_examples=2000, print_blob=True)
settings.load_profile(os.environ.get("FEDSQUEEZE_HYPOTHESIS", "compression"))
