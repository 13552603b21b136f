"""Probe registration (`@rocmcheck.probe`) and discovery of probe modules.

Probe modules are loaded by file path, the built-in ones (`rocmcheck/probes/`) as
`rocmcheck.probes.<name>` and a user's `--probes-path` folders under private module names,
so no generic top-level name lands on anybody's import path. Loading a probe module never imports torch.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from .errors import UsageError
from .model import ProbeFn, ProbeSpec, Requires, expand_variants

PROBES_PATH_ENV = "ROCMCHECK_PROBES_PATH"
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")

_REGISTRY: Dict[str, ProbeSpec] = {}


def probe(
    id: str,
    *,
    title: str,
    targets: str,
    links: Sequence[str] = (),
    timeout: float = 60.0,
    gate: Union[bool, Callable[[Mapping[str, Any]], bool]] = False,
    requires: Union[Requires, Mapping[str, Any], None] = None,
    variants: Union[None, Mapping[str, Sequence[Any]], Sequence[Mapping[str, Any]]] = None,
    fresh_interpreter: bool = False,
    own_child: bool = False,
    env: Optional[Callable[[Mapping[str, Any]], Mapping[str, str]]] = None,
    preload: Sequence[str] = (),
    per_device: bool = True,
    host_only: bool = False,
    baseline: Optional[Callable[[], Any]] = None,
) -> Callable[[ProbeFn], ProbeFn]:
    """Register `func(ctx, **params)` as a probe.

    A probe passes by returning (optionally a dict of measurements), fails by raising
    `AssertionError`/`rocmcheck.ProbeFailure`, skips with `ctx.skip(reason)`; any other
    exception is `error`. `variants` is a list of parameter dicts or a dict of lists
    (cartesian product); `gate` is a bool or a predicate over a variant's parameters.
    `env(params)` returns variables set in that variant's child before it imports torch
    (the child is then a fresh interpreter); they are recorded in the verdict.
    Variants run one after another in a worker child per device, which puts back the settings a
    probe may change (`rocmcheck.probe_state`); `own_child=True` gives each variant a child of
    its own instead, for a probe that changes what cannot be put back (a process group, a
    compile cache, threads), as `fresh_interpreter` and `env` do.
    `preload` names modules the zygote imports once when this probe is selected (an import
    that every child would otherwise pay for, like `torch._dynamo` before an optimizer step).
    `per_device=False` runs the probe once per node instead of once on every GPU under test
    (host checks, and multi-GPU probes that choose their own devices).
    `host_only=True` marks a probe that only reads host files: it runs in the parent, with no
    child and no GPU runtime. `baseline()` is read once before the run's first probe and handed
    to the probe as `ctx.baseline`; such a probe runs last on its device (counters before/after).
    """
    if not _ID_RE.match(id):
        raise ValueError(f"probe id {id!r} must match {_ID_RE.pattern}")
    req = requires if isinstance(requires, Requires) else Requires(**dict(requires or {}))

    def register(func: ProbeFn) -> ProbeFn:
        spec = ProbeSpec(
            id=id, title=title, targets=targets, func=func, module=func.__module__,
            links=tuple(links), timeout=float(timeout), gate=gate, requires=req,
            variants=expand_variants(variants), fresh_interpreter=fresh_interpreter, own_child=own_child, env=env,
            preload=tuple(preload), per_device=per_device, host_only=host_only, baseline=baseline,
        )
        existing = _REGISTRY.get(id)
        if existing is not None and existing.module != spec.module:
            raise UsageError(f"probe id '{id}' is defined twice ({existing.module} and {spec.module})")
        _REGISTRY[id] = spec
        return func

    return register


def builtin_probes_dir() -> Path:
    """The built-in probe library, `rocmcheck/probes/` (in a checkout and in the wheel alike)."""
    return Path(__file__).resolve().parent / "probes"


def probes_paths(extra: Iterable[str] = ()) -> List[Path]:
    """The built-in folder, then the environment variable's folders, then `--probes-path`."""
    env = [p for p in os.environ.get(PROBES_PATH_ENV, "").split(os.pathsep) if p]
    paths = [builtin_probes_dir()]
    for raw in [*env, *extra]:
        path = Path(raw).expanduser()
        if not path.is_dir() or not os.access(path, os.R_OK | os.X_OK):
            raise UsageError(f"probes path '{raw}' is not a readable directory")
        paths.append(path.resolve())
    return paths


def _module_name(path: Path) -> str:
    if path.parent == builtin_probes_dir().resolve():
        return f"rocmcheck.probes.{path.stem}"
    digest = hashlib.sha1(str(path.parent).encode()).hexdigest()[:10]
    return f"rocmcheck_userprobes_{digest}.{path.stem}"


def load_module(path: Path) -> None:
    """Import one probe module by path (once per process)."""
    name = _module_name(path)
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load probe module '{path}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except UsageError:
        raise
    except Exception as exc:  # a user's broken module is bad input, not a crash of ours
        del sys.modules[name]
        first = (str(exc).splitlines() or [""])[0]
        raise UsageError(f"cannot load probe module '{path}': {type(exc).__name__}: {first}") from None


def load_all(extra_paths: Iterable[str] = ()) -> Dict[str, ProbeSpec]:
    """Load every probe module of every probes path; returns the registry (id -> spec)."""
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
