"""The one probe API: what a probe receives (`ctx`), the lazy torch and numpy handles, and the
built-in library held to them (docs/architecture.md: probes use the probe API only)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from rocmcheck.context import ProbeContext
from rocmcheck.errors import Skip
from rocmcheck.lazy import LazyModule
from rocmcheck.model import RunsIn

ROOT = Path(__file__).resolve().parent.parent
# multigpu's rank program runs in torchrun's processes, where there is no ProbeContext: a rank prints its
# own progress, and a check it cannot run (also torchapi's Skip) becomes its result in run_check
RANK_PROGRAM = {("multigpu.py", "run_check"), ("multigpu.py", "check_fsdp")}


@pytest.mark.children
def test_progress_is_one_line_of_output_that_is_out_before_the_process_dies():
    """A hung probe is killed: a progress line still in a buffer would never reach the verdict."""
    code = ("import os; from rocmcheck.context import ProbeContext; "
            "ProbeContext().progress('gemm: split-k backward'); os._exit(1)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)  # a pipe: buffered
    assert done.stdout == "gemm: split-k backward\n"


@pytest.mark.children
def test_a_lazy_handle_imports_on_first_use_and_reads_the_live_module(tmp_path, monkeypatch):
    (tmp_path / "lazy_target.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_target", raising=False)  # and removed again after the test
    handle = LazyModule("lazy_target")
    assert "lazy_target" not in sys.modules
    assert handle.VALUE == 1 and "lazy_target" in sys.modules
    sys.modules["lazy_target"].VALUE = 2  # as a fault patches torch.matmul
    assert handle.VALUE == 2


def test_skip_and_measure_are_the_contexts():
    ctx = ProbeContext()
    ctx.measure(gbps=12.5)
    ctx.measure(copies=3)
    assert ctx.measurements == {"gbps": 12.5, "copies": 3}
    with pytest.raises(Skip, match="^no GPU$"):
        ctx.skip("no GPU")


def _one_api_breaches(path: Path) -> list:
    """Where a probe module reports other than through ctx, or imports torch/numpy itself."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for func in functions:
        if (path.name, func.name) in RANK_PROGRAM:
            continue
        probe = any(ast.unparse(d.func if isinstance(d, ast.Call) else d) == "rocmcheck.probe"
                    for d in func.decorator_list)
        for node in ast.walk(func):
            where = f"{path.name}:{getattr(node, 'lineno', func.lineno)} {func.name}"
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "print":
                found.append(f"{where}: print (ctx.progress says where a probe is)")
            elif isinstance(node, ast.Raise) and node.exc is not None and any(
                    call in ast.unparse(node.exc) for call in ("Skip(", "torchapi.missing(")):
                found.append(f"{where}: Skip raised (ctx.skip ends a probe as skip)")
            elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("ProbeFailure"):
                found.append(f"{where}: ProbeFailure raised (ctx.fail ends a probe as fail)")
            elif isinstance(node, ast.Assert):
                found.append(f"{where}: assert (ctx.fail: -O strips an assert, `except Exception` catches it)")
            elif isinstance(node, ast.Attribute) and ast.unparse(node) == "ctx.measurements":
                found.append(f"{where}: ctx.measurements used (ctx.measure records them)")
            elif isinstance(node, ast.Return) and probe and node.value is not None:
                found.append(f"{where}: the probe returns a value (ctx.measure records measurements)")
            elif isinstance(node, ast.Import) and {a.name for a in node.names} & {"torch", "numpy"}:
                found.append(f"{where}: imports torch or numpy itself (from rocmcheck.lazy import np, torch)")
    return found


def test_the_built_in_probes_use_the_one_api():
    found = [breach for path in sorted((ROOT / "probes").glob("*.py")) for breach in _one_api_breaches(path)]
    assert not found, "\n".join(found)


@pytest.mark.children
def test_the_check_of_the_one_api_sees_each_breach(tmp_path):
    """A probe written the old ways, breach by breach: the check above must name every one."""
    probe = tmp_path / "old_ways.py"
    probe.write_text('''
import rocmcheck


@rocmcheck.probe("old-ways", title="t", targets="t")
def old_ways(ctx):
    import torch
    print("step 1", flush=True)
    ctx.measurements["x"] = 1
    if torch.cuda.device_count() == 0:
        raise rocmcheck.Skip("no GPU")
    if ctx.full:
        raise rocmcheck.ProbeFailure("wrong")
    assert ctx.on_gpu, "no GPU"
    return {"gbps": 2.0}
''')
    found = _one_api_breaches(probe)
    kinds = ("imports torch", "print", "ctx.measurements used", "Skip raised", "ProbeFailure raised", "assert",
             "returns a value")
    assert len(found) == len(kinds) and all(any(kind in f for f in found) for kind in kinds), found


def test_a_bare_probe_takes_its_id_from_its_name_and_its_title_from_its_docstring():
    import rocmcheck
    from rocmcheck import registry

    @rocmcheck.probe
    def tiny_copy_check(ctx):
        """Copies come back whole.

        More words that are not the title."""

    spec = registry.get("tiny-copy-check")
    assert spec is not None and spec.title == "Copies come back whole." and spec.func is tiny_copy_check
    assert spec.runs_in is RunsIn.WORKER and spec.variants == ({},)


def test_arguments_still_name_variants_and_where_they_run():
    import rocmcheck
    from rocmcheck import registry

    @rocmcheck.probe(variants={"n": [1, 2]}, runs_in="own-child")
    def sized_check(ctx, n):
        """Sized."""

    spec = registry.get("sized-check")
    assert spec.runs_in is RunsIn.OWN_CHILD and [v.id for v in spec.expand()] == ["sized-check[1]", "sized-check[2]"]


def test_a_gate_variant_runs_in_the_gate_alone_and_stands_for_the_variants_run_runs():
    """`gate_variants`: the gate (and `--gate-only`, and `gate --require`) runs them and not the variants they stand
    for; `run` runs those and not them; `rocmcheck list` (gate_only=None) shows both."""
    import rocmcheck
    from rocmcheck import registry
    from rocmcheck.engine.selection import gate_variants, select

    @rocmcheck.probe(variants={"kind": ["a", "b"]}, gate_variants=[{"kind": "both"}])
    def stood_for_check(ctx, kind):
        """Stood for."""

    specs = {"stood-for-check": registry.get("stood-for-check")}
    ids = {only: [v.id for v in select(specs, gate_only=only)] for only in (True, False, None)}
    assert ids == {True: ["stood-for-check[both]"], False: ["stood-for-check[a]", "stood-for-check[b]"],
                   None: ["stood-for-check[a]", "stood-for-check[b]", "stood-for-check[both]"]}
    assert [v.id for v in gate_variants(specs)] == [v.id for v in gate_variants(specs, ["stood-for-*"])] == [
        "stood-for-check[both]"]
    assert [v.gate_only for v in specs["stood-for-check"].expand()] == [False, False, True]
    with pytest.raises(ValueError, match="a gate variant repeats one of its variants"):
        rocmcheck.probe("repeated-check", title="Repeated.", variants={"kind": ["a"]}, gate_variants=[{"kind": "a"}])(
            lambda ctx, kind: None)


@pytest.mark.children
@pytest.mark.parametrize("declared, said", [
    ("own_child=True", "cannot load probe module '{path}': TypeError: @rocmcheck.probe(own_child=...) is gone: "
                       "write runs_in='own-child'"),
    ("host_only=True", "TypeError: @rocmcheck.probe(host_only=...) is gone: write runs_in='parent'"),
    ("fresh_interpreter=True", "is gone: write runs_in='fresh-interpreter'"),
    ("runs_in='child'", "ValueError: runs_in='child': write one of 'worker', 'own-child', 'fresh-interpreter', "
                        "'parent'"),
    ("runs_in='parent', env=lambda p: {'A': '1'}", "runs_in='parent' has no child"),
    ("title=None", "ValueError: probe 'untitled' needs a title: a docstring or title="),
])
def test_a_probe_declared_the_old_way_or_wrongly_is_one_line_naming_the_fix(tmp_path, declared, said):
    from rocmcheck import registry
    from rocmcheck.errors import UsageError

    path = tmp_path / "old_probe.py"
    path.write_text(f"import rocmcheck\n\n\n@rocmcheck.probe({declared})\ndef untitled(ctx):\n    pass\n")
    with pytest.raises(UsageError) as raised:
        registry.load_module(path)
    message = str(raised.value)
    assert said.format(path=path) in message and "\n" not in message, message


def _readme_blocks() -> list:
    """The python blocks of the docs' page "Writing your own probes": the probe, then its test."""
    text = (ROOT / "docs" / "writing-probes.md").read_text(encoding="utf-8")
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


@pytest.mark.children
def test_the_readmes_probe_is_short_and_its_test_passes(tmp_path, monkeypatch):
    """The docs' example, exactly: a probe in under 20 lines, proven by run_inline (pass, and fail
    under the fault it must catch)."""
    probe, test = _readme_blocks()
    assert len(probe.strip().splitlines()) < 20
    (tmp_path / "copy_back.py").write_text(probe)
    monkeypatch.setenv("ROCMCHECK_PROBES_PATH", str(tmp_path))
    scope: dict = {}
    exec(compile(test, "docs/writing-probes.md", "exec"), scope)
    scope["test_copy_back_passes_and_catches_zeros"]()


SWALLOWING = '''
import rocmcheck


@rocmcheck.probe(variants={"how": ["skip", "fail"]})
def swallowing(ctx, how):
    """Swallows what it can."""
    try:
        ctx.skip("not here") if how == "skip" else ctx.fail("wrong")
    except Exception:
        pass


@rocmcheck.probe
def declares_a_hang(ctx):
    """Its ranks are stuck."""
    try:
        ctx.hang("rank 1 did not finish")
    except Exception:
        pass


@rocmcheck.probe(runs_in="parent")
def swallowing_host(ctx):
    """Reads host files, and swallows what it can."""
    try:
        ctx.skip("no such file")
    except Exception:
        pass
'''


def test_a_probe_cannot_swallow_its_own_skip_or_fail(tmp_path, monkeypatch, rocm_run):
    """In-process, in a worker child and in the parent (whose probe call lets Ctrl-C through)."""
    from rocmcheck.testing import Status, run_inline

    (tmp_path / "swallowing.py").write_text(SWALLOWING)
    monkeypatch.setenv("ROCMCHECK_PROBES_PATH", str(tmp_path))
    skipped, failed = run_inline("swallowing", how="skip"), run_inline("swallowing", how="fail")
    assert (skipped.status, skipped.message, failed.status, failed.message) == (Status.SKIP, "not here",
                                                                                Status.FAIL, "wrong")
    hung = run_inline("declares-a-hang")  # in a child, the watchdog ends it first (tests/test_reliability.py)
    assert (hung.status, hung.message) == (Status.HANG, "rank 1 did not finish")
    verdicts = {v["variant"]: (v["status"], v["message"]) for v in rocm_run(probe="swallowing*")}
    assert verdicts == {"swallowing[skip]": ("skip", "not here"), "swallowing[fail]": ("fail", "wrong"),
                        "swallowing-host": ("skip", "no such file")}


def test_run_inline_puts_back_the_faults_it_installed_and_refuses_those_that_end_the_process():
    import torch

    from rocmcheck.errors import UsageError
    from rocmcheck.testing import Status, run_inline

    to = torch.Tensor.to
    result = run_inline("device-smoke", inject="copy-zeros")
    assert result.status is Status.FAIL and result.faults_installed == ("copy-zeros",)
    assert "Traceback" in result.traceback
    assert torch.Tensor.to is to and "to" not in vars(torch.Tensor)
    assert run_inline("device-smoke").status is Status.PASS
    with pytest.raises(UsageError, match="fault 'segv' crashes, hangs or ends the process"):
        run_inline("device-smoke", inject="segv")
    with pytest.raises(UsageError, match="unknown probe 'no-such-probe'"):
        run_inline("no-such-probe")
    assert run_inline("multigpu-peer-copy").status is Status.SKIP  # its `requires`, as the runner checks them


def test_run_inline_costs_milliseconds():
    """What an author's test pays per probe once torch is imported (medians, printed for the record)."""
    import time

    from rocmcheck import registry
    from rocmcheck.testing import Status, run_inline

    @registry.probe
    def inline_trivial(ctx):
        """Does nothing."""

    def median(probe_id: str) -> float:
        run_inline(probe_id)  # imports what the probe needs
        times = []
        for _ in range(15):
            began = time.perf_counter()
            assert run_inline(probe_id).status is Status.PASS
            times.append(time.perf_counter() - began)
        return sorted(times)[len(times) // 2]

    trivial, smoke = median("inline-trivial"), median("device-smoke")
    print(f"run_inline median: trivial {trivial * 1e3:.2f} ms, device-smoke {smoke * 1e3:.2f} ms")
    assert trivial < 0.1 and smoke < 1.0  # a child of its own costs 8 ms forked, 900 ms spawned (docs/isolation.md)
