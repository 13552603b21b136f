"""The README's probe and fault tables stay in step with the registry, and its probe example works."""
from __future__ import annotations

from pathlib import Path

from rocmcheck import faults, registry

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_probe_is_in_the_readme():
    """Every probe rocmcheck ships; those of a test's own probe folder loaded earlier are not the README's."""
    shipped = [pid for pid, spec in registry.load_all().items() if spec.module.startswith("rocmcheck.probes.")]
    assert {"device-smoke", "transfer", "hf-training"} <= set(shipped)
    missing = [pid for pid in shipped if f"`{pid}`" not in README]
    assert missing == []


def test_every_fault_is_in_the_readme():
    """Every fault rocmcheck ships; those a test's own probe folder registers are not the README's."""
    shipped = [f.name for f in faults.catalogue().values() if f.install.__module__.startswith("rocmcheck.")]
    assert {"batch-corrupt", "copy-zeros", "hang"} <= set(shipped)  # the filter keeps what rocmcheck ships
    missing = [name for name in shipped if f"`{name}`" not in README]
    assert missing == []


def test_quick_start_has_the_two_commands():
    assert "make gate" in README and "make test" in README
