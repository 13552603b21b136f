"""MkDocs hook (mkdocs.yml `hooks:`): the documentation's reference tables, generated from the code at
every build, so they cannot drift from what rocmcheck does.

A page asks for a table with a marker on a line of its own, `<!-- generated: NAME -->`, and the hook
puts the table there before MkDocs renders the page: the probe catalogue from the registry (every
probe, variant, level and budget, timeout, gate membership and what it catches), the fault catalogue,
the levels, each command's options from the very parser that prints its `--help` (`rocmcheck.cli`,
whose shared options come from the option table, `rocmcheck.engine.options.OPTIONS`), and the pytest
plugin's options and ini keys from its own `pytest_addoption`. A marker naming no table fails the
build. tests/test_docs_site.py reads the same functions, so the tests and the site see one catalogue.
"""
from __future__ import annotations

import argparse
import re
import textwrap
from typing import Any, Callable, Dict, Iterable, List, Sequence

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
SHIPPED = "rocmcheck."  # a probe or fault of a user's --probes-path folder is not the documentation's


def _cell(text: Any) -> str:
    """Text for one Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def shipped_probes() -> Dict[str, Any]:
    """id -> ProbeSpec of every probe rocmcheck ships, in id order."""
    from rocmcheck import registry

    specs = registry.load_all(())
    return {pid: specs[pid] for pid in sorted(specs) if specs[pid].module.startswith(SHIPPED)}


def shipped_faults() -> List[Any]:
    """Every fault rocmcheck ships (those its probe modules register included), in catalogue order."""
    from rocmcheck import faults

    shipped_probes()  # probe modules register faults of their own as they load
    return [f for f in faults.catalogue().values() if f.install.__module__.startswith(SHIPPED)]


def _budget(variant: Any) -> str:
    """The variant's cost budget per GPU, host setup included (`ProbeSpec.cost_budget`): at its own level
    where it has one, else at levels 1, 2 and 3 (one figure where they agree)."""
    from rocmcheck.model import LEVEL_BUDGETS_S

    level = variant.params.get("level")
    if level is not None:
        return f"{variant.spec.cost_budget(variant.params, level):g} s"
    each = [variant.spec.cost_budget(variant.params, n) for n in LEVEL_BUDGETS_S]
    return f"{each[0]:g} s" if len(set(each)) == 1 else " / ".join(f"{s:g} s" for s in each)


def _needs(variant: Any) -> str:
    from rocmcheck.cli.listing import needs

    said = needs(variant)  # what `rocmcheck list` shows
    return "CPU or GPU" if said == "-" else said


def probe_catalogue() -> str:
    """A summary table of every probe, then a section per probe with each of its variants."""
    specs = shipped_probes()
    summary = []
    for pid, spec in specs.items():
        variants = spec.expand()
        levels = sorted({v.params["level"] for v in variants if "level" in v.params})
        summary.append([f"[`{pid}`](#{pid})", f"{sum(v.in_gate() for v in variants)} / {len(variants)}",
                        ", ".join(map(str, levels)) or "-", f"{spec.timeout:g} s",
                        _needs(variants[0]), spec.targets or spec.title])
    parts = [f"{len(specs)} probes, {sum(len(s.expand()) for s in specs.values())} variants.\n\n",
             _table(["probe", "variants (gate / all)", "levels", "timeout", "needs", "what it catches"], summary)]
    for pid, spec in specs.items():
        variants = spec.expand()
        parts.append(f"\n### `{pid}` {{#{pid}}}\n\n{_cell(spec.title)}\n\n**What it catches:** "
                     f"{_cell(spec.targets or spec.title)}\n\n"
                     f"Timeout {spec.timeout:g} s per variant; runs in: `{spec.runs_in.value}`; "
                     f"{'once per GPU under test' if spec.per_device else 'once per node'}; module "
                     f"`{spec.module}`.\n\n")
        has_levels = any("level" in v.params for v in variants)
        if has_levels:
            parts.append(f"Its levels: `--level N` runs the variants of level N (the gate: 1), each given its level's "
                         f"budget of work beyond its timeout ({spec.timeout:g} s + the budget).\n\n")
        headers = ["variant", "in the gate", "needs"] + (["level"] if has_levels else []) + [
            "cost budget per GPU" + ("" if has_levels else " (level 1 / 2 / 3)")]
        rows = []
        for v in variants:
            gate = ("only (`run` runs the variants it stands for)" if v.gate_only
                    else "yes" if v.in_gate() else "no (full profile)")
            row = [f"`{v.id}`", gate, _needs(v)]
            if has_levels:
                row.append(v.params.get("level", "-"))
            rows.append(row + [_budget(v)])
        parts.append(_table(headers, rows))
        if spec.links:
            parts.append("\nBuilt on: " + ", ".join(f"<{link}>" for link in spec.links) + "\n")
    return "".join(parts)


def fault_catalogue() -> str:
    return _table(["fault", "ARG", "what the probe meets"],
                  ([f"`{f.name}`", (f.args or "").replace("|", ", "), f.help] for f in shipped_faults()))


def levels() -> str:
    from rocmcheck.engine.options import MAX_DURATION_S
    from rocmcheck.model import LEVEL_BUDGETS_S

    rows = [[n, f"{s:g} s" + (" (`--duration D` replaces it)" if n > 1 else " (the gate's)")]
            for n, s in LEVEL_BUDGETS_S.items()]
    return (_table(["`--level`", "budget of work per GPU"], rows)
            + f"\n`--duration` takes seconds, or `15m`, `2h`: from 1 s to {MAX_DURATION_S / 86400:g} days.\n")


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line `--help` starts with, wrapped at 100 columns whatever the terminal building the site."""
    usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    return textwrap.fill(usage, 100, subsequent_indent="    ", break_on_hyphens=False, break_long_words=False)


def _option_rows(parser: argparse.ArgumentParser) -> List[List[str]]:
    from rocmcheck.engine.options import OPTIONS

    env = {o.flag: o.env for o in OPTIONS.values() if o.env}
    rows = []
    for action in parser._actions:  # argparse keeps no public list of a parser's arguments
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        names = ", ".join(f"`{n}`" for n in action.option_strings) or f"`{action.metavar or action.dest}`"
        value = (" or ".join(map(str, action.choices)) if action.choices
                 else "" if action.nargs == 0 else str(action.metavar or action.dest.upper()))
        help_text = (action.help or "") % dict(vars(action), prog=parser.prog)
        rows.append([names, value, help_text, f"`${env[action.option_strings[-1]]}`"
                     if action.option_strings and action.option_strings[-1] in env else ""])
    return rows


def cli_options() -> str:
    """Each command's options, from `rocmcheck.cli.build_parser()`: what `rocmcheck COMMAND --help` prints."""
    from rocmcheck.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in commands._choices_actions}
    parts = []
    for name, sub in commands.choices.items():
        parts.append(f"\n### `rocmcheck {name}` {{#rocmcheck-{name}}}\n\n{_cell(helps.get(name, ''))}\n\n"
                     f"```text\n{_usage(sub)}\n```\n\n")
        parts.append(_table(["option", "value", "what it does", "environment"], _option_rows(sub)))
    return "".join(parts)


def pytest_options() -> str:
    """The plugin's options and ini keys, from its own `pytest_addoption` run against pytest's parser."""
    from _pytest.config.argparsing import Parser

    from rocmcheck import plugin
    from rocmcheck.engine.options import OPTIONS

    parser = Parser(_ispytest=True)
    plugin.pytest_addoption(parser)
    group = parser.getgroup(plugin.GROUP)
    env = {f"rocm_{o.name}": o.env for o in OPTIONS.values() if o.env}
    rows = []
    for option in group.options:
        attrs = option.attrs()
        dest = attrs.get("dest", "")
        ini = f"`{dest}`" if dest in parser._inidict else ""
        rows.append([", ".join(f"`{n}`" for n in option.names()), attrs.get("metavar") or "",
                     attrs.get("help", ""), ini, f"`${env[dest]}`" if dest in env else ""])
    markers = "\n".join(f"- `{line}`" for line in plugin.MARKERS)
    return (_table(["option", "value", "what it does", "ini key", "environment"], rows)
            + f"\nMarkers the plugin registers:\n\n{markers}\n")


GENERATORS: Dict[str, Callable[[], str]] = {
    "probe-catalogue": probe_catalogue, "fault-catalogue": fault_catalogue, "levels": levels,
    "cli-options": cli_options, "pytest-options": pytest_options,
}


def generate(markdown: str, where: str = "") -> str:
    """`markdown` with each marker replaced by its table; a marker naming no table is an error."""
    def replace(found: "re.Match[str]") -> str:
        name = found.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{where}: no generated table '{name}' (known: {', '.join(GENERATORS)})")
        return GENERATORS[name]()
    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    from mkdocs.exceptions import PluginError

    try:
        return generate(markdown, page.file.src_uri)
    except ValueError as exc:
        raise PluginError(str(exc)) from None
