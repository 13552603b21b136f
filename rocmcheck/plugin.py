"""PYTEST_DONT_REWRITE
The pytest plugin (`pytest --rocm-matrix`), registered through the `pytest11` entry point.
"""
