"""Facts about the machine read without a probe: the GPUs the host sees from its files (`hostgpu`,
also the torch install advice), the build and device facts (`fingerprint`), node health from the
driver's counters (`nodehealth`) and the kernel log (`kernellog`). Probes may import these.
"""
