"""The README and the documentation site's catalogues stay in step with what rocmcheck ships.

The probe and fault catalogues are generated at every `make docs` by scripts/mkdocs_hooks.py; these
tests read the same generator, so a probe or fault the registry has and the site would not show (or a
page that lost the marker asking for its table) fails here, without building the site."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from rocmcheck import faults, registry

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rendered(page: str) -> str:
    """A docs page as the site shows it: its markers replaced by their generated tables."""
    return _hooks().generate((DOCS / page).read_text(), page)


def test_every_probe_and_variant_is_in_the_generated_catalogue():
    """Every probe rocmcheck ships, each of its variants and levels; a test's own probe folder is not the site's."""
    shipped = {pid: spec for pid, spec in registry.load_all().items() if spec.module.startswith("rocmcheck.probes.")}
    assert {"device-smoke", "transfer", "hf-training", "sdc"} <= set(shipped)
    page = _rendered("probes.md")
    assert "<!-- generated:" not in page
    assert [pid for pid in shipped if f"### `{pid}`" not in page] == []
    variants = [v for spec in shipped.values() for v in spec.expand()]
    assert [v.id for v in variants if f"| `{v.id}` |" not in page] == []
    assert f"{len(shipped)} probes, {len(variants)} variants." in page
    levelled = [v for v in variants if "level" in v.params]
    assert levelled and all(re.search(rf"\| `{re.escape(v.id)}` \|[^\n]*\| {v.params['level']} \| \d", page)
                            for v in levelled)


def test_every_fault_is_in_the_generated_catalogue():
    """Every fault rocmcheck ships (its probes' own included); those a test's own probe folder registers are not."""
    registry.load_all()
    shipped = [f.name for f in faults.catalogue().values() if f.install.__module__.startswith("rocmcheck.")]
    assert {"batch-corrupt", "copy-zeros", "hang", "simgpu"} <= set(shipped)
    page = _rendered("faults.md")
    assert [name for name in shipped if f"| `{name}` |" not in page] == []


def test_a_marker_naming_no_table_fails_the_build():
    hooks = _hooks()
    try:
        hooks.generate("<!-- generated: probe-catalog -->\n", "typo.md")
    except ValueError as exc:
        assert "typo.md" in str(exc) and "probe-catalog" in str(exc)
    else:
        raise AssertionError("an unknown marker was left in the page")


def test_the_options_reference_is_the_parsers_help():
    """Each command's options page row carries the help text `rocmcheck COMMAND --help` prints."""
    from rocmcheck.cli import build_parser

    page = _rendered("options.md")
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    for name, sub in commands.choices.items():
        assert f"### `rocmcheck {name}`" in page
        for action in sub._actions:
            if action.option_strings and action.help and "--help" not in action.option_strings:
                assert " ".join(action.help.split()) in page, (name, action.option_strings)
    assert "`--rocm-matrix`" in page and "`rocm_device`" in page


def test_quick_start_has_the_two_commands():
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = quick_start.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in block.splitlines()] == [["make", "gate"], ["make", "test"]]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^gate: ", makefile, re.M) and re.search(r"^test: ", makefile, re.M)


def test_the_readme_is_short_and_says_what_the_verdicts_mean():
    assert len(README.splitlines()) <= 250
    head = README[:README.index("## Quick start")]
    for said in ("GO", "NO-GO", "UNKNOWN", "| 0 |", "| 1 |", "| 2 |"):
        assert said in head


def test_every_link_of_the_readme_resolves():
    """The site's links are held by `mkdocs build --strict`; the README is not a page of it, so here."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 20 and [link for link in local if not (ROOT / link).exists()] == []
