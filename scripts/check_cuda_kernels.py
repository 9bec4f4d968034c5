"""Checks a CUDA build of the op library (`make cuda`) on CPU-only TensorFlow.

The GPU kernels cannot run without a GPU, but their registrations can be read: a kernel
registration is static, so after tf.load_op_library TensorFlow's kernel registry lists every
DEVICE_GPU kernel of the library even where no GPU exists. This script asserts that
  - the library loads and a CPU kernel still computes (ZeroOut);
  - every TfExt op with a CPU kernel also has a GPU kernel, for exactly the same dtypes
    (so every declared type has a kernel on every device), except host-only ops;
  - the ROI ops' GPU kernels take `rois` (and RoiPoolGrad's `argmax`) in host memory, where
    they are validated before any device code sees them.

usage: check_cuda_kernels.py LIBRARY.so
"""

import sys

import tensorflow as tf
from tensorflow.python.framework import kernels
from tensorflow.python.framework import op_def_registry

# Ops whose kernel is host code by nature (no tensor maths to run on a device).
HOST_ONLY = {
    "TfExt>GradientFunctionDef": "builds a FunctionDef from a serialized NodeDef",
}

# GPU kernel -> inputs it must take in host memory.
HOST_MEMORY = {
    "TfExt>RoiPool": {"rois"},
    "TfExt>RoiPoolGrad": {"rois", "argmax"},
    "TfExt>PsRoiAlign": {"rois"},
    "TfExt>PsRoiAlignGrad": {"rois"},
}


def type_constraints(kernel):
    types = set()
    for c in kernel.constraint:
        types.update(tf.dtypes.as_dtype(t).name for t in c.allowed_values.list.type)
    return types


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    lib = tf.load_op_library(argv[1])
    assert list(lib.tf_ext_zero_out([1.0, 2.0], preserve_index=1).numpy()) == [0.0, 2.0]

    # The generated module has one raw-op function per op, named after the op type with ">"
    # turned into "_" (TfExt>RoiPool -> TfExt_RoiPool); every such name must be a registered op.
    op_names = sorted(n.replace("TfExt_", "TfExt>", 1) for n in dir(lib) if n.startswith("TfExt_"))
    unknown = [op for op in op_names if op_def_registry.get(op) is None]
    assert op_names and not unknown, f"ops not found in the registry: {unknown or 'none listed'}"
    failures, checked = [], 0
    for op in op_names:
        by_device = {}
        for k in kernels.get_registered_kernels_for_op(op).kernel:
            by_device.setdefault(k.device_type, []).append(k)
        cpu = set().union(*(type_constraints(k) for k in by_device.get("CPU", [])))
        gpu_kernels = by_device.get("GPU", [])
        gpu = set().union(*(type_constraints(k) for k in gpu_kernels))
        if op in HOST_ONLY:
            if gpu_kernels:
                failures.append(f"{op}: host-only op unexpectedly has a GPU kernel")
            continue
        if not gpu_kernels:
            failures.append(f"{op}: no GPU kernel (CPU kernels for {sorted(cpu)})")
            continue
        if gpu != cpu:
            failures.append(f"{op}: GPU kernels for {sorted(gpu)}, CPU kernels for {sorted(cpu)}")
        for k in gpu_kernels:
            missing = HOST_MEMORY.get(op, set()) - set(k.host_memory_arg)
            if missing:
                failures.append(f"{op}: GPU kernel does not take {sorted(missing)} in host memory")
        checked += 1
        print(f"  {op}: GPU kernels for {sorted(gpu)}"
              + (f", host memory {sorted(HOST_MEMORY[op])}" if op in HOST_MEMORY else ""))
    if failures:
        sys.exit("check_cuda_kernels: FAILED\n  " + "\n  ".join(failures))
    print(f"cuda: op library with CUDA kernels builds and loads; {checked} ops have GPU kernels "
          f"for every CPU dtype")


if __name__ == "__main__":
    main(sys.argv)
