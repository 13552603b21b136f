"""The one probe API: what a probe receives (`ctx`), the lazy torch and numpy handles, and the
built-in library held to them (docs/architecture.md: probes use the probe API only)."""
from __future__ import annotations

import sys

from rocmcheck.lazy import LazyModule


def test_a_lazy_handle_imports_on_first_use_and_reads_the_live_module(tmp_path, monkeypatch):
    (tmp_path / "lazy_target.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_target", raising=False)  # and removed again after the test
    handle = LazyModule("lazy_target")
    assert "lazy_target" not in sys.modules
    assert handle.VALUE == 1 and "lazy_target" in sys.modules
    sys.modules["lazy_target"].VALUE = 2  # as a fault patches torch.matmul
    assert handle.VALUE == 2
