"""The docs cannot lie: every command in a shell block of README.md and the documentation site is run.

A page's `sh` blocks run in order, as a reader would type them, in one empty folder per page (so a page
that compares two runs makes them first, in the open), with this checkout's `rocmcheck` and `pytest` first
on PATH. A block that cannot run on a CPU machine says why on the line before it, where a reader of the
Markdown sees it and the site does not: `<!-- not run: REASON -->`; a block without one is run. Each
command must not be refused (exit 2 is bad input, or no verdict) nor end in a traceback, and where its
comment states the outcome (`# GO ...`, `# NO-GO ...`) it must be that outcome. The same command line on
two pages runs once. docs/drafts/ is not the site's, so not read.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PAGES = [p for p in PAGES if "drafts" not in p.relative_to(ROOT).parts]
BLOCK = re.compile(r"(?:<!-- not run: (?P<reason>[^\n]*?) -->\n)?^```(?:sh|bash|console|shell)\n(?P<body>.*?)^```",
                   re.M | re.S)
STATED = {"GO": 0, "NO-GO": 1}  # the gate's outcome a comment states, and its exit code
# A file the examples take as the reader's own: a training log that failed as users report it on ROCm.
GIVEN = {"train.log": "Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n"
                      "    model = Model().cuda()\nRuntimeError: HIP error: invalid device function\n"
                      "HIP kernel errors might be asynchronously reported at some other API call\n"}


class Example(NamedTuple):
    page: str
    command: str
    stated: str  # the comment after the command, "" where none
    reason: str  # why it is not run, "" where it is


def examples() -> List[Example]:
    found = []
    for page in PAGES:
        for block in BLOCK.finditer(page.read_text(encoding="utf-8")):
            for line in block.group("body").replace("\\\n", " ").splitlines():
                command, _, comment = line.partition("  #")
                if command.strip() and not command.lstrip().startswith("#"):
                    found.append(Example(str(page.relative_to(ROOT)), command.strip(), comment.strip(),
                                         block.group("reason") or ""))
    return found


def test_the_docs_have_examples_and_every_one_left_out_says_why():
    found = examples()
    run = [e for e in found if not e.reason]
    assert len(run) >= 10 and {"README.md", "docs/faults.md", "docs/fleet.md"} <= {e.page for e in run}
    assert all(len(e.reason) > 20 for e in found if e.reason)  # a reason, not a word


def _by_page() -> Dict[str, List[Example]]:
    pages: Dict[str, List[Example]] = {}
    seen = set()
    for example in examples():
        if not example.reason and example.command not in seen:
            seen.add(example.command)
            pages.setdefault(example.page, []).append(example)
    return pages


def run_examples(examples: List[Example], folder: Path) -> List[str]:
    """Run `examples` in order in `folder`, as a reader would; what each did wrong, one line of problems each."""
    for name, text in GIVEN.items():
        (folder / name).write_text(text)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("ROCMCHECK_INJECT", None)
    problems = []
    for example in examples:
        done = subprocess.run(["bash", "-c", example.command], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=600)
        said = f"{example.page}: `{example.command}` exited {done.returncode}: {done.stderr[-1500:]}"
        outcome = example.stated.split(":")[0].split()[0] if example.stated else ""
        if "Traceback (most recent call last)" in done.stdout + done.stderr:
            problems.append(f"{said} (a traceback)")
        elif outcome in STATED and done.returncode != STATED[outcome]:
            problems.append(f"{said} (the page says {outcome}, exit {STATED[outcome]})")
        elif outcome not in STATED and done.returncode in (2, 126, 127):  # refused, not executable, not found
            problems.append(said)
    return problems


@pytest.mark.children
def test_a_command_the_docs_get_wrong_is_caught(tmp_path):
    """The check itself: an option rocmcheck does not have, and an outcome the command does not give."""
    wrong = [Example("page.md", "rocmcheck list --no-such-option", "", ""),
             Example("page.md", "rocmcheck list --faults", "NO-GO: the catalogue", ""),
             Example("page.md", "rocmcheck list --faults", "the catalogue", "")]
    problems = run_examples(wrong, tmp_path)
    assert len(problems) == 2, problems
    assert "--no-such-option` exited 2" in problems[0] and "the page says NO-GO" in problems[1]


@pytest.mark.slow
@pytest.mark.children
@pytest.mark.parametrize("page", sorted(_by_page()))
def test_every_command_of_the_page_runs_as_documented(page, tmp_path):
    assert run_examples(_by_page()[page], tmp_path) == []
