"""Fake probes for worker children (issue 23): one that changes every process-wide setting a
probe may change, one that reads them back, a leak no reset can put back, and pids."""
import os
import warnings

import rocmcheck

_LEAKED = []  # module state: survives from one task to the next in a worker, as a real leak would


def settings_now():
    import torch

    return {"default_dtype": str(torch.get_default_dtype()), "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_tf32": torch.backends.cudnn.allow_tf32, "precision": torch.get_float32_matmul_precision(),
            "deterministic": torch.are_deterministic_algorithms_enabled(), "grad": torch.is_grad_enabled(),
            "env": os.environ.get("ROCMCHECK_TEST_DIRTY"), "run_env": os.environ.get("ROCMCHECK_TEST_X"),
            "cwd": os.getcwd(),
            "warning_filters": len(warnings.filters), "first_random": torch.rand(1).item(),
            "math_sdp": torch.backends.cuda.math_sdp_enabled(), "threads": torch.get_num_threads()}


@rocmcheck.probe("fake-w-dirty", title="changes every setting", targets="state left behind", timeout=30)
def fake_w_dirty(ctx):
    import torch

    torch.set_default_dtype(torch.float64)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = not torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("medium")
    torch.use_deterministic_algorithms(True)
    torch.set_grad_enabled(False)
    torch.backends.cuda.enable_math_sdp(False)
    torch.set_num_threads(2 if torch.get_num_threads() == 1 else 1)
    torch.manual_seed(1234)
    os.environ["ROCMCHECK_TEST_DIRTY"] = "1"
    os.chdir("/")
    warnings.simplefilter("ignore")
    ctx.measure(pid=os.getpid())


@rocmcheck.probe("fake-w-check", title="reads the settings back", targets="a fresh process", timeout=30)
def fake_w_check(ctx):
    ctx.measure(pid=os.getpid(), **settings_now())


@rocmcheck.probe("fake-w-leak", title="leaves module state behind", targets="a leak no reset sees", timeout=30)
def fake_w_leak(ctx):
    _LEAKED.append(os.getpid())


@rocmcheck.probe("fake-w-leak-check", title="fails after the leak", targets="one task failing the next", timeout=30)
def fake_w_leak_check(ctx):
    if _LEAKED:
        ctx.fail(f"state left by an earlier task in this process: {_LEAKED}")


@rocmcheck.probe("fake-w-own", title="needs a child of its own", targets="process state", timeout=30,
                 runs_in="own-child")
def fake_w_own(ctx):
    ctx.measure(pid=os.getpid())


@rocmcheck.probe("fake-w-env", title="sets a variable before import torch", targets="environment", timeout=30,
                 env=lambda params: {"ROCMCHECK_TEST_X": "variant"})
def fake_w_env(ctx):
    ctx.measure(pid=os.getpid(), run_env=os.environ.get("ROCMCHECK_TEST_X"))


@rocmcheck.probe("fake-w-other-gpu", title="makes another GPU current", targets="current device", timeout=30)
def fake_w_other_gpu(ctx):
    from rocmcheck import torchapi

    index = int(ctx.device.split(":")[1]) if ctx.on_gpu else 0
    if ctx.on_gpu:
        torchapi.device_module(ctx.device).set_device(1 - index)


@rocmcheck.probe("fake-w-current-gpu", title="reads the current GPU", targets="current device", timeout=30)
def fake_w_current_gpu(ctx):
    from rocmcheck import torchapi

    ctx.measure(pid=os.getpid(), current=torchapi.device_module(ctx.device).current_device() if ctx.on_gpu else None)
