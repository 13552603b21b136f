"""System probes (attention, allocator, multi-GPU, workers): each detector proven by fault injection.

Runs the real runner (children + watchdog) on the CPU. GPU-only detectors (allocator,
peer copies, inventory) are proven through their pure decision functions fed with the
data the faults produce. Hang cases use small timeouts so the file stays fast.
"""
from __future__ import annotations

import sys
import textwrap

import pytest

from conftest import by_variant


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/environ")
def test_per_variant_env_is_in_the_childs_initial_environment_and_recorded(rocm_run, tmp_path):
    (tmp_path / "envprobe.py").write_text(textwrap.dedent('''
        import os
        import sys
        import rocmcheck

        @rocmcheck.probe("env-probe", title="t", targets="t", variants={"value": ["a1", "b2"]},
                         env=lambda params: {"ROCMCHECK_TEST_VALUE": params["value"]})
        def env_probe(ctx, value):
            # /proc/self/environ is the environment the process was started with (before any import)
            with open("/proc/self/environ", "rb") as fh:
                initial = dict(e.split(b"=", 1) for e in fh.read().split(b"\\0") if b"=" in e)
            got = initial.get(b"ROCMCHECK_TEST_VALUE", b"").decode()
            assert got == value, f"child started with {got!r}, expected {value!r}"
    '''))
    verdicts = by_variant(rocm_run(probe="env-probe", probes_path=[str(tmp_path)], env={"ROCMCHECK_OTHER": "1"}))
    for value in ("a1", "b2"):
        v = verdicts[f"env-probe[{value}]"]
        assert v["status"] == "pass", v["message"]
        assert v["env"] == {"ROCMCHECK_OTHER": "1", "ROCMCHECK_TEST_VALUE": value}
