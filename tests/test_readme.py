"""The README's probe and fault tables stay in step with the registry."""
from __future__ import annotations

from pathlib import Path

from rocmcheck import faults, registry

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_probe_is_in_the_readme():
    missing = [pid for pid in registry.load_all() if f"`{pid}`" not in README]
    assert missing == []


def test_every_fault_is_in_the_readme():
    missing = [name for name in faults.catalogue() if f"`{name}`" not in README]
    assert missing == []


def test_quick_start_has_the_two_commands():
    assert "make gate" in README and "make test" in README
