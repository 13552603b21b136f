"""Probe registration (`@rocmcheck.probe`) and discovery of probe modules.

The built-in library is the package `rocmcheck.probes` (the folder `probes/` of the source tree,
mapped into the wheel by `package-dir`), found through the import system, so a wheel, an editable
install and a plain checkout load the same modules. A user's `--probes-path` folders are loaded by
file path under private module names, so no generic top-level name lands on anybody's import path.
Loading a probe module never imports torch.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from .errors import UsageError
from .model import Budget, ProbeFn, ProbeSpec, Requires, RunsIn, expand_variants

PROBES_PATH_ENV = "ROCMCHECK_PROBES_PATH"
BUILTIN = "rocmcheck.probes"
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")

_REGISTRY: Dict[str, ProbeSpec] = {}


# The isolation keywords `runs_in` replaced: a probe that still uses one fails to load, naming the new spelling.
_RUNS_IN_WAS = {"fresh_interpreter": RunsIn.FRESH_INTERPRETER, "own_child": RunsIn.OWN_CHILD,
                "host_only": RunsIn.PARENT}


def probe(
    id: Union[str, ProbeFn, None] = None,
    *,
    title: Optional[str] = None,
    targets: str = "",
    links: Sequence[str] = (),
    timeout: float = 60.0,
    gate: Union[bool, Callable[[Mapping[str, Any]], bool]] = False,
    requires: Union[Requires, Mapping[str, Any], None] = None,
    variants: Union[None, Mapping[str, Sequence[Any]], Sequence[Mapping[str, Any]]] = None,
    gate_variants: Sequence[Mapping[str, Any]] = (),
    runs_in: Union[RunsIn, str] = RunsIn.WORKER,
    env: Optional[Callable[[Mapping[str, Any]], Mapping[str, str]]] = None,
    preload: Sequence[str] = (),
    per_device: bool = True,
    baseline: Optional[Callable[[], Any]] = None,
    budget: Optional[Budget] = None,
    level_share: float = 1.0,
    **removed: Any,
) -> Any:
    """Register `func(ctx, **params)` as a probe: `@rocmcheck.probe` bare, or with arguments.

    Bare, the id is the function's name with dashes for underscores (`device_smoke` ->
    `device-smoke`) and the title its docstring's first line; `id` and `title` override them.
    A probe passes by returning None; `ctx.fail(message)` ends it as fail, `ctx.skip(reason)`
    as skip, any other exception as error (an `AssertionError` from a check it calls as fail);
    `ctx.measure(**values)`, `ctx.warn(message)` and `ctx.progress(text)` report along the way.
    `variants` is a list of parameter dicts or a dict of lists (cartesian product); `gate` is a
    bool or a predicate over a variant's parameters. `gate_variants` are variants only the gate runs (`run`
    runs the variants each stands for): one that checks at once what several of `variants` check one by one, where
    their setup would otherwise be paid once each on the gate's path (`transfer` sends by every method in one).
    `runs_in` says where its variants run (`model.RunsIn`): its GPU's worker child (the default,
    which puts back the settings a probe may change), a child per variant ("own-child"), a new
    interpreter per variant ("fresh-interpreter") or the parent itself ("parent", host files only).
    `env(params)` returns variables set in a variant's child before it imports torch: a variant
    with any runs in a fresh interpreter whatever `runs_in` says, so `env` alone needs no
    `runs_in` (and cannot go with "parent"); they are recorded in the verdict.
    `preload` names modules the zygote imports once when this probe is selected (an import
    that every child would otherwise pay for, like `torch._dynamo` before an optimizer step).
    `per_device=False` runs the probe once per node instead of once on every GPU under test
    (host checks, and multi-GPU probes that choose their own devices).
    `baseline()` is read once before the run's first probe and handed to the probe as
    `ctx.baseline`; such a probe runs last on its device (counters before/after).
    `budget` is what one variant may cost per GPU, in seconds, host setup included: a number for every
    level, `{level: seconds}`, or a function of the variant's parameters returning either (`model.budget_at`;
    default `model.DEFAULT_BUDGET_S`, 2 s); a variant with a level gets its level's work on top. Going over it is
    named in the report, not a failure. `level_share`: at levels 2 and 3 the probes with levels share each GPU's
    level budget (sdc, gpu-memory and sustained-load run one after another on it); this probe's part, given
    as its `ctx.budget_s` (level 1's work is the probe's alone).
    """
    for name in removed:
        if name in _RUNS_IN_WAS:
            raise TypeError(f"@rocmcheck.probe({name}=...) is gone: write runs_in={_RUNS_IN_WAS[name].value!r}")
        raise TypeError(f"@rocmcheck.probe got an unexpected keyword argument {name!r}")
    try:
        where = RunsIn(runs_in)
    except ValueError:
        raise ValueError(f"runs_in={runs_in!r}: write one of {', '.join(repr(r.value) for r in RunsIn)}") from None
    if env is not None and where is RunsIn.PARENT:
        raise ValueError("env= sets variables in a variant's child before it imports torch: runs_in='parent' "
                         "has no child")
    req = requires if isinstance(requires, Requires) else Requires(**dict(requires or {}))

    def register(func: ProbeFn) -> ProbeFn:
        probe_id = id if isinstance(id, str) else func.__name__.replace("_", "-")
        if not _ID_RE.match(probe_id):
            raise ValueError(f"probe id {probe_id!r} must match {_ID_RE.pattern}")
        doc = (func.__doc__ or "").strip()
        if not (title or doc):
            raise ValueError(f"probe '{probe_id}' needs a title: a docstring or title=")
        expanded = expand_variants(variants)
        gate_own = tuple(dict(p) for p in gate_variants)
        if any(p in expanded for p in gate_own):
            raise ValueError(f"probe '{probe_id}': a gate variant repeats one of its variants")
        spec = ProbeSpec(
            id=probe_id, title=title or doc.splitlines()[0], targets=targets, func=func, module=func.__module__,
            links=tuple(links), timeout=float(timeout), gate=gate, requires=req, variants=expanded,
            gate_variants=gate_own,
            runs_in=where, env=env, preload=tuple(preload), per_device=per_device, baseline=baseline,
            budget=budget, level_share=float(level_share),
        )
        existing = _REGISTRY.get(probe_id)
        if existing is not None and existing.module != spec.module:
            raise UsageError(f"probe id '{probe_id}' is defined twice ({existing.module} and {spec.module})")
        _REGISTRY[probe_id] = spec
        return func

    return register(id) if callable(id) else register


def builtin_package() -> ModuleType:
    """The built-in probe library, `rocmcheck.probes`, as the import system finds it: installed
    (wheel, or an editable install's finder), else in the source tree this package sits in."""
    try:
        return importlib.import_module(BUILTIN)
    except ModuleNotFoundError as exc:
        if exc.name != BUILTIN:
            raise
    return _from_source_tree()


def _from_source_tree() -> ModuleType:
    """A plain checkout, nothing installed: `probes/` beside this package's folder is registered
    as `rocmcheck.probes` (its submodules then import by name, from that folder), as the wheel's
    `package-dir` mapping does. Without it the library is missing, never silently empty."""
    folder = Path(__file__).resolve().parent.parent / "probes"
    init = folder / "__init__.py"
    spec = importlib.util.spec_from_file_location(BUILTIN, init, submodule_search_locations=[str(folder)])
    if not init.is_file() or spec is None or spec.loader is None:
        raise UsageError(f"the built-in probe library {BUILTIN} cannot be found: it is not installed with "
                         f"rocmcheck and there is no {init}; reinstall rocmcheck")
    module = importlib.util.module_from_spec(spec)
    sys.modules[BUILTIN] = module
    spec.loader.exec_module(module)
    setattr(sys.modules[__package__], "probes", module)
    return module


def probes_paths(extra: Iterable[str] = ()) -> List[Path]:
    """The users' probe folders: the environment variable's, then `--probes-path`."""
    env = [p for p in os.environ.get(PROBES_PATH_ENV, "").split(os.pathsep) if p]
    paths = []
    for raw in [*env, *extra]:
        path = Path(raw).expanduser()
        if not path.is_dir() or not os.access(path, os.R_OK | os.X_OK):
            raise UsageError(f"probes path '{raw}' is not a readable directory")
        paths.append(path.resolve())
    return paths


@contextlib.contextmanager
def _loading(name: str, where: object) -> Iterator[None]:
    """A probe module that fails to load is one line of bad input, not a crash of ours."""
    try:
        yield
    except UsageError:
        raise
    except Exception as exc:
        sys.modules.pop(name, None)
        first = (str(exc).splitlines() or [""])[0]
        raise UsageError(f"cannot load probe module '{where}': {type(exc).__name__}: {first}") from None


def load_module(path: Path) -> None:
    """Import one of a user's probe modules by path (once per process)."""
    digest = hashlib.sha1(str(path.parent).encode()).hexdigest()[:10]
    name = f"rocmcheck_userprobes_{digest}.{path.stem}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load probe module '{path}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    with _loading(name, path):
        spec.loader.exec_module(module)


def builtin_modules() -> List[str]:
    """The module names of the built-in library; never empty (that is a broken install, not zero probes)."""
    package = builtin_package()
    names = [f"{BUILTIN}.{info.name}" for info in pkgutil.iter_modules(package.__path__)
             if not info.name.startswith("_")]  # private helpers are not probes
    if not names:
        raise UsageError(f"the built-in probe library {BUILTIN} ({', '.join(package.__path__)}) holds no probe "
                         "module; reinstall rocmcheck")
    return names


def load_all(extra_paths: Iterable[str] = ()) -> Dict[str, ProbeSpec]:
    """Load the built-in library, then every probe module of the users' folders; returns the
    registry (id -> spec)."""
    for name in builtin_modules():
        with _loading(name, name):
            importlib.import_module(name)
    for folder in probes_paths(extra_paths):
        for path in sorted(folder.glob("*.py")):
            if not path.name.startswith("_"):  # __init__.py and private helpers are not probes
                load_module(path)
    return dict(_REGISTRY)


def get(probe_id: str) -> Optional[ProbeSpec]:
    return _REGISTRY.get(probe_id)


def module_file(spec: ProbeSpec) -> str:
    """The file a probe was loaded from, so a child can load exactly that module."""
    return getattr(sys.modules[spec.module], "__file__", "") or ""
