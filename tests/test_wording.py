"""What people read says it plainly (issue 31 item 17): where a run was interrupted, counts in the
number they take, `list --faults` within a terminal's width, no word of documents users never saw,
and a long evidence text said once in the bug report."""
from __future__ import annotations

import json
import re
from pathlib import Path

from rocmcheck import faults, registry
from rocmcheck.cli import main
from rocmcheck.knowledge import DATA
from rocmcheck.outputs import bugreport
from rocmcheck.outputs.runtext import markdown_report
from rocmcheck.outputs.storage import SCHEMA
from rocmcheck.records import BEFORE_FIRST, BETWEEN, Report, RunInfo, where_interrupted
from rocmcheck.wording import counted

ROOT = Path(__file__).resolve().parents[1]


def test_where_a_run_was_interrupted_reads_as_a_sentence() -> None:
    assert where_interrupted("gemm[fp32-default]") == "during gemm[fp32-default]"
    assert where_interrupted(BEFORE_FIRST) == "before the first probe"
    assert where_interrupted(BETWEEN) == "between probe variants"
    assert where_interrupted("(before the first probe)") == "before the first probe"  # reports of earlier versions
    assert where_interrupted(None) == "between probe variants"  # a journal that ends with no probe in progress
    report = Report(run=RunInfo(id="r", partial=True, interrupted=BEFORE_FIRST))
    text = markdown_report(report)
    assert "interrupted before the first probe" in text and "during (" not in text


def test_counts_take_their_number(capsys) -> None:
    assert [counted(n, "probe") for n in (0, 1, 2)] == ["0 probes", "1 probe", "2 probes"]
    assert counted(1, "entry", "entries") == "1 entry" and counted(3, "entry", "entries") == "3 entries"
    assert main(["list", "--probe", "device-smoke"]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == "1 variant of 1 probe"


def test_no_count_hedges_with_a_parenthesised_plural() -> None:
    """"3 value(s)" reads as a form, not a sentence: every count in the package goes through `counted`."""
    hedged = re.compile(r"\w\(s\)")
    package = ROOT / "rocmcheck"
    found = [f"{p.relative_to(ROOT)}:{n}" for p in package.rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if hedged.search(line) and ('f"' in line or "f'" in line)]
    assert not found, found


def test_the_fault_catalogue_fits_a_terminal(capsys) -> None:
    assert main(["list", "--faults"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120, max(lines, key=len)
    text = " ".join(" ".join(line.split()) for line in lines)
    assert "copy-zeros" in text and len([f for f in faults.catalogue() if f in text]) == len(faults.catalogue())


def test_no_user_facing_text_speaks_of_documents_users_never_saw() -> None:
    """The project started from a user's documents it called its seeds; users never saw them, so no
    fault, probe (its targets, and its source, which a bug report embeds), known issue or README says so."""
    texts = {f"fault {f.name}": f.help for f in faults.catalogue().values()}
    for spec in registry.load_all(()).values():
        texts[f"probe {spec.id}"] = f"{spec.title} {spec.targets}"
    shipped = [*(ROOT / "probes").glob("*.py"), ROOT / "README.md"]
    texts.update({str(p.relative_to(ROOT)): p.read_text() for p in shipped})
    texts.update({str(p): p.read_text() for p in Path(DATA).rglob("*.json")})
    seedish = re.compile(r"\bthe seeds\b|\bseeds'|\(seeds[;)]")
    assert not {name: seedish.search(text).group(0) for name, text in texts.items() if seedish.search(text)}


def _hang(variant: str, stack: str) -> dict:
    return {"probe": variant.split("[")[0], "variant": variant, "status": "hang", "params": {}, "duration_s": 60,
            "message": "no verdict within 60s; child killed", "measurements": {}, "evidence": {"stack": stack},
            "known_issues": [], "env": {}}


def test_a_stack_that_several_variants_share_is_shown_once() -> None:
    shared = 'Thread 0x7f (most recent call first):\n  File "attention.py", line 40 in backward\n' * 3
    other = 'Thread 0x7f (most recent call first):\n  File "transfer.py", line 9 in copy\n'
    verdicts = [_hang(f"attention-model[{b}]", shared) for b in ("math", "flash", "efficient")]
    verdicts.append(_hang("transfer[to-isolated]", other))
    report = Report.from_dict(json.loads(json.dumps({
        "schema": SCHEMA, "schema_version": "1.3", "run": {"id": "r", "device": "cpu"},
        "fingerprint": {"host": {"env": {}}}, "verdicts": verdicts})))
    md = bugreport.build(report, stem="bug").markdown
    assert md.count("line 40 in backward") == 3  # one stack of three frames, not three stacks
    assert md.count("Stack: the same as `attention-model[math]`'s above.") == 2
    assert md.count("line 9 in copy") == 1
