"""Every torch name the package and its probes use works on every supported torch, checked on whichever torch is
installed: a name newer than the oldest supported torch is reached only through rocmcheck/torchapi.py
(with its fallback), and every other name is one the oldest supported torch really has
(tests/data/torch_names_in_oldest.json, recorded under that torch by scripts/torch_names.py --record)."""
import ast
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from rocmcheck import torchapi

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("torch_names", ROOT / "scripts" / "torch_names.py")
torch_names = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_names)

SINCE = torchapi.SINCE
IN_OLDEST = torch_names.in_oldest()["in_oldest"]
USES = torch_names.uses()
# torchapi falls back on older torch; the simulated GPU checks its own minimum torch before it builds
FACADES = ("rocmcheck/torchapi.py", "rocmcheck/simgpu/")


def test_version_dependent_names_are_reached_only_through_torchapi():
    outside = {name: [p for p in places if not p.startswith(FACADES)] for name, places in USES.items()
               if torch_names.versioned(name, SINCE)}
    assert not {n: p for n, p in outside.items() if p}, \
        "use these through rocmcheck.torchapi, which falls back on older torch"


def test_every_other_name_is_in_the_oldest_supported_torch():
    unknown = {name: places[:2] for name, places in USES.items()
               if not torch_names.versioned(name, SINCE) and name not in IN_OLDEST}
    assert not unknown, (
        f"not known to exist in torch {torchapi.OLDEST}: run `python scripts/torch_names.py --record` "
        f"under torch {torchapi.OLDEST}.x (make compat keeps one), or add the name to "
        f"rocmcheck.torchapi.SINCE with a fallback in rocmcheck/torchapi.py")


def test_names_resolve_on_the_installed_torch():
    """What the oldest torch has, this one has too (a removal shows here), except the fallbacks that only
    torchapi reaches for on old torch; and every table name whose version this torch reaches."""
    import torch

    installed = torchapi.version_tuple(torch.__version__)
    lacking = [name for name, places in USES.items()
               if name in IN_OLDEST and not all(p.startswith(FACADES) for p in places)
               and not torchapi.lookup(name)[0]]
    lacking += [name for name, (first, _) in SINCE.items()
                if torchapi.version_tuple(first) <= installed and not torchapi.lookup(name)[0]]
    assert not lacking, f"torch {torch.__version__} lacks {lacking}"


def test_the_reading_covers_the_probe_library():
    """The probes live beside the package, in probes/: every probe file that uses torch is read."""
    read = {place.rsplit(":", 1)[0] for places in USES.values() for place in places}
    using = {f"probes/{p.name}" for p in (ROOT / "probes").glob("*.py")
             if any(isinstance(n, ast.Name) and n.id == "torch" for n in ast.walk(ast.parse(p.read_text("utf-8"))))}
    assert len(using) > 10 and using <= read, sorted(using - read)


def test_the_reading_sees_aliases_imports_and_chains():
    """The source reading itself: a detector that cannot fire would pass every check above."""
    found = torch_names.uses_in(
        "import torch\nimport torch.nn.functional as F\nfrom torch.nn.attention import sdpa_kernel as k\n"
        "F.scaled_dot_product_attention(q)\nk.x\ntorch.backends.cuda.preferred_blas_library()\n"
        "def f(torch):\n    return torch.accelerator.synchronize\n", "m.py")
    assert {"torch.nn.functional.scaled_dot_product_attention", "torch.nn.attention.sdpa_kernel",
            "torch.nn.attention.sdpa_kernel.x", "torch.backends.cuda.preferred_blas_library",
            "torch.accelerator.synchronize"} <= set(found)
    assert "torch.backends.cuda" not in found  # only the outermost link of a chain counts
    assert torch_names.versioned("torch.nn.attention.SDPBackend.MATH", SINCE)


@pytest.mark.parametrize("text, expected", [("2.4.1+rocm6.0", (2, 4)), ("2.6.0a0+git1234", (2, 6)),
                                            ("2.13.0+cpu", (2, 13)), ("2.1.2", (2, 1))])
def test_version_tuple(text, expected):
    assert torchapi.version_tuple(text) == expected


@pytest.mark.filterwarnings("ignore:.*sdp_kernel.*is deprecated:FutureWarning")
def test_fallbacks_on_an_old_torch(monkeypatch):
    """On the installed torch, hide each newer name and check the fallback torchapi gives instead."""
    import torch

    real_lookup = torchapi.lookup
    hidden = {"torch.nn.attention.sdpa_kernel", "torch.amp.GradScaler", "torch.OutOfMemoryError",
              "torch.backends.cuda.preferred_blas_library", "torch.distributed.fsdp.fully_shard"}
    monkeypatch.setattr(torchapi, "lookup", lambda name: (False, None) if name in hidden else real_lookup(name))
    assert torchapi.out_of_memory_error() is torch.cuda.OutOfMemoryError
    assert torchapi.preferred_blas_library() is None
    with pytest.raises(torchapi.Skip, match=r"GradScaler for cpu \(torch.amp.GradScaler arrived in torch 2.3\)"):
        torchapi.grad_scaler("cpu")
    if torchapi.resolve("torch.distributed._composable.fsdp.fully_shard") is not None:
        # the package's function, not its module of the same name (the module was taken on torch 2.3-2.5)
        assert callable(torchapi.fully_shard()) and not isinstance(torchapi.fully_shard(), types.ModuleType)
    if torchapi.resolve("torch.backends.cuda.sdp_kernel") is not None:  # deprecated; may leave a future torch
        with torchapi.sdpa_kernel(["MATH"]):
            assert torch.backends.cuda.math_sdp_enabled() and not torch.backends.cuda.flash_sdp_enabled()
        with pytest.raises(torchapi.Skip, match="cannot force SDPBackend.CUDNN_ATTENTION"):
            torchapi.sdpa_kernel(["CUDNN_ATTENTION"])


@pytest.mark.children
def test_below_the_supported_range_every_command_says_so(tmp_path):
    """A torch older than the range: one line naming the range, exit 2, before any probe runs."""
    import subprocess

    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("from .version import __version__\n")
    (fake / "version.py").write_text("__version__ = '2.1.2+cu121'\n")
    done = subprocess.run([sys.executable, "-m", "rocmcheck", "gate", "--device", "cpu", "--out-dir",
                           str(tmp_path / "out")], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "2.1.2" in lines[0] and "2.2" in lines[0], done.stderr
