"""Levels with budgets (issue 33): `--level N` chooses the variants of probes with a `level`
parameter, `--duration` replaces the budget of levels 2 and 3; the budget reaches the probe's child
(`ctx.budget_s`) and is added to its timeout; a level or duration out of range is one line, exit 2."""
from __future__ import annotations

import textwrap

import pytest

from rocmcheck.cli import main
from rocmcheck.engine.options import RunOptions
from rocmcheck.engine.runner import Runner
from rocmcheck.engine.selection import select
from rocmcheck.model import Status
from rocmcheck.registry import load_all

LEVELLED = textwrap.dedent('''
    import time
    import rocmcheck

    @rocmcheck.probe("levelled", title="works for its budget", targets="-", timeout=1.0,
                     variants=[{"level": 1}, {"level": 2}])
    def levelled(ctx, level):
        ctx.measure(budget=ctx.budget_s)
        time.sleep(ctx.budget_s)
''')


@pytest.mark.children
def test_a_levelled_variant_gets_its_budget_in_the_child_and_beyond_its_timeout(tmp_path):
    """`--level 2 --duration 2` reaches the child (`ctx.budget_s`), and the runner adds the budget to
    the probe's 1 s timeout: 2 s of work is no hang."""
    (tmp_path / "levelled.py").write_text(LEVELLED)
    opts = RunOptions(device="cpu", probes_paths=[str(tmp_path)], level=2, duration=2.0, write_files=False)
    variants = select(load_all([str(tmp_path)]), ["levelled"], level=opts.level)
    (verdict,) = Runner(opts).run(variants).verdicts
    assert (verdict.variant, verdict.status, verdict.measurements["budget"]) == ("levelled[2]", Status.PASS, 2.0)


def test_the_level_chooses_a_probes_variants_and_none_shows_them_all(tmp_path):
    (tmp_path / "levelled.py").write_text(LEVELLED)
    specs = load_all([str(tmp_path)])
    assert [v.id for v in select(specs, ["levelled"])] == ["levelled[1]"]
    assert [v.id for v in select(specs, ["levelled"], level=2)] == ["levelled[2]"]
    assert [v.id for v in select(specs, ["levelled"], level=None)] == ["levelled[1]", "levelled[2]"]
    assert len(select(specs, ["device-smoke"], level=3)) == 1  # a probe without levels runs at every level


@pytest.mark.parametrize("argv, message", [
    (["--level", "4"], "argument --level: must be 1, 2 or 3, not '4'"),
    (["--level", "2", "--duration", "0"], "argument --duration: must be from 1 s to 7 days, not '0'"),
    (["--level", "3", "--duration", "8d"], "argument --duration: must be seconds (or 15m, 2h), not '8d'"),
    (["--duration", "60"], "--duration is the budget of level 2 or 3: add --level 2 or 3"),
])
def test_a_level_or_duration_out_of_range_is_one_line_and_exit_2(capsys, tmp_path, argv, message):
    assert main(["run", "--device", "cpu", "--out-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


