# Single entry point. Every target sets the machine up first (idempotent, quiet when done).
SHELL := /bin/bash
ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
export PYTHON_BIN_PATH := $(ROOT)/.venv/bin/python
BAZEL ?= bazel
BAZEL_TEST_FLAGS ?=

.PHONY: setup build demo test gradcheck clean

setup:
	@bash $(ROOT)/scripts/setup.sh

build: setup
	$(BAZEL) build //tf_ext/...

# The main job: gradients of the built-in example graph through the tf_ext ops, computed
# entirely in C++ (no Python in the process), checked against central differences.
demo: setup
	$(BAZEL) build //tf_ext:tf_ext_grad
	$(ROOT)/bazel-bin/tf_ext/tf_ext_grad --check

# Every C++ (gtest) and Python (pytest) test.
test: setup
	$(BAZEL) test //... $(BAZEL_TEST_FLAGS)

clean:
	$(BAZEL) clean
