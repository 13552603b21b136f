"""`RunOptions.build`, the one place a run's options are read (command line > environment > ini)
and checked, whichever front-end gives them: the command, the pytest plugin, `rocmcheck.gate()`."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rocmcheck import faults
from rocmcheck.engine.options import Given, RunOptions
from rocmcheck.errors import UsageError

FAKE = str(Path(__file__).parent / "fake_probes")
PYTEST = "--rocm-{dashed}"
NOT_POSITIVE = "must be a finite positive number of seconds, not '0'"


@pytest.mark.parametrize("given, env, message", [
    (Given({"timeout": "0"}), {}, f"--timeout {NOT_POSITIVE}"),
    (Given({"timeout": "0"}, PYTEST), {}, f"--rocm-timeout {NOT_POSITIVE}"),
    (Given({"timeout": None}, PYTEST, {"timeout": "0"}), {}, f"ini option rocm_timeout {NOT_POSITIVE}"),
    (Given({"timeout": 0}, "rocmcheck.gate({name}=...)"), {}, f"rocmcheck.gate(timeout=...) {NOT_POSITIVE}"),
    (Given({"first_use_timeout": "0"}), {}, f"--first-use-timeout {NOT_POSITIVE}"),
    (Given({"deadline": "inf"}), {}, "--deadline must be a finite positive number of seconds, not 'inf'"),
    (Given({"expect_gpus": None}), {"ROCMCHECK_EXPECT_GPUS": "eight"},
     "$ROCMCHECK_EXPECT_GPUS must be a whole number, not 'eight'"),
    (Given({"isolation": None}, PYTEST, {"isolation": "fork"}), {},
     "ini option rocm_isolation must be zygote or spawn, not 'fork'"),
    (Given({"device": "gpu7"}), {}, "--device must be auto, all, cpu or cuda:N[,M...], not 'gpu7'"),
    (Given({"inject": None}), {"ROCMCHECK_INJECT": "melt"}, "unknown fault 'melt' (see: rocmcheck list --faults)"),
    (Given({"probes_path": ["/no/such/dir"]}), {}, "probes path '/no/such/dir' is not a readable directory"),
    (Given({"level": "0"}, PYTEST), {}, "--rocm-level must be 1, 2 or 3, not '0'"),
    (Given({"level": None, "duration": None}, PYTEST, {"duration": "1e9"}), {},
     "ini option rocm_duration must be seconds from 1 to a week (or 15m, 2h), not '1e9'"),
    (Given({"level": "1", "duration": "15m"}, PYTEST), {},
     "--rocm-duration is the budget of level 2 or 3: add --rocm-level 2 or 3 (level 1, the gate's, works 2 s per GPU)"),
], ids=["flag", "pytest-flag", "ini", "gate-argument", "first-use", "deadline", "env", "ini-isolation", "device",
        "env-fault", "probes-path", "level", "ini-duration", "duration-without-level"])
def test_a_bad_value_is_one_line_naming_where_it_came_from(monkeypatch, given, env, message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(UsageError) as failed:
        RunOptions.build(given)
    assert str(failed.value) == message


def test_the_command_line_wins_and_an_option_not_offered_is_not_read(monkeypatch):
    monkeypatch.setenv("ROCMCHECK_EXPECT_GPUS", "8")
    assert RunOptions.build(Given({"expect_gpus": 4})).expect_gpus == 4
    assert RunOptions.build(Given({"expect_gpus": None})).expect_gpus == 8
    assert RunOptions.build(Given({"device": "all"}, PYTEST, {"device": "cpu"})).device == "all"
    assert RunOptions.build(Given({"device": None}, PYTEST, {"device": "cpu"})).device == "cpu"
    assert RunOptions.build(Given({"device": "auto"})).expect_gpus is None  # `rocmcheck env` offers --device only


@pytest.mark.children
def test_the_plugin_and_the_command_build_equal_options(tmp_path, monkeypatch):
    """The same run asked for through pytest (flags, ini file, environment; a real pytest, which
    writes what its plugin built) and through the command line."""
    from rocmcheck.cli import build_parser
    from rocmcheck.cli.common import run_options

    monkeypatch.setenv("ROCMCHECK_INJECT", "segv@fake-pass")
    (tmp_path / "pytest.ini").write_text("[pytest]\nrocm_device = hip:1\nrocm_gate_only = true\n")
    (tmp_path / "conftest.py").write_text(
        "import dataclasses, json, pytest\n\n@pytest.hookimpl(trylast=True)\ndef pytest_configure(config):\n"
        "    from rocmcheck.plugin import KEY\n    options = config.stash[KEY].settings.options\n"
        "    with open('options.json', 'w') as f:\n        json.dump(dataclasses.asdict(options), f, default=str)\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                           "--rocm-matrix=out", "--rocm-timeout", "5", "--rocm-isolation", "spawn",
                           f"--rocm-probes-path={FAKE}"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (tmp_path / "options.json").is_file(), done.stdout + done.stderr
    from_pytest = json.loads((tmp_path / "options.json").read_text())
    args = build_parser().parse_args(["run", "--device", "hip:1", "--gate-only", "--timeout", "5",
                                      "--isolation", "spawn", "--probes-path", FAKE])
    # a command's wall time counts its process's start (imports included); a pytest session's run does not
    from_command = dataclasses.replace(run_options(args, "pytest"), out_dir=tmp_path / "out",
                                       timed_from_process_start=False)
    assert from_pytest == json.loads(json.dumps(dataclasses.asdict(from_command), default=str))
    assert (from_command.device, from_command.timeout, from_command.profile, from_command.inject) == (
        "cuda:1", 5.0, "gate", "segv@fake-pass")


@pytest.mark.children
def test_a_fault_a_probe_module_declares_is_known_to_the_fault_spec(tmp_path, monkeypatch):
    """The probes paths load before the fault spec is checked."""
    monkeypatch.setattr(faults, "_FAULTS", dict(faults._FAULTS))  # the new fault stays in this test
    (tmp_path / "mine.py").write_text("from rocmcheck.faults import fault\n\n"
                                      "@fault('my-fault', 'a fault of my probes')\ndef install(arg):\n    pass\n")
    assert RunOptions.build(Given({"probes_path": [str(tmp_path)], "inject": "my-fault"})).inject == "my-fault"


@pytest.mark.parametrize("device, inject, refused", [
    ("simgpu:0", "", True),  # once said "device cuda:0 is not present" after starting the run
    ("simgpu:0,1", "segv@nosuch", True),
    ("simgpu:1", "simgpu:2", False),
    ("cuda:0", "", False),
])
def test_a_simulated_device_without_the_simulated_gpus_is_refused_in_one_line(device, inject, refused):
    given = Given({"device": device, "inject": inject})
    if refused:
        with pytest.raises(UsageError, match=rf"--device {device} names simulated GPUs, which exist only with "
                                             r"--inject simgpu:N \(N at least \d\)"):
            RunOptions.build(given)
    else:
        assert RunOptions.build(given).device == device
