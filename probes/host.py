"""The host's GPUs against what torch sees: never a CPU self-test on a GPU host.

A CPU wheel on an AMD box, a CUDA wheel on an AMD box (or a ROCm wheel on an NVIDIA one), a
container started without `--device=/dev/kfd --device=/dev/dri` or `--gpus`, a user outside
the `render` group, a `HIP_VISIBLE_DEVICES` that hides every card: in each case
`torch.cuda.device_count()` is 0 with at most a warning, and a gate would otherwise run its CPU
self-test and say GO. The host's own view comes from files (`rocmcheck.host.hostgpu`).
"""
import rocmcheck
from rocmcheck.lazy import torch


@rocmcheck.probe(
    "gpu-visible",
    per_device=False,
    title="The host's GPUs against what torch sees",
    targets="a CPU or wrong-vendor torch build on a GPU host, missing device nodes, render-group permissions, "
            "a *_VISIBLE_DEVICES value hiding every GPU",
    links=("https://pytorch.org/get-started/locally/",
           "https://rocm.docs.amd.com/projects/install-on-linux/en/latest/install/prerequisites.html"),
    timeout=60,
    gate=True,
)
def gpu_visible(ctx):
    """PCI, KFD and device nodes (read from files) against torch's build and device count."""
    from rocmcheck.host import hostgpu

    host = hostgpu.read()
    facts = {"torch": torch.__version__, "hip": torch.version.hip, "cuda": torch.version.cuda,
             "device_count": torch.cuda.device_count()}
    ctx.measure(host_amd_gpus=host.gpus("amd"), host_nvidia_gpus=host.gpus("nvidia"),
                torch_devices=facts["device_count"])
    found = hostgpu.diagnose(host, facts, ctx.expect_gpus)
    if found and ctx.requested_device == "cpu" and not ctx.expect_gpus:
        ctx.skip(f"the host's GPUs are left out on purpose (--device cpu): {found.message}")
    if found:
        ctx.measure(action=found.action)
        ctx.fail(found.message)
    if not host.vendors:
        ctx.measure(host="no GPU on this host: the CPU self-test is the right run")
        return
    on_host = host.gpus("amd" if facts["hip"] else "nvidia")
    if facts["device_count"] < on_host and not host.visible_devices and ctx.expect_gpus is None:
        ctx.warn(f"torch sees {facts['device_count']} of the host's {on_host} GPUs "
                 "and no *_VISIBLE_DEVICES variable asks for that (--expect-gpus makes this a failure)")
