"""The catalog of compiled kernels (catalog.py) and the C++ it generates (codegen.py)."""
