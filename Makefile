# Single entry point. Every target sets the machine up first (idempotent, quiet when done).
SHELL := /bin/bash
ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
export PYTHON_BIN_PATH := $(ROOT)/.venv/bin/python
BAZEL ?= bazel
BAZEL_TEST_FLAGS ?=

.PHONY: setup build demo test docs tf-test-bases xla-sweep cuda gpu-harness-build gpu-harness-host gpu-test gpu-bench gradcheck models registries audit fuzz sanitize sanitize-py clean example pip-install wheel test-wheel test-install test-tf bench bench-models bench-train bench-train-distributed

setup:
	@bash $(ROOT)/scripts/setup.sh

build: setup
	$(BAZEL) build //tf_ext/...

# The main job: gradients computed entirely in C++ (no Python in the process) of (1) the
# built-in example graph through the tf_ext ops, checked against central differences, and
# (2) a real model: Keras MobileNetV2 (weights=None) frozen to a GraphDef, compared with
# TensorFlow's Python gradient of the same function; (3) a small Keras classifier trained by
# tf_ext_train (C++), its loss falling, then the trained SavedModel answering in Python.
demo: setup
	$(BAZEL) build //tf_ext:tf_ext_grad //tf_ext:tf_ext_train //tf_ext:_tf_ext_ops.so
	$(ROOT)/bazel-bin/tf_ext/tf_ext_grad --check
	$(PYTHON_BIN_PATH) $(ROOT)/scripts/check_keras_models.py --tf_ext_grad=$(ROOT)/bazel-bin/tf_ext/tf_ext_grad \
	  --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so --work=$(ROOT)/.models --models=MobileNetV2 --modes=inference,training
	$(PYTHON_BIN_PATH) $(ROOT)/scripts/demo_train.py --tf_ext_train=$(ROOT)/bazel-bin/tf_ext/tf_ext_train \
	  --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so --work=$(ROOT)/.models

# Every image model of tf.keras.applications (smallest input each accepts) and a Transformer
# encoder block, inference and training mode, through tf_ext_grad vs Python's gradient.
# Long (about an hour on 2 cores; frozen models are cached in .models/): MODELS=A,B for a few.
MODELS ?=
models: setup
	$(BAZEL) build //tf_ext:tf_ext_grad //tf_ext:_tf_ext_ops.so
	$(PYTHON_BIN_PATH) $(ROOT)/scripts/check_keras_models.py --tf_ext_grad=$(ROOT)/bazel-bin/tf_ext/tf_ext_grad \
	  --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so --work=$(ROOT)/.models $(if $(MODELS),--models=$(MODELS)) \
	  --table=$(ROOT)/.models/models.md --json=$(ROOT)/.models/models.json

# How TensorFlow's two C++ gradient registries cover its ops, before and after tf_ext unifies
# them, and every op still lacking; then parity with Python: the ops with a Python gradient
# function, those with a C++ gradient, and the difference (tests/python/test_parity.py's input).
registries: setup
	$(BAZEL) build //tf_ext:tf_ext_gradcheck //tf_ext:_tf_ext_ops.so
	$(ROOT)/bazel-bin/tf_ext/tf_ext_gradcheck --registries=full --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so
	$(PYTHON_BIN_PATH) $(ROOT)/scripts/parity_report.py --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so

# TensorFlow's six gradient test bases from its wheel (xent, sparse xent, bias, depthwise
# convolution, cuDNN-deterministic convolution, image resizing), every test run with Python's
# gradients and again under use_cpp_gradients (scripts/tf_test_bases.py): prints each base's
# counts, every regression and `regressions: N`, and fails unless N is 0. `make test` runs a
# seeded subset (//tests:tf_test_bases_py_test).
tf-test-bases: setup
	$(BAZEL) build //tf_ext:_tf_ext_ops.so
	PYTHONPATH=$(ROOT)/python TF_EXT_LIBRARY=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so \
	  $(PYTHON_BIN_PATH) $(ROOT)/scripts/tf_test_bases.py --json=$(ROOT)/.tf_test_bases.json

# Attribute-sweep audit: every op with both a C++ and a Python gradient, on configurations
# generated from its OpDef (tf_ext_gradcheck --emit_configs), C++'s gradient against Python's,
# and every row again through the other entry points (tf_ext_grad's pipeline modes,
# TfExtAddGradients, TF_AddGradients, a SymbolicGradient node, TfExtGradientFunctionDef, the
# exported SavedModel run without tf_ext: tests/audit_doors; the Python bridge); a table per op,
# one of the doors and a summary; where Python's gradient fails (PY-FAILS), C++'s against central
# differences; fails on an unexplained mismatch, a door that differs or fails unexplained, a C++
# gradient that is not the derivative or an unclassified both-fail row (docs/registries.md).
# About 7 min. `make test` runs a seeded subset and the PY-FAILS ops
# (//tests:audit_gradients_py_test).
audit: setup
	$(BAZEL) build //tf_ext:tf_ext_gradcheck //tf_ext:_tf_ext_ops.so //tests:audit_doors
	$(PYTHON_BIN_PATH) $(ROOT)/scripts/audit_gradients.py --gradcheck=$(ROOT)/bazel-bin/tf_ext/tf_ext_gradcheck \
	  --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so --spec=$(ROOT)/tf_ext/tools/tf_core_gradcheck_spec.txt

# Every C++ (gtest) and Python (pytest) test, two at a time (.bazelrc), with the op library's
# CUDA variant built in the same run and its kernels listed (nvcc must keep compiling the
# *.cu.cc kernels even on machines without a GPU), and the example op library that uses tf_ext
# from outside (examples/third_party_ops, as the external repository @third_party_ops: its op
# library and C++ test, in the same run, so the tf_ext libraries it uses are compiled once);
# then the example's Python test against tf_ext installed by `pip install .` of this tree, as a
# third-party library's users run it. `make example` builds the example in its own workspace.
EXAMPLE_OPS := $(ROOT)/bazel-bin/external/third_party_ops/swish_ops.so
test: setup
	$(BAZEL) test //... //tf_ext:_tf_ext_ops_cuda.so @third_party_ops//:swish_cc_test @third_party_ops//:swish_ops.so $(BAZEL_TEST_FLAGS)
	$(MAKE) --no-print-directory cuda
	bash $(ROOT)/scripts/check_install.sh --in-tree --example=$(EXAMPLE_OPS)

# examples/third_party_ops: its own Bazel workspace (tf_ext as a local_repository), its own
# op library built with tf_custom_op_library + //tf_ext:grad_lib, C++ and Python gradient tests
# (the Python one with tf_ext's package and op library built in that workspace too).
example: setup
	cd $(ROOT)/examples/third_party_ops && $(BAZEL) test //... $(BAZEL_TEST_FLAGS)

# `pip install .` of this tree (PEP 517 backend: Bazel build, wheel) into a fresh virtualenv
# that sees .venv's TensorFlow, then a gradient through the installed package.
pip-install: setup
	bash $(ROOT)/scripts/check_install.sh --in-tree

# The same from a fresh `git clone` of HEAD, with the interpreter's defaults (cold build).
test-install: setup
	bash $(ROOT)/scripts/check_install.sh --clean-clone

# dist/tf_ext-*-manylinux_*.whl (auditwheel; TensorFlow's libraries never bundled).
wheel: setup
	bash $(ROOT)/scripts/build_wheel.sh

# That wheel into a new, empty virtualenv: pip pulls a compatible TensorFlow from the index by
# itself (~250 MB download), then the package imports and differentiates.
test-wheel: wheel
	bash $(ROOT)/scripts/check_install.sh --wheel

# The whole suite against another TensorFlow release in its own virtualenv and output base
# (.tf/VERSION/), e.g. `make test-tf VERSION=2.20.0`. Not part of `make test` (CI time).
test-tf: setup
	@test -n "$(VERSION)" || { echo "usage: make test-tf VERSION=2.20.0"; exit 2; }
	env -u PYTHON_BIN_PATH bash $(ROOT)/scripts/test_tf.sh $(VERSION)

# The op library with its CUDA kernels, bazel-bin/tf_ext/_tf_ext_ops_cuda.so: the default
# configuration, so only the kernels (nvcc and *_op.cc with GOOGLE_CUDA) are compiled beyond the
# CPU build (`--config=cuda` builds the same library in its own tree, compiling everything
# again). It still loads on CPU-only TensorFlow, where only the CPU kernels run.
cuda: setup
	$(BAZEL) build //tf_ext:_tf_ext_ops_cuda.so $(BAZEL_TEST_FLAGS)
	$(PYTHON_BIN_PATH) $(ROOT)/scripts/check_cuda_kernels.py $(ROOT)/bazel-bin/tf_ext/_tf_ext_ops_cuda.so

# The standalone CUDA harness (tests/gpu/gpu_harness.cu): plain nvcc, no TensorFlow, so it runs
# on GPU machines that have CUDA but no TensorFlow. It runs the op library's own kernels on
# random and edge cases against the same per-thread bodies run on the host, twice (bitwise
# determinism). Without a GPU it prints "no CUDA device" and exits 2. These targets need no
# `setup` (no Bazel, no TensorFlow).
NVCC ?= $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc,nvcc)
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
GPU_HARNESS := $(ROOT)/.gpu/gpu_harness
COMPUTE_SANITIZER ?= compute-sanitizer
gpu-harness-build:
	@mkdir -p $(ROOT)/.gpu
	$(NVCC) -std=c++17 -O2 -lineinfo $(NVCC_ARCH) -I$(ROOT) -o $(GPU_HARNESS) $(ROOT)/tests/gpu/gpu_harness.cu

# The harness's own logic (case generators, references, comparisons) on a machine without a
# GPU: compiled by the host compiler with CUDA emulated on the host (tests/gpu/host_emulation.h).
# Says nothing about the device; `make gpu-test` does.
gpu-harness-host:
	@mkdir -p $(ROOT)/.gpu
	$(CXX) -std=c++17 -O2 -DTF_EXT_HARNESS_HOST_EMULATION -I$(ROOT) -x c++ -o $(ROOT)/.gpu/gpu_harness_host $(ROOT)/tests/gpu/gpu_harness.cu
	$(ROOT)/.gpu/gpu_harness_host

# Full run, then short runs under compute-sanitizer: memcheck (out-of-bounds and misaligned
# accesses), initcheck (reads of uninitialised device memory), racecheck (shared-memory hazards).
gpu-test: gpu-harness-build
	$(GPU_HARNESS)
	$(COMPUTE_SANITIZER) --tool memcheck --error-exitcode 1 $(GPU_HARNESS) --quick
	$(COMPUTE_SANITIZER) --tool initcheck --error-exitcode 1 $(GPU_HARNESS) --quick
	$(COMPUTE_SANITIZER) --tool racecheck --error-exitcode 1 $(GPU_HARNESS) --quick

# Achieved GB/s of SignSTE and MedianPool2D against a device-to-device cudaMemcpy, and the ROI
# ops at detection-head sizes against torchvision's CUDA kernels on the same boxes
# (tests/gpu/torchvision_bench.py: needs PyTorch and torchvision, not TensorFlow).
GPU_BENCH_DIR := $(ROOT)/.gpu/bench
gpu-bench: gpu-harness-build
	@mkdir -p $(GPU_BENCH_DIR)
	$(GPU_HARNESS) --bench --bench-out $(GPU_BENCH_DIR)
	python3 $(ROOT)/tests/gpu/torchvision_bench.py $(GPU_BENCH_DIR)

# tests/python/test_xla.py on 30 seeded configurations per op and dtype (`make test` runs 2):
# every op and gradient compiled by XLA against the CPU kernels. About 10 minutes.
xla-sweep: setup
	$(BAZEL) test //tests:xla_py_test --test_env=TF_EXT_XLA_SWEEP=30 --test_timeout=3600 $(BAZEL_TEST_FLAGS)

# README.md's op table, regenerated from the ops' declarations (tf_ext/grads/*_grad.cc).
docs: setup
	$(BAZEL) build //tf_ext:_tf_ext_ops.so
	PYTHONPATH=$(ROOT)/python TF_EXT_LIBRARY=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so \
	  $(PYTHON_BIN_PATH) $(ROOT)/scripts/op_table.py --write

# tf_ext_gradcheck over tf_ext's library, over TensorFlow's own FDH gradients and over the
# gradients tf_ext adds for TensorFlow's ops (its exceptions: tests/tf_grads_gradcheck_test.cc).
TF_CORE_OPS := Tanh,Sigmoid,Mul,Add,Sub,Div,Exp,Log,Sqrt,Rsqrt,Square,Abs,Sin,Cos,Neg,Reciprocal,Asin,Acos,Atan,Atanh,Asinh,Acosh,Sinh,Cosh,Log1p,Expm1,Maximum,Minimum,SquaredDifference,Pow,MatMul,BatchMatMulV2,Sum,Mean,Max,Softmax,LogSoftmax,Relu,Conv2D,MaxPool,AvgPool,BiasAdd,Transpose,Reshape,Sign,Softplus,Erf,Tile
gradcheck: setup
	$(BAZEL) build //tf_ext:tf_ext_gradcheck //tf_ext:_tf_ext_ops.so
	$(ROOT)/bazel-bin/tf_ext/tf_ext_gradcheck --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so
	-$(ROOT)/bazel-bin/tf_ext/tf_ext_gradcheck --library=none --spec=$(ROOT)/tf_ext/tools/tf_core_gradcheck_spec.txt --ops=$(TF_CORE_OPS)
	-$(ROOT)/bazel-bin/tf_ext/tf_ext_gradcheck --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so --added_tf_gradients --spec=$(ROOT)/tf_ext/tools/tf_core_gradcheck_spec.txt

# Seeded random and hostile calls of every op (forward and backward ops, eager, tf.function,
# GradientTape, the gradient registry's op and C entry point), batched in child processes so
# a crash or hang is caught, confirmed, shrunk and reported (tests/fuzz/tf_ext_fuzz.py).
# `make fuzz N=10000` runs 10,000 calls per op; CI runs a short seeded run (//tests:fuzz_py_test).
N ?= 500
SEED ?= 1
fuzz: setup
	$(BAZEL) build //tf_ext:_tf_ext_ops.so
	PYTHONPATH=$(ROOT)/python TF_EXT_LIBRARY=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so \
	  $(PYTHON_BIN_PATH) $(ROOT)/tests/fuzz/tf_ext_fuzz.py --calls-per-op $(N) --seed $(SEED) \
	  --report $(ROOT)/fuzz_report.json

# ASan + UBSan (--config=asan, own output tree): the op library, every gtest, the C API test
# and tf_ext_grad built sanitized, and every C++ test run under it. The runtime options are
# compiled into each program (tf_ext/sanitizers/sanitizer_options.cc).
sanitize: setup
	$(BAZEL) test --config=asan --test_lang_filters=cc //tests/... $(BAZEL_TEST_FLAGS)
	$(BAZEL) build --config=asan //tf_ext:tf_ext_grad $(BAZEL_TEST_FLAGS)
	$$($(BAZEL) info --config=asan bazel-bin 2>/dev/null)/tf_ext/tf_ext_grad --check \
	  --library=$$($(BAZEL) info --config=asan bazel-bin 2>/dev/null)/tf_ext/_tf_ext_ops.so

# The sanitized op library under Python's TensorFlow (not part of `make sanitize`: slow).
# Python is not linked against ASan, so its runtime must come first: LD_PRELOAD of libasan,
# and of libstdc++ too (else ASan's __cxa_throw interceptor finds no real __cxa_throw and
# CHECK-fails on TensorFlow's first C++ exception). Python's defaults differ from the C++
# programs': CPython and TensorFlow's Python extensions leak by design at exit (detect_leaks=0);
# detect_container_overflow=0 for the reason given in sanitizer_options.cc.
SANITIZE_PY_TESTS ?= tests/python/test_ops.py tests/python/test_gradients.py
sanitize-py: setup
	$(BAZEL) build --config=asan //tf_ext:_tf_ext_ops.so $(BAZEL_TEST_FLAGS)
	cd $(ROOT) && LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
	  ASAN_OPTIONS=detect_leaks=0:detect_container_overflow=0:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  TF_EXT_LIBRARY=$$($(BAZEL) info --config=asan bazel-bin 2>/dev/null)/tf_ext/_tf_ext_ops.so \
	  PYTHONPATH=$(ROOT)/python $(PYTHON_BIN_PATH) -m pytest -q -p no:cacheprovider $(SANITIZE_PY_TESTS)

# tf_ext against stock-TensorFlow baselines, measured in the same run (bench/tf_ext_bench.py):
# a table on stdout; bench_results/bench.{json,md,png}. Not part of `make test` (minutes, and
# the numbers are the machine's). BENCH_ARGS="--workloads roi_pool,sign_ste_fwd --reps 5".
BENCH_ARGS ?=
bench: setup
	$(BAZEL) build //tf_ext:_tf_ext_ops.so
	PYTHONPATH=$(ROOT)/python TF_EXT_LIBRARY=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so \
	  $(PYTHON_BIN_PATH) $(ROOT)/bench/tf_ext_bench.py --out $(ROOT)/bench_results $(BENCH_ARGS)

# The C++ gradient (tf_ext_grad --benchmark) against Python's tf.function gradient of the same
# frozen models, interleaved, time and memory (bench/bench_models.py): a table on stdout,
# bench_results/models.{json,md,png}. Not part of `make test` (minutes per model).
# BENCH_MODELS_ARGS="--models MobileNetV2:1 --rounds 2".
BENCH_MODELS_ARGS ?=
bench-models: setup
	$(BAZEL) build //tf_ext:tf_ext_grad //tf_ext:_tf_ext_ops.so
	$(PYTHON_BIN_PATH) $(ROOT)/bench/bench_models.py --tf_ext_grad=$(ROOT)/bazel-bin/tf_ext/tf_ext_grad \
	  --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so --work=$(ROOT)/.models/bench \
	  --out=$(ROOT)/bench_results $(BENCH_MODELS_ARGS)

# tf_ext_train's step time against Keras's model.fit on the same models and batches (MLP, a
# BatchNorm CNN, a ResNet-18-sized CNN at 64x64), interleaved (bench/bench_train.py).
bench-train: setup
	$(BAZEL) build //tf_ext:tf_ext_train //tf_ext:_tf_ext_ops.so
	$(PYTHON_BIN_PATH) $(ROOT)/bench/bench_train.py --tf_ext_train=$(ROOT)/bazel-bin/tf_ext/tf_ext_train \
	  --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so --work=$(ROOT)/.models/bench \
	  --out=$(ROOT)/bench_results $(BENCH_TRAIN_ARGS)

# Two tf_ext_train workers (--threads=1 each, loopback) against one process (--threads=2) on
# bench-train's models: step times, bytes all-reduced per step, the all-reduce's share of the
# step (docs/distributed.md, Performance). BENCH_TRAIN_DISTRIBUTED_ARGS="--steps=50 --rounds=5".
bench-train-distributed: setup
	$(BAZEL) build //tf_ext:tf_ext_train //tf_ext:_tf_ext_ops.so
	$(PYTHON_BIN_PATH) $(ROOT)/bench/bench_train_distributed.py --tf_ext_train=$(ROOT)/bazel-bin/tf_ext/tf_ext_train \
	  --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so --work=$(ROOT)/.models/bench \
	  --out=$(ROOT)/bench_results $(BENCH_TRAIN_DISTRIBUTED_ARGS)

clean:
	$(BAZEL) clean
