"""Shared test fixtures. The rocmcheck plugin itself is loaded once, by its entry point."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import pytest
from hypothesis import settings

pytest_plugins = ["pytester"]

settings.register_profile("rocmcheck", deadline=None, derandomize=True, database=None, print_blob=True,
                          max_examples=60)
settings.load_profile("rocmcheck")

FAKE_PROBES = Path(__file__).parent / "tests" / "fake_probes"


def run_probes(probe: str = "*", inject: str = "", device: str = "cpu", isolation: Optional[str] = None,
               timeout: Optional[float] = None, keyword: str = "", probes_path: List[str] = (),
               env: Optional[Dict[str, str]] = None, profile: str = "full",
               gate_only: bool = False) -> List[dict]:
    """Run probes through the real runner (children, watchdog) and return verdict dicts."""
    from rocmcheck import registry
    from rocmcheck.runner import RunOptions
    from rocmcheck.selection import select
    from rocmcheck.session import run_variants

    specs = registry.load_all(probes_path)
    variants = select(specs, [probe], keyword, gate_only=gate_only)
    opts = RunOptions(device=device, inject=inject, timeout=timeout, probes_paths=list(probes_path),
                      env=dict(env or {}), profile=profile, write_files=False)
    if isolation:
        opts.isolation = isolation
    return run_variants(opts, variants)["verdicts"]


def by_variant(verdicts: List[dict]) -> Dict[str, dict]:
    return {v["variant"]: v for v in verdicts}


@pytest.fixture(autouse=True)
def _restore_probe_registry():
    """Probe modules a test loads (fakes, broken ones) must not leak into the next test."""
    import sys

    from rocmcheck import registry

    before = dict(registry._REGISTRY)
    modules = set(sys.modules)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(before)
    for name in set(sys.modules) - modules:
        if name.startswith(("rocmcheck.probes.", "rocmcheck_userprobes_")):
            del sys.modules[name]


@pytest.fixture
def rocm_run():
    """`rocm_run(probe=..., inject=..., ...)` -> list of verdict dicts (see run_probes)."""
    return run_probes


@pytest.fixture(params=["zygote", "spawn"])
def isolation(request):
    """Both isolation modes, for the reliability cases."""
    return request.param
