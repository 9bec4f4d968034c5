# Single entry point. Every target sets the machine up first (idempotent, quiet when done).
SHELL := /bin/bash
ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
export PYTHON_BIN_PATH := $(ROOT)/.venv/bin/python
BAZEL ?= bazel
BAZEL_TEST_FLAGS ?=

.PHONY: setup build demo test cuda gradcheck clean example pip-install wheel test-wheel test-install test-tf

setup:
	@bash $(ROOT)/scripts/setup.sh

build: setup
	$(BAZEL) build //tf_ext/...

# The main job: gradients of the built-in example graph through the tf_ext ops, computed
# entirely in C++ (no Python in the process), checked against central differences.
demo: setup
	$(BAZEL) build //tf_ext:tf_ext_grad
	$(ROOT)/bazel-bin/tf_ext/tf_ext_grad --check

# The example workspace that uses tf_ext from outside, then every C++ (gtest) and Python
# (pytest) test, `pip install .` of this tree, then the CUDA build (nvcc must keep compiling
# the *.cu.cc kernels even on machines without a GPU).
test: setup
	$(MAKE) --no-print-directory example
	$(BAZEL) test //... $(BAZEL_TEST_FLAGS)
	$(MAKE) --no-print-directory pip-install
	$(MAKE) --no-print-directory cuda

# examples/third_party_ops: its own Bazel workspace (tf_ext as a local_repository), its own
# op library built with tf_custom_op_library + //tf_ext:grad_lib, C++ and Python gradient tests.
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

# The op library with its CUDA kernels (in `bazel info --config=cuda bazel-bin`); it still loads on CPU-only
# TensorFlow, where only the CPU kernels run.
cuda: setup
	$(BAZEL) build --config=cuda //tf_ext:_tf_ext_ops.so $(BAZEL_TEST_FLAGS)
	$(PYTHON_BIN_PATH) -c "import tensorflow as tf; lib = tf.load_op_library('$$($(BAZEL) info --config=cuda bazel-bin 2>/dev/null)/tf_ext/_tf_ext_ops.so'); assert list(lib.tf_ext_zero_out([1., 2.], preserve_index=1).numpy()) == [0., 2.]; print('cuda: op library with CUDA kernels builds and loads')"

# tf_ext_gradcheck over tf_ext's library and over TensorFlow's own FDH gradients.
TF_CORE_OPS := Tanh,Sigmoid,Mul,Add,Sub,Div,Exp,Log,Sqrt,Rsqrt,Square,Abs,Sin,Cos,Neg,Reciprocal,Asin,Acos,Atan,Atanh,Asinh,Acosh,Sinh,Cosh,Log1p,Expm1,Maximum,Minimum,SquaredDifference,Pow,MatMul,BatchMatMulV2,Sum,Mean,Max,Softmax,LogSoftmax,Relu,Conv2D,MaxPool,AvgPool,BiasAdd,Transpose,Reshape,Sign,Softplus,Erf,Tile
gradcheck: setup
	$(BAZEL) build //tf_ext:tf_ext_gradcheck //tf_ext:_tf_ext_ops.so
	$(ROOT)/bazel-bin/tf_ext/tf_ext_gradcheck --library=$(ROOT)/bazel-bin/tf_ext/_tf_ext_ops.so --spec=$(ROOT)/tf_ext/tools/gradcheck_spec.txt
	-$(ROOT)/bazel-bin/tf_ext/tf_ext_gradcheck --spec=$(ROOT)/tf_ext/tools/tf_core_gradcheck_spec.txt --ops=$(TF_CORE_OPS)

clean:
	$(BAZEL) clean
