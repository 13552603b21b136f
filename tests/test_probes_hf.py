"""The training stack: `library-imports` against fake libraries that fail the ways real ones do,
and `hf-training` (transformers + peft + accelerate) proven by fault injection. Real children,
on the CPU."""
from __future__ import annotations

import importlib.util
import textwrap

import pytest

from conftest import by_variant, probe_module

FAKE_LIBRARIES = {
    # torch < 2.6 has no torch.int1: take it away in the child, then use it as torchao's dtypes do
    "torchao/__init__.py": "import torch\ndelattr(torch, 'int1')\nfrom .dtypes import BOUNDS\n",
    "torchao/dtypes.py": "import torch\nBOUNDS = {torch.int1: (-1, 0)}\n",
    # re-raised as another exception, without the original text (as lazy importers do)
    "torchtune/__init__.py": textwrap.dedent("""
        import torch
        delattr(torch, 'uint4')
        try:
            torch.uint4
        except AttributeError as exc:
            raise RuntimeError("Failed to import torchtune.modules.peft") from exc
    """),
    "flash_attn/__init__.py": "import ctypes\nctypes.string_at(0)\n",  # an extension that dereferences NULL
    "bitsandbytes/__init__.py": "raise OSError('libbitsandbytes_rocm62.so: cannot open shared object file')\n",
}
REAL = ("peft", "transformers", "accelerate")


def test_library_imports_fail_crash_error_skip_and_pass_each_in_its_own_child(rocm_run, tmp_path):
    for path, text in FAKE_LIBRARIES.items():
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(text)
    faked = " or ".join(f"[{path.split('/')[0]}]" for path in FAKE_LIBRARIES)
    verdicts = by_variant(rocm_run(probe="library-imports", keyword=faked, env={"PYTHONPATH": str(tmp_path)}))
    # without the fakes: a broken flash_attn would also crash `import peft` (transformers imports it)
    verdicts.update(by_variant(rocm_run(probe="library-imports", keyword=f"not ({faked})")))
    assert len(verdicts) == 10

    int1 = verdicts["library-imports[torchao]"]
    assert int1["status"] == "fail"
    assert "module 'torch' has no attribute 'int1'" in int1["message"] and "with torch 2." in int1["message"]
    issue = {i["id"]: i for i in int1["known_issues"]}["torch-int1-missing"]
    assert "torch >= 2.6" in issue["workaround"]
    uint4 = verdicts["library-imports[torchtune]"]
    assert uint4["status"] == "fail" and "has no attribute 'uint4'" in uint4["message"]
    assert [i["id"] for i in uint4["known_issues"]] == ["torch-int1-missing"]

    crash = verdicts["library-imports[flash_attn]"]
    assert crash["status"] == "crash" and "SIGSEGV" in crash["message"]
    error = verdicts["library-imports[bitsandbytes]"]
    assert error["status"] == "error" and "cannot open shared object file" in error["message"]
    assert not error["known_issues"]

    for library in ("xformers", "triton", "deepspeed", *REAL):
        v = verdicts[f"library-imports[{library}]"]
        if importlib.util.find_spec(library) is None:
            assert v["status"] == "skip" and v["message"] == f"{library} is not installed", v
        else:
            assert v["status"] == "pass", v


@pytest.mark.parametrize("message, expected", [
    ("module 'torch' has no attribute 'int1'", "torch-int1-missing"),
    ("module 'torch.nn.attention' has no attribute 'sdpa_kernel'", "library-needs-newer-torch"),
])
def test_a_missing_torch_name_matches_one_known_issue(message, expected):
    from rocmcheck.knowledge import known_issues
    from rocmcheck.model import Status, Verdict

    verdict = Verdict("library-imports", "library-imports[x]", Status.FAIL, message=f"import x failed: {message}")
    assert [i["id"] for i in known_issues.match(verdict, {})] == [expected]


HF_STACK = all(importlib.util.find_spec(m) for m in REAL)
needs_hf = pytest.mark.skipif(not HF_STACK, reason="the hf extra is not installed: pip install -e '.[hf]'")


@needs_hf
def test_hf_training_passes_every_variant_against_the_float64_reference(rocm_run):
    verdicts = by_variant(rocm_run(probe="hf-training"))
    assert len(verdicts) == 8  # placement x precision x activations
    for variant, v in verdicts.items():
        assert v["status"] == "pass", (variant, v["message"])
        m = v["measurements"]
        assert 0 < m["trainable"] < m["params"] and len(m["losses"]) == len(m["ref_losses"]) == 4


@needs_hf
def test_hf_training_fails_on_a_batch_corrupted_on_its_way_and_on_zero_gradients(rocm_run):
    """batch-corrupt changes one token of every DataLoader batch (Accelerate's prepared loader
    included); grad-zeros zeroes the gradients of a backward after an autocast forward."""
    corrupt = by_variant(rocm_run(probe="hf-training", keyword="stored", inject="batch-corrupt"))
    for variant, v in corrupt.items():
        assert v["status"] == "fail" and "batch 1 reached the model changed (1 of 64 tokens" in v["message"], variant
    assert "loss differs from the CPU float64 run" in corrupt["hf-training[accelerate-fp32-stored]"]["message"]
    zeros = by_variant(rocm_run(probe="hf-training", keyword="stored", inject="grad-zeros"))
    for variant, v in zeros.items():
        if "-bf16-" in variant:
            assert v["status"] == "fail" and "8 of 8 LoRA tensors got only zero gradients" in v["message"], variant
            assert "adapter weights did not change" in v["message"]
        else:  # no autocast, no fault
            assert v["status"] == "pass", (variant, v["message"])


def test_hf_training_skips_naming_the_missing_library(monkeypatch):
    import rocmcheck

    hf = probe_module("hf")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(rocmcheck.Skip, match=r"^peft not installed: pip install 'rocmcheck\[hf\]'$"):
        hf.require_stack(rocmcheck.ProbeContext())
