"""Standalone reproducers, end to end: a real run records a failing verdict under a fault,
`rocmcheck report` builds its reproducer, and the script, run where rocmcheck cannot be
imported, prints FAIL with that fault installed and PASS without it.

Every probe with a fault that bites on the CPU has a case. All scripts run in one driver
process that imports torch once and forks a child per script (as the zygote does), two
at a time, so the test costs one `import torch`, not one per script.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from conftest import isolated_env, linked_venv
from rocmcheck import registry
from rocmcheck.engine.options import RunOptions
from rocmcheck.engine.runner import Runner
from rocmcheck.host import fingerprint
from rocmcheck.model import Status, Verdict, variant_id
from rocmcheck.outputs import bugreport, repro

FAKE_PROBES = '''
import os

import rocmcheck


@rocmcheck.probe("repro-fake-copy", title="fake", targets="params and variant env reach the reproducer",
                 timeout=30, variants=[{"shape": (3, 5), "mode": "strict"}],
                 env=lambda p: {"PYTORCH_REPRO_FAKE_MODE": p["mode"]})
def fake_copy(ctx, shape, mode):
    import numpy as np
    import torch

    seen = os.environ.get("PYTORCH_REPRO_FAKE_MODE")
    if seen != mode or not isinstance(shape, tuple):
        ctx.fail(f"variant not reproduced: env {seen!r}, shape {shape!r}")
    want = np.arange(1, 16, dtype=np.float32).reshape(shape)
    got = torch.from_numpy(want).to(ctx.device, copy=True).cpu().numpy()
    ctx.measure(zeros=int((got == 0).sum()))
    if not (got == want).all():
        ctx.fail("host-to-device copy came back wrong")


@rocmcheck.probe("repro-fake-lingering", title="fake", targets="a reproducer ends though a thread lingers", timeout=30)
def fake_lingering(ctx):
    import threading

    threading.Thread(target=threading.Event().wait, name="lingering").start()  # no daemon: blocks a normal exit


@rocmcheck.probe("repro-fake-backward", title="fake", targets="a hang in the reproducer is FAIL", timeout=1.5)
def fake_backward(ctx):
    import torch

    w = torch.ones(3, device=ctx.device, requires_grad=True)
    (w * 2).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0, 2.0]
'''

# variant -> fault that makes it fail on the CPU (None: the recorded environment does).
# RECORDED cases run through the real runner first; the verdict of the others is written as
# the runner would record it, which yields the same script (the script depends on the probe,
# the variant and the run's device, profile and environment, not on the verdict's message).
RECORDED: Dict[str, Optional[str]] = {
    "device-smoke": "copy-zeros",
    "repro-fake-copy[(3, 5)-strict]": "copy-zeros",
    "repro-fake-backward": "backward-hang",  # recorded as hang; the script's watchdog says FAIL
    "config-lint[hsa-override]": None,
}
CASES: Dict[str, Optional[str]] = {
    **RECORDED,
    "attention-sdpa[math-fp32]": "copy-zeros",
    "attention-model[math]": "copy-zeros",
    "gemm[fp32-default]": "matmul-nan",
    "multigpu-gloo": "all_reduce-wrong",
    "numerics[cast-bf16]": "bf16-zeros",
    "training[plain]": "matmul-nan",
    "transfer[to-isolated]": "copy-zeros:to",
    "workers-dataloader[2]": "loader-corrupt",
    "workers-ipc": "ipc-corrupt",
}
PLANTED_ENV = ("HSA_OVERRIDE_GFX_VERSION", "not-a-version")  # fails config-lint[hsa-override]

DRIVER = textwrap.dedent('''
    import json, os, runpy, sys
    import numpy, torch  # imported once; every job forks from here


    class Blocker:
        """Inside a job the installed rocmcheck cannot be imported: reproducers must not need it."""

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0].startswith("rocmcheck"):
                raise ImportError(f"{name} is blocked: a reproducer must not import rocmcheck")
            return None


    def job(spec):
        if spec["fault"]:
            from rocmcheck import faults, registry
            registry.load_all(spec["probes_paths"])
            faults.install(faults.parse(spec["fault"]), spec["probe"])
        for name in [n for n in sys.modules if n.split(".")[0].startswith("rocmcheck")]:
            del sys.modules[name]
        sys.meta_path.insert(0, Blocker())
        sys.argv = [spec["script"]]
        try:
            runpy.run_path(spec["script"], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        real = [n for n, m in sys.modules.items() if n.split(".")[0].startswith("rocmcheck")
                and not str(getattr(m.__spec__, "origin", "")).startswith("<embedded")]
        if real:
            print("REAL ROCMCHECK IMPORTED:", real)
            code = 99
        return code


    def start(spec):
        pid = os.fork()
        if pid == 0:
            fd = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            try:
                code = job(spec)
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 98
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return pid


    specs = json.loads(sys.argv[1])
    running, codes = {}, {}
    for index, spec in enumerate(specs):
        if len(running) == 2:
            pid, status = os.wait()
            codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
        running[start(spec)] = index
    while running:
        pid, status = os.wait()
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    print(json.dumps([{"rc": codes[i], "log": open(s["log"]).read()} for i, s in enumerate(specs)]))
''')


def run_scripts(jobs: List[dict]) -> List[dict]:
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(jobs)], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("repro_probes")
    (folder / "repro_fakes.py").write_text(FAKE_PROBES)
    return folder


@pytest.fixture(scope="module")
def outcome(fake_dir, tmp_path_factory):
    """Record every case in one real run, build the report, run every reproducer twice."""
    out = tmp_path_factory.mktemp("repro_out")
    paths = [str(fake_dir)]
    specs = registry.load_all(paths)
    variants = {v.id: v for spec in specs.values() for v in spec.expand() if v.id in CASES}
    inject = ",".join(f"{fault}@{vid.split('[')[0]}" for vid, fault in RECORDED.items() if fault)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*PLANTED_ENV)
        report = Runner(RunOptions(device="cpu", inject=inject, probes_paths=paths, write_files=False,
                                   profile="gate")).run([variants[vid] for vid in RECORDED])  # the scripts: quick too
        assert fingerprint.host_facts()["env"][PLANTED_ENV[0]] == PLANTED_ENV[1]
    recorded = {v.variant: v.to_dict() for v in report.verdicts}
    report.verdicts += [Verdict(v.spec.id, v.id, Status.FAIL, dict(v.params), "wrong result")
                        for vid, v in variants.items() if vid not in RECORDED]
    bug = bugreport.build(report, stem="bug", probes_paths=paths)
    bugreport.write(bug, out / "bug.md")
    scripts = {r.variant: out / r.filename for r in bug.reproducers}
    healthy = replace(report, fingerprint={**report.fingerprint, "host": {"env": {}}})  # without the planted env
    cleaned = {r.variant: r for r in bugreport.build(healthy, stem="healthy", probes_paths=paths).reproducers}
    jobs, keys = [], []
    for vid, fault in [(vid, fault) for vid, fault in CASES.items() if vid in variants]:
        probe = vid.split("[")[0]
        if fault:  # the same script: FAIL with the fault, PASS without
            runs = [("fault", scripts[vid], fault), ("clean", scripts[vid], None)]
        else:  # the failure comes from the recorded environment
            path = out / cleaned[vid].filename
            path.write_text(cleaned[vid].script)
            runs = [("fault", scripts[vid], None), ("clean", path, None)]
        for mode, script, spec in runs:
            keys.append((vid, mode))
            jobs.append({"script": str(script), "fault": spec, "probe": probe, "probes_paths": paths,
                         "log": f"{script}.{mode}.log"})
    results = dict(zip(keys, run_scripts(jobs)))
    yield recorded, scripts, results, bug
    fakes = {pid: spec for pid, spec in specs.items() if spec.module.startswith("rocmcheck_userprobes_")}
    for pid, spec in fakes.items():  # later test modules must not meet these probes
        registry._REGISTRY.pop(pid, None)
        sys.modules.pop(spec.module, None)


@pytest.mark.children
@pytest.mark.parametrize("vid", list(CASES))
def test_reproducer_fails_with_the_fault_and_passes_without(outcome, vid):
    recorded, scripts, results, _ = outcome
    if vid not in scripts:
        assert vid not in RECORDED
        pytest.skip(f"probe {vid.split('[')[0]} is not in this tree")
    if vid in RECORDED:
        assert recorded[vid]["status"] in ("fail", "hang"), recorded[vid]
    script = scripts[vid].read_text()
    assert "import rocmcheck" not in script.split("SOURCES = {")[0]  # only embedded code uses the name
    bad, good = results[(vid, "fault")], results[(vid, "clean")]
    assert bad["rc"] == 1 and f"FAIL {vid}:" in bad["log"], bad["log"][-3000:]
    assert good["rc"] == 0 and f"PASS {vid}: ok" in good["log"], good["log"][-3000:]
    drill = "was caused by a fault rocmcheck injected on purpose"  # a PASS beside a recorded injected FAIL says so
    assert (drill in good["log"]) == bool(RECORDED.get(vid)), good["log"][-3000:]


@pytest.mark.children
def test_reproducer_carries_the_variant_exactly(outcome):
    _, scripts, results, _ = outcome
    script = scripts["repro-fake-copy[(3, 5)-strict]"].read_text()
    namespace: dict = {}
    exec(script.split("\n\n\nclass EmbeddedSources")[0], namespace)  # the header: docstring and CONFIG
    config = namespace["CONFIG"]
    assert config["params"] == {"shape": (3, 5), "mode": "strict"}  # a tuple stays a tuple
    assert config["env"]["PYTORCH_REPRO_FAKE_MODE"] == "strict"
    assert config["device"] == "cpu" and config["profile"] == "gate"
    assert "That run injected faults (copy-zeros" in script
    hang = results[("repro-fake-backward", "fault")]["log"]
    assert "hang: no result within 1.5s" in hang and "fake_backward" in hang  # the stack names the probe


@pytest.mark.children
def test_every_failing_variant_gets_a_reproducer_in_the_markdown(outcome):
    recorded, scripts, _, bug = outcome
    assert set(RECORDED) <= set(scripts)
    assert set(scripts) == {v["variant"] for v in bug.data["verdicts"] if v["status"] in ("fail", "hang")}
    for variant, path in scripts.items():
        assert path.name in bug.markdown
        assert path.read_text() == next(r.script for r in bug.reproducers if r.variant == variant)
    cuts = bug.data["bug_report"]["markdown_cut"]
    shown = bug.markdown.count("<summary>standalone reproducer")
    assert shown == len(scripts) if not any("reproducer code" in c for c in cuts) else shown < len(scripts)
    assert {r["file"] for r in bug.data["bug_report"]["reproducers"]} == {p.name for p in scripts.values()}


@pytest.mark.children
def test_probe_using_a_name_the_stand_in_lacks_gets_a_reason_not_a_broken_script(tmp_path):
    probe = tmp_path / "uses_gate.py"
    probe.write_text("import rocmcheck\n\ndef f(ctx):\n    rocmcheck.gate()\n")
    with pytest.raises(repro.ReproError, match=r"rocmcheck\.gate"):
        repro.embedded_sources("rocmcheck_userprobes_x.uses_gate", probe)
    probe.write_text("from rocmcheck.nonexistent import thing\n")
    with pytest.raises(repro.ReproError, match="rocmcheck.nonexistent"):
        repro.embedded_sources("rocmcheck_userprobes_x.uses_gate", probe)


@pytest.mark.children
def test_helper_modules_are_followed_transitively(tmp_path):
    probe = tmp_path / "uses_faults.py"
    probe.write_text("from rocmcheck.faults.data import patch\nimport rocmcheck.host.fingerprint\n")
    names = set(repro.embedded_sources("rocmcheck_userprobes_x.uses_faults", probe))
    # faults.data -> its package rocmcheck.faults -> ..errors; fingerprint -> .redact
    assert {"rocmcheck.faults", "rocmcheck.faults.data", "rocmcheck.errors", "rocmcheck.host.fingerprint",
            "rocmcheck.redact", "rocmcheck.context"} <= names
    assert not {"rocmcheck.engine.runner", "rocmcheck.cli"} & names
    assert variant_id("p", {"a": (1, 2)}) == "p[(1, 2)]"


# --- as users run them: `python FILE.py` in a venv with only torch and numpy ------------------


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory) -> Path:
    """No system site-packages, no rocmcheck: only torch (this suite's) and numpy."""
    return linked_venv(tmp_path_factory.mktemp("plain") / "venv", "torch", "numpy")


def test_reproducers_run_as_users_run_them(outcome, plain_venv, tmp_path):
    """A healthy host passes the script of a variant that failed under --inject; the planted
    environment fault still fails; a thread left running does not keep the script from ending.
    In a plain venv nothing has imported importlib.util before the embedded import hook runs."""
    _, scripts, _, _ = outcome
    lingering = repro.build(registry.get("repro-fake-lingering"), {"variant": "repro-fake-lingering",
                            "status": "fail", "message": "recorded"}, {"run": {"device": "cpu"}}, "this host")
    (tmp_path / lingering.filename).write_text(lingering.script)
    runs = {"device-smoke": (scripts["device-smoke"], 0, "PASS device-smoke: ok"),
            "config-lint[hsa-override]": (scripts["config-lint[hsa-override]"], 1, "FAIL config-lint[hsa-override]:"),
            "repro-fake-lingering": (tmp_path / lingering.filename, 0, "PASS repro-fake-lingering: ok")}
    procs = {vid: subprocess.Popen(["python", str(script)], cwd=tmp_path, env=isolated_env(plain_venv), text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for vid, (script, _, _) in runs.items()}
    try:
        for vid, (_, code, line) in runs.items():
            out, err = procs[vid].communicate(timeout=120)  # a script that does not end fails here
            assert procs[vid].returncode == code and line in out, (vid, out[-2000:], err[-3000:])
    finally:
        for proc in procs.values():
            proc.kill()


def test_the_import_hook_imports_nothing_while_it_is_asked(monkeypatch):
    """An import inside find_spec asks the hook again: RecursionError wherever nothing had
    imported importlib.util before (a plain venv; an editable install hid it)."""
    import builtins

    hook = repro.EmbeddedSources({"pkg.mod": ("X = 1", False)})
    imported, real = [], builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: imported.append(name) or real(name, *a, **k))
    specs = [hook.find_spec("pkg"), hook.find_spec("pkg.mod"), hook.find_spec("numpy")]
    monkeypatch.undo()
    assert imported == []
    assert specs[0].submodule_search_locations is not None  # the prefix: an empty package
    assert specs[1].origin == "<embedded pkg.mod>" and specs[2] is None
