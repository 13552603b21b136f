"""Library imports: every training library that is installed, imported in its own child.

Targets the failures that stop a training script at its imports, before any GPU work:
`module 'torch' has no attribute 'int1'` from torchao, torchtune or diffusers on torch < 2.6
(torch.int1-int7 first exist in 2.6: pytorch/ao#1544, MiroMindAI/MiroTrain#6,
Tencent-Hunyuan/Hunyuan-GameCraft-1.0#24), and binary extensions built for another torch,
ROCm or CUDA that crash the process when loaded (flash_attn, xformers, bitsandbytes).

One variant per library, each in its own child, so a crash names its library and the others
still run. An AttributeError against a torch module (anywhere in the exception's chain: some
libraries re-raise import errors as RuntimeError) is `fail` with the library and torch
versions, for the known issue to match; any other exception is `error`; a library that is not
installed is `skip`.
"""
from __future__ import annotations

import re
from typing import Iterator, Optional

import rocmcheck
from rocmcheck.lazy import torch

# import name -> distribution name (for its version)
LIBRARIES = {
    "torchao": "torchao",
    "torchtune": "torchtune",
    "bitsandbytes": "bitsandbytes",
    "flash_attn": "flash-attn",
    "xformers": "xformers",
    "triton": "triton",
    "peft": "peft",
    "transformers": "transformers",
    "accelerate": "accelerate",
    "deepspeed": "deepspeed",
}
TORCH_ATTRIBUTE = re.compile(r"module '(torch(?:\.[\w.]+)?)' has no attribute '(\w+)'")

LINKS = (
    "https://github.com/pytorch/ao/pull/1544",
    "https://github.com/MiroMindAI/MiroTrain/issues/6",
    "https://github.com/Tencent-Hunyuan/Hunyuan-GameCraft-1.0/issues/24",
)


def chain(exc: Optional[BaseException]) -> Iterator[BaseException]:
    """The exception and what it was raised from or during, once each."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def torch_attribute_error(exc: BaseException) -> Optional[str]:
    """"module 'torch' has no attribute 'int1'" when the import failed on a missing torch name."""
    for link in chain(exc):
        readable = isinstance(link, (AttributeError, ImportError, RuntimeError))
        match = TORCH_ATTRIBUTE.search(str(link)) if readable else None
        if match:
            return match.group(0)
    return None


def version(distribution: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown version"


@rocmcheck.probe(
    "library-imports",
    per_device=False,
    title="Each installed training library imported in its own child",
    targets="module 'torch' has no attribute 'int1' (torchao/torchtune on torch < 2.6), "
            "extensions that crash at import",
    links=LINKS,
    timeout=120,
    gate=lambda p: p["library"] in ("torchao", "torchtune"),
    variants={"library": list(LIBRARIES)},
)
def library_imports(ctx: rocmcheck.ProbeContext, library: str) -> None:
    import importlib
    import importlib.util

    if importlib.util.find_spec(library) is None:
        ctx.skip(f"{library} is not installed")
    pair = f"{LIBRARIES[library]} {version(LIBRARIES[library])} with torch {torch.__version__}"
    try:
        importlib.import_module(library)
    except Exception as exc:
        missing = torch_attribute_error(exc)
        if missing is None:
            raise
        ctx.fail(f"import {library} failed: {missing} ({pair}): "
                 "the library needs a newer torch")
    ctx.measure(imported=pair)
