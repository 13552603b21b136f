"""The built-in probe library: one module per failure family.

Shipped as the package `rocmcheck.probes` (pyproject's `package-dir` maps this folder there);
`rocmcheck.registry.load_all` imports every module of it. Nothing here imports torch, so loading
the library stays cheap and torch stays unimported in the parent.
"""
