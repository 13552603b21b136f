"""Standalone reproducers: one short script per failing probe variant, needing only torch
(and numpy), that a maintainer runs without installing rocmcheck.

Generic over every probe: the script embeds the probe module's own source, the source of
each rocmcheck module it imports (followed transitively), and a small stand-in for the
`rocmcheck` package itself (the `probe`/`fault` decorators; the real ProbeContext and
exceptions are embedded). It sets the variant's environment, calls the probe with the
variant's parameters, device and profile, and prints PASS, WARN, SKIP, FAIL or ERROR.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import json
import pprint
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from .. import __version__
from ..model import ProbeSpec, RunsIn, variant_id
from ..redact import REDACTED, Redactor, gpu_env_name
from ..registry import module_file

# The `rocmcheck` package as a reproducer sees it. Anything else a probe takes from
# rocmcheck must be a module, which is then embedded verbatim.
SHIM = '''"""Stand-in for the rocmcheck package: records probes, ignores fault registrations."""
from rocmcheck.context import ProbeContext
from rocmcheck.errors import GateFailed, ProbeFailure, RocmcheckError, Skip, UsageError

__version__ = "%s (reproducer stand-in)"
PROBES = {}


def probe(id=None, **declared):
    def register(func):
        PROBES[id if isinstance(id, str) else func.__name__.replace("_", "-")] = func
        return func
    return register(id) if callable(id) else register


def fault(name, help="", **declared):
    return lambda install: install
''' % __version__

Sources = Dict[str, Tuple[str, bool]]  # module name -> (source, is a package)


class ReproError(Exception):
    """A reproducer cannot be built for this probe (the reason is shown in the report)."""


@dataclass
class Reproducer:
    variant: str
    filename: str
    script: str
    module: str  # the probe module it embeds: variants of one module share all but CONFIG
    brief: str = ""  # the script with rocmcheck's own helper modules left out, for a Markdown that must be short


# --- what runs inside the generated script (copied into it verbatim) ------------------------


class EmbeddedSources:
    """Import hook serving the modules embedded in this script (name -> (source, is a
    package)); a prefix of an embedded name with no source of its own is an empty package.
    What the hook needs is imported before it is installed: an import inside `find_spec`
    would ask this hook again, without end (a plain venv has no `importlib.util` loaded yet)."""

    def __init__(self, sources):
        import importlib.util
        import linecache

        self.sources = sources
        self.spec_from_loader = importlib.util.spec_from_loader
        self.linecache = linecache.cache

    def find_spec(self, name, path=None, target=None):
        prefix = any(other.startswith(name + ".") for other in self.sources)
        if name not in self.sources and not prefix:
            return None
        return self.spec_from_loader(name, self, origin=f"<embedded {name}>",
                                     is_package=prefix or self.sources[name][1])

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        source = self.sources.get(module.__name__, ("", True))[0]
        filename = f"<embedded {module.__name__}>"
        self.linecache[filename] = (len(source), None, source.splitlines(True), filename)  # readable tracebacks
        exec(compile(source, filename, "exec"), module.__dict__)


def reproduce(config, sources):
    """Run the embedded probe once as rocmcheck's child would; print the verdict and exit
    1 when it is FAIL or ERROR (or the probe hangs past its timeout). Like the child, it
    ends with os._exit once the verdict is out: interpreter teardown (a thread or worker
    the probe or torch left behind, a wedged runtime) must not turn a verdict into a hang."""
    import faulthandler
    import importlib
    import os
    import sys
    import threading
    import traceback

    os.environ.update(config["env"])  # before anything imports torch
    faulthandler.enable()  # a crash still shows the Python stack
    device = sys.argv[1] if len(sys.argv) > 1 else config["device"]
    roots = {name.split(".")[0] for name in sources}
    for name in [n for n in sys.modules if n.split(".")[0] in roots]:
        del sys.modules[name]  # an installed rocmcheck must not stand in for the embedded code
    sys.meta_path.insert(0, EmbeddedSources(sources))
    importlib.import_module(config["module"])
    rocmcheck = sys.modules["rocmcheck"]

    def hung():
        print(f"FAIL {config['variant']}: hang: no result within {config['timeout_s']:g}s; stacks:", flush=True)
        faulthandler.dump_traceback(all_threads=True)
        os._exit(1)

    watchdog = threading.Timer(config["timeout_s"], hung)
    watchdog.daemon = True
    watchdog.start()
    ctx = rocmcheck.ProbeContext(device=device, profile=config["profile"], params=dict(config["params"]),
                                 timeout=config["timeout_s"])
    try:
        import torch

        if device == "cpu":
            torch.set_num_threads(1)  # as rocmcheck's child: spin-waiting OpenMP threads slow small machines
        else:
            torch.cuda.init()
            torch.cuda.set_device(torch.device(device))
        rocmcheck.PROBES[config["probe"]](ctx, **ctx.params)
        ctx.synchronize()
        status, message = ("WARN", "; ".join(ctx.warnings)) if ctx.warnings else ("PASS", "ok")
    except rocmcheck.Skip as exc:
        status, message = "SKIP", str(exc)
    except (rocmcheck.ProbeFailure, AssertionError) as exc:
        traceback.print_exc()
        status, message = "FAIL", str(exc) or type(exc).__name__
    except Exception as exc:
        traceback.print_exc()
        status, message = "ERROR", f"{type(exc).__name__}: {exc}"
    watchdog.cancel()
    sys.stderr.flush()
    print(f"{status} {config['variant']}: {message}")
    if config.get("injected"):  # the recorded failure was a drill: say so beside a PASS
        print(f"note: the recorded {config['recorded']} was caused by a fault rocmcheck injected on purpose "
              f"({', '.join(config['injected'])}), a self-test; this script runs without it, so PASS is "
              "what a healthy machine prints")
    if ctx.measurements:
        print(f"measurements: {ctx.measurements}")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if status in ("FAIL", "ERROR") else 0)


# --- building a script ------------------------------------------------------------------------


def _imports(source: str, name: str, is_package: bool) -> Iterator[Tuple[str, Tuple[str, ...]]]:
    """(module, names taken from it) for every import in `source`, relative ones resolved."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            try:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            except (ImportError, ValueError):
                continue
            yield base, tuple(alias.name for alias in node.names)


def _parents(name: str) -> List[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _locate(name: str, probe_module: str, probe_file: Path) -> Optional[Tuple[str, bool]]:
    """Source of module `name`: a sibling of the probe file, or an importable rocmcheck module."""
    package = probe_module.rpartition(".")[0]
    if package and name.startswith(package + "."):
        rest = Path(*name[len(package) + 1:].split("."))
        for path, is_package in ((probe_file.parent / rest.with_suffix(".py"), False),
                                 (probe_file.parent / rest / "__init__.py", True)):
            if path.is_file():
                return path.read_text(encoding="utf-8"), is_package
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    origin = spec.origin if spec is not None else None
    if spec is None or origin is None or not origin.endswith(".py"):
        return None
    return Path(origin).read_text(encoding="utf-8"), spec.submodule_search_locations is not None


def embedded_sources(probe_module: str, probe_file: Path) -> Sources:
    """The probe module, the stand-in package and every rocmcheck (or sibling) module they
    import, followed transitively; other imports (torch, numpy, stdlib) are left alone.

    Found once per probe file as it is now (its path, size and change time): a bug report builds
    a reproducer for every failing verdict, and parsing the same dozen modules for each of
    hundreds of verdicts of one probe was most of the report's time."""
    stat = probe_file.stat()
    return dict(_embedded_sources(probe_module, probe_file, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=64)
def _embedded_sources(probe_module: str, probe_file: Path, mtime_ns: int, size: int) -> Sources:
    """`embedded_sources`, the file's change time and size in the key."""
    implicit = set(_parents(probe_module))  # the probe's own package: served empty
    roots = {"rocmcheck", probe_module.split(".")[0]}
    found: Sources = {probe_module: (probe_file.read_text(encoding="utf-8"), False), "rocmcheck": (SHIM, True)}
    todo = list(found)
    while todo:
        name = todo.pop()
        for base, names in _imports(found[name][0], name, found[name][1]):
            for candidate in [*_parents(base), base, *(f"{base}.{n}" for n in names)]:
                if candidate.split(".")[0] not in roots or candidate in found or candidate in implicit:
                    continue
                located = _locate(candidate, probe_module, probe_file)
                if located is None and candidate == base:
                    raise ReproError(f"{name} imports {base}, whose source cannot be found")
                if located is not None:  # None: `from pkg import name` where name is no module
                    found[candidate] = located
                    todo.append(candidate)
    _check_shim_names(found, probe_module)
    return found


def _top_level_names(source: str) -> set:
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _check_shim_names(found: Sources, probe_module: str) -> None:
    """Fail early, with a reason, when the probe uses a rocmcheck name the stand-in lacks."""
    provided = _top_level_names(SHIM) | {n.split(".")[1] for n in found if n.startswith("rocmcheck.")}
    used = set()
    for node in ast.walk(ast.parse(found[probe_module][0])):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "rocmcheck":
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module == "rocmcheck" and not node.level:
            used.update(a.name for a in node.names)
    missing = sorted(used - provided)
    if missing:
        raise ReproError(f"the probe uses rocmcheck.{', rocmcheck.'.join(missing)}, which a standalone script lacks")


def _literal(value: Any) -> str:
    """`value` as Python source, checked to read back equal."""
    text = pprint.pformat(value, width=100, sort_dicts=False)
    try:
        if ast.literal_eval(text) == value:
            return text
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    return pprint.pformat(json.loads(json.dumps(value, default=repr)), width=100, sort_dicts=False)


def _string_literal(source: str) -> str:
    """A readable triple-quoted raw string when it reads back exactly, else repr()."""
    for quote in ("'''", '"""'):
        text = f"r{quote}{source}{quote}"
        if quote not in source:
            try:
                if ast.literal_eval(text) == source:
                    return text
            except (ValueError, SyntaxError):
                pass
    return repr(source)


def _harness() -> str:
    return "\n\n".join(inspect.getsource(obj) for obj in (EmbeddedSources, reproduce))


def _params(spec: ProbeSpec, verdict: Mapping[str, Any]) -> Dict[str, Any]:
    """The variant's parameters as the probe declared them (tuples stay tuples), else as recorded."""
    for params in spec.variants:
        if variant_id(spec.id, params) == verdict.get("variant"):
            return dict(params)
    return dict(verdict.get("params") or {})


def variant_env(report: Mapping[str, Any], verdict: Mapping[str, Any]) -> Dict[str, str]:
    """The GPU-related environment the variant ran with: host, run-wide, then its own; only
    the GPU allow-list, secret-looking parts of values redacted."""
    host = ((report.get("fingerprint") or {}).get("host") or {}).get("env")
    env: Dict[str, str] = {}
    for layer in (host, (report.get("run") or {}).get("env"), verdict.get("env")):
        if isinstance(layer, dict):
            env.update({str(k): str(v) for k, v in layer.items() if gpu_env_name(str(k)) and v != REDACTED})
    redactor = Redactor()
    return {name: redactor.text(value) for name, value in env.items()}


def filename_for(variant: str) -> str:
    return "repro-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", variant).strip("-.") or "probe") + ".py"


def _docstring(verdict: Mapping[str, Any], report: Mapping[str, Any], machine: str) -> str:
    run = report.get("run") or {}
    injected = (verdict.get("evidence") or {}).get("faults_injected") or []
    message = " ".join(str(verdict.get("message", "")).split())[:300]
    lines = [f"Standalone reproducer for rocmcheck probe variant `{verdict.get('variant')}`.", "",
             f"Recorded verdict: {str(verdict.get('status', '?')).upper()}: {message}",
             f"Recorded on: {machine} (rocmcheck {__version__}, run {run.get('id', '?')})"]
    if injected:
        lines.append(f"That run injected faults ({', '.join(map(str, injected))}): a self-test; "
                     "a healthy machine passes.")
    lines += ["", "Needs only torch (and numpy). Usage: python THIS_FILE.py [DEVICE]",
              "Prints PASS, WARN, SKIP, FAIL or ERROR; exit status 1 when the failure reproduces.",
              "Below: the probe's own code and the rocmcheck modules it uses, verbatim, with a small",
              "stand-in for the `rocmcheck` package, so rocmcheck need not be installed."]
    return "\n".join(lines).replace("\\", "/").replace('"""', "'''")


def build(spec: ProbeSpec, verdict: Mapping[str, Any], report: Mapping[str, Any], machine: str) -> Reproducer:
    """The reproducer for one (failing) verdict of `spec`'s probe; ReproError when impossible."""
    if spec.runs_in is RunsIn.PARENT:  # a torch script would only initialise the GPU and read the same files again
        raise ReproError(f"probe '{spec.id}' reads the driver's files, not torch: `rocmcheck env` on the machine "
                         "shows what it read")
    path = Path(module_file(spec) or "")
    if not path.is_file():
        raise ReproError(f"the source of probe '{spec.id}' is not available")
    sources = embedded_sources(spec.module, path)
    config = {"probe": spec.id, "variant": verdict.get("variant", spec.id), "module": spec.module,
              "params": _params(spec, verdict), "device": str((report.get("run") or {}).get("device") or "cpu"),
              "profile": str((report.get("run") or {}).get("profile") or "full"), "timeout_s": spec.timeout,
              "env": variant_env(report, verdict), "recorded": str(verdict.get("status", "?")).upper(),
              "injected": [str(f) for f in (verdict.get("evidence") or {}).get("faults_injected") or []]}
    ordered = [spec.module, *sorted(n for n in sources if n not in (spec.module, "rocmcheck")), "rocmcheck"]

    def script(helpers: bool) -> str:
        body = ",\n".join(f"    {module!r}: ({_string_literal(sources[module][0])}, {sources[module][1]})"
                           if helpers or module == spec.module else f"    # {module!r}: in the .py file"
                           for module in ordered)
        return (f'#!/usr/bin/env python3\n"""{_docstring(verdict, report, machine)}\n"""\n\n'
                f"CONFIG = {_literal(config)}\n\n\n{_harness()}\n\n"
                f"# module name -> (source, is a package)\nSOURCES = {{\n{body},\n}}\n\n"
                f'if __name__ == "__main__":\n    reproduce(CONFIG, SOURCES)\n')

    return Reproducer(str(config["variant"]), filename_for(str(config["variant"])), script(True), spec.module,
                      script(False))
