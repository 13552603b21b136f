"""`torch` and `np` for probe modules: handles that import the real module on first use.

A probe module is loaded in the parent (`rocmcheck list`, selection), which never imports torch
(nor numpy), so probes imported both inside every function. `from rocmcheck.lazy import np, torch`
reads like the real imports, and `torch.X` stays a name scripts/torch_names.py reads from the
source. Each attribute is looked up on the real module, so a fault that patches `torch.matmul` is
what the probe calls. Not `importlib.util.LazyLoader`: it puts a half-loaded module into
sys.modules, where `"torch" in sys.modules` (the child's CPU setup, the tests) would see it.
"""
from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """The module `name`, imported when the first attribute is read."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self._name), attribute)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported on first use>"


torch: Any = LazyModule("torch")
np: Any = LazyModule("numpy")
