"""Every `torch.` name the rocmcheck package and its probes use, and whether the installed torch has it.

    python scripts/torch_names.py            list the names this torch lacks (exit 1 if any is unguarded)
    python scripts/torch_names.py --record   under the oldest supported torch: write the names it has
                                             into tests/data/torch_names_in_oldest.json

A name is read from the source (import statements and attribute chains on `torch` or an alias of
a torch module), never by running a probe. tests/test_torch_api.py uses the same reading.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterable, List

ROOT = Path(__file__).resolve().parent.parent
SOURCES = (ROOT / "rocmcheck", ROOT / "probes")  # the package and its probe library (rocmcheck.probes)
IN_OLDEST = ROOT / "tests" / "data" / "torch_names_in_oldest.json"


def _dotted(node: ast.AST, aliases: Dict[str, str]) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".".join([aliases[node.id], *reversed(parts)])
    return ""


def uses_in(source: str, where: str) -> Dict[str, List[str]]:
    """{dotted torch name: ["file:line", ...]} for one module's source."""
    tree = ast.parse(source)
    aliases = {"torch": "torch"}  # a function parameter named torch is the module too (the rank checks)
    found: Dict[str, List[str]] = defaultdict(list)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    found[alias.name].append(f"{where}:{node.lineno}")
                    if alias.asname:
                        aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch" and not node.level:
            for alias in node.names:
                found[f"{node.module}.{alias.name}"].append(f"{where}:{node.lineno}")
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    chained = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in chained:  # the outermost link of a chain
            name = _dotted(node, aliases)
            if name:
                found[name].append(f"{where}:{node.lineno}")
    return found


def uses(folders: Iterable[Path] = SOURCES) -> Dict[str, List[str]]:
    """Every torch name used under `folders`, with where (relative to the repository)."""
    merged: Dict[str, List[str]] = defaultdict(list)
    for path in sorted(p for folder in folders for p in folder.rglob("*.py")):
        for name, places in uses_in(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix()).items():
            merged[name] += places
    return dict(merged)


def in_oldest() -> dict:
    return json.loads(IN_OLDEST.read_text(encoding="utf-8"))


def versioned(name: str, names: Dict[str, object]) -> str:
    """The table entry that covers `name` (itself or a prefix: SDPBackend.MATH is SDPBackend's), or ''."""
    return next((entry for entry in names if name == entry or name.startswith(entry + ".")), "")


def main(argv: List[str]) -> int:
    sys.path.insert(0, str(ROOT))
    import torch

    from rocmcheck import torchapi

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="write in_oldest (run under the oldest supported torch)")
    args = parser.parse_args(argv)
    recorded, used = in_oldest(), uses()
    absent = {n: p for n, p in used.items() if not torchapi.lookup(n)[0]}
    unguarded = {n: p for n, p in absent.items() if not versioned(n, torchapi.SINCE)}
    for name, places in sorted(absent.items()):
        flag = "UNGUARDED " if name in unguarded else ""
        print(f"{flag}torch {torch.__version__} lacks {name}: {', '.join(places[:3])}")
    if args.record:
        if torchapi.version_tuple(torch.__version__) != torchapi.version_tuple(torchapi.OLDEST):
            print(f"--record runs under torch {torchapi.OLDEST}.x, not {torch.__version__}", file=sys.stderr)
            return 2
        recorded.update(torch=torch.__version__.split("+")[0],
                        in_oldest=sorted(n for n in used if n not in absent and not versioned(n, torchapi.SINCE)))
        IN_OLDEST.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
        print(f"recorded {len(recorded['in_oldest'])} names torch {torch.__version__} has")
    return 1 if unguarded else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
