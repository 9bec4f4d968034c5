"""The one place that knows tf_ext's compiler flags and how an op library is linked.

Every C++ target of the project is declared through these macros, never with raw copts:
  tf_ext_cc_library / tf_ext_cc_binary / tf_ext_cc_test  - C++ against TensorFlow's headers
  tf_ext_op_library                                        - a loadable custom-op .so
  tf_ext_cuda_library                                      - nvcc-compiled *.cu.cc sources
  tf_custom_op_library                                     - the same for other workspaces,
                                                             under TensorFlow's rule name
TensorFlow's own flags (ABI, -std, Eigen alignment) come from @local_config_tf, i.e. from
tf.sysconfig of the installed wheel, and are attached through :tf_header_lib.
"""

load("@local_config_tf//:tf_info.bzl", "CUDA_HOME", "TF_COPTS", "TF_DEFINES")

# Project-wide C++ flags: TensorFlow's own (-std, from tf.sysconfig) first. The -Wno-*
# silence TensorFlow/Eigen header noise only.
TF_EXT_COPTS = TF_COPTS + [
    "-fPIC",
    "-O2",
    # No fused multiply-add contraction: the CPU kernels' wide-SIMD paths (cpu_simd.h) are
    # compiled with AVX-512, which implies FMA, and must round exactly as the baseline does.
    "-ffp-contract=off",
    "-Wall",
    "-Wno-sign-compare",
    "-Wno-unused-local-typedefs",
    "-Wno-deprecated-declarations",
    "-Wno-ignored-attributes",
    "-Wno-unknown-pragmas",
    "-Wno-stringop-overflow",
    "-Wno-array-bounds",
    "-Wno-maybe-uninitialized",
    # GCC notes that a 32/64-byte vector returned by a function compiled without AVX has
    # another ABI. cpu_simd.h's wide blocks only live inside always-inlined helpers and
    # flattened AVX2/AVX-512 entry points, so no such call exists.
    "-Wno-psabi",
]

# --config=asan: AddressSanitizer + UndefinedBehaviorSanitizer on every tf_ext target. UBSan
# findings abort (no recovery), so a test that triggers one fails. Left out:
#  - vptr: it needs RTTI of TensorFlow's own (uninstrumented) classes.
#  - null, nonnull-attribute, returns-nonnull-attribute: in GCC 12 they imply
#    -fno-delete-null-pointer-checks, under which `&function == nullptr` is no longer a
#    constant expression, and absl's raw_hash_set (flat_hash_map, in TensorFlow's headers)
#    stops compiling ("TypeErasedApplyToSlotFn<...> == 0 is not a constant expression").
#    A real null dereference still stops the test: ASan reports it as a SEGV.
SANITIZE_FLAGS = [
    "-fsanitize=address,undefined",
    "-fno-sanitize=vptr,null,nonnull-attribute,returns-nonnull-attribute",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
]

# Labels of this repository, resolved here to strings that name their repository: a macro
# called from another repository (a workspace with tf_ext as an external repository, or the
# example built from tf_ext's own workspace) would otherwise resolve "//tf_ext:..." in the
# caller's. str() of a main-repository Label drops the repository ("//tf_ext:x"), so "@" names
# it; select() takes only strings.
def _this_repository(label):
    s = str(Label(label))
    return s if s.startswith("@") else "@" + s

_CUDA_ENABLED = _this_repository("//tf_ext:cuda_enabled")
_ASAN_ENABLED = _this_repository("//tf_ext:asan_enabled")
_SANITIZER_OPTIONS = _this_repository("//tf_ext/sanitizers:sanitizer_options")

# NDEBUG_SANITIZER: under ASan, absl's raw_hash_set (flat_hash_map/set) switches on
# "generations" (ABSL_SWISSTABLE_ENABLE_GENERATIONS), which changes its memory layout.
# TensorFlow's prebuilt libraries use the plain layout, and hash maps cross the boundary
# (e.g. ShapeRefiner::GetContext, inline in tf_ext's code, reads the map TensorFlow filled):
# without this define tf_ext_grad crashed with a SEGV in the workarounds pass (tf_ext/graph/engine/workarounds.cc). The define
# only turns that layout change off; ASan itself is unaffected.
def _sanitize_copts():
    return select({
        _ASAN_ENABLED: SANITIZE_FLAGS + ["-O1", "-g", "-DNDEBUG_SANITIZER"],
        "//conditions:default": [],
    })

def _sanitize_linkopts():
    return select({
        _ASAN_ENABLED: SANITIZE_FLAGS,
        "//conditions:default": [],
    })

# Programs (not libraries) also get the runtime defaults of tf_ext/sanitizers.
def _sanitize_deps():
    return select({
        _ASAN_ENABLED: [_SANITIZER_OPTIONS],
        "//conditions:default": [],
    })

# The tests' own code (the tests/ package: gtests and their helpers) at -O1: a third less
# compile time than -O2 (22 s against 15 s for a gtest source), and what runs hot in a test is
# the library under test and TensorFlow, both built as for users.
def _test_code_copts():
    package = native.package_name()
    return ["-O1"] if package == "tests" or package.startswith("tests/") else []

TF_FRAMEWORK = "@local_config_tf//:libtensorflow_framework"
TF_CC = "@local_config_tf//:libtensorflow_cc"

def tf_ext_cc_library(name, copts = [], deps = [], **kwargs):
    native.cc_library(
        name = name,
        copts = TF_EXT_COPTS + copts + _test_code_copts() + _sanitize_copts(),
        deps = deps + [TF_CC],
        **kwargs
    )

def tf_ext_cc_binary(name, copts = [], deps = [], linkopts = [], **kwargs):
    native.cc_binary(
        name = name,
        copts = TF_EXT_COPTS + copts + _test_code_copts() + _sanitize_copts(),
        linkopts = linkopts + _sanitize_linkopts(),
        deps = deps + [TF_CC] + _sanitize_deps(),
        **kwargs
    )

def tf_ext_cc_test(name, copts = [], deps = [], linkopts = [], **kwargs):
    native.cc_test(
        name = name,
        copts = TF_EXT_COPTS + copts + _test_code_copts() + _sanitize_copts(),
        linkopts = linkopts + _sanitize_linkopts(),
        deps = deps + [TF_CC, "@com_google_googletest//:gtest"] + _sanitize_deps(),
        **kwargs
    )

# A C (not C++) program against TensorFlow's C API: TensorFlow's C++ flags do not apply.
def tf_ext_c_test(name, deps = [], **kwargs):
    native.cc_test(
        name = name,
        copts = ["-std=c11", "-Wall"] + _sanitize_copts(),
        linkopts = _sanitize_linkopts(),
        deps = deps + [TF_CC] + _sanitize_deps(),
        **kwargs
    )

def tf_ext_cuda_library(name, srcs, hdrs = [], deps_hdrs = []):
    """Compiles *.cu.cc files with nvcc into static objects linked with static cudart.

    `name`: the objects under --config=cuda, an empty library otherwise, so CPU-only builds
    need no CUDA at all. `<name>_nvcc`: the objects in every configuration (tagged manual,
    so `bazel build //...` never runs nvcc); the CUDA variant of an op library links it.
    nvcc never sees op_kernel.h: a .cu.cc includes only functor headers and TF's GPU helpers.
    """
    objs = []
    for src in srcs:
        obj = src.replace(".cu.cc", ".cu.o")
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + hdrs + deps_hdrs + [
                "@local_config_tf//:tf_headers",
                "@local_config_tf//:cuda_include",
            ],
            outs = [obj],
            # Built only for a library with CUDA kernels (`make cuda`, --config=cuda): `bazel
            # build //...` would otherwise run nvcc over every kernel in the CPU build too.
            tags = ["manual"],
            cmd = " ".join([
                "%s/bin/nvcc" % CUDA_HOME,
                "-x cu -std=c++17 -O3 -DGOOGLE_CUDA=1 --expt-relaxed-constexpr",
                "-Xcompiler -fPIC -w",
                " ".join(["-D" + d for d in TF_DEFINES]),
                "-I. -I$(GENDIR)",
                "-Iexternal/local_config_tf/cuda_include",
                "-Iexternal/local_config_tf/include",
                "-c $(location %s) -o $@" % src,
            ]),
        )
        objs.append(obj)
    native.cc_library(
        name = name + "_nvcc",
        srcs = objs,
        linkopts = ["-L%s/lib64" % CUDA_HOME, "-l:libcudart_static.a", "-ldl", "-lrt"],
        tags = ["manual"],
    )
    native.cc_library(
        name = name,
        deps = select({
            _CUDA_ENABLED: [":" + name + "_nvcc"],
            "//conditions:default": [],
        }),
    )

def _op_library(name, srcs, hdrs, deps, copts, visibility, tags = []):
    native.cc_library(
        name = name + "_lib",
        srcs = srcs,
        hdrs = hdrs,
        copts = TF_EXT_COPTS + _sanitize_copts() + copts,
        deps = deps + [TF_CC],
        alwayslink = 1,
        tags = tags,
        visibility = visibility,
    )
    native.cc_binary(
        name = name + ".so",
        linkshared = 1,
        linkstatic = 1,
        linkopts = _sanitize_linkopts(),
        deps = [":" + name + "_lib"],
        tags = tags,
        visibility = visibility,
    )

def tf_ext_op_library(name, srcs = [], hdrs = [], gpu_srcs = [], deps = [], visibility = None):
    """A custom-op library: `<name>_lib` (alwayslink, for static linking into C++ tests and
    tools) and `<name>.so` (for tf.load_op_library / TF_LoadLibrary / LoadDynamicLibrary).

    The .so links libtensorflow_framework and libtensorflow_cc: the latter carries the C++
    client gradient registry that tf_ext's gradient registration also fills (see
    tf_ext/grads/registry.h). Python's TensorFlow already has both loaded.

    With gpu_srcs (*.cu.cc), `<name>.so` gets its CUDA kernels under --config=cuda, in that
    configuration's own output tree. `<name>_cuda.so` (and `<name>_cuda_lib`) is the same
    library with its CUDA kernels in the default configuration: only `srcs` are compiled
    again (with GOOGLE_CUDA), `deps` are the CPU build's own objects. Those targets are tagged
    manual, so `bazel build //...` runs no nvcc; `make cuda` builds one. Keep in `srcs` only
    what reads GOOGLE_CUDA (the kernels) and put the rest in `deps`, or it is compiled twice.
    """
    gpu_deps = []
    if gpu_srcs:
        tf_ext_cuda_library(
            name = name + "_gpu",
            srcs = gpu_srcs,
            hdrs = hdrs,
        )
        gpu_deps = [":" + name + "_gpu"]
    _op_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + gpu_deps + select({
            _CUDA_ENABLED: ["@local_config_tf//:cuda_headers"],
            "//conditions:default": [],
        }),
        copts = select({
            _CUDA_ENABLED: ["-DGOOGLE_CUDA=1"],
            "//conditions:default": [],
        }),
        visibility = visibility,
    )
    if gpu_srcs:
        _op_library(
            name = name + "_cuda",
            srcs = srcs,
            hdrs = hdrs,
            deps = deps + [":" + name + "_gpu_nvcc", "@local_config_tf//:cuda_headers"],
            copts = ["-DGOOGLE_CUDA=1"],
            visibility = visibility,
            tags = ["manual"],
        )

def tf_custom_op_library(name, srcs = [], hdrs = [], gpu_srcs = [], deps = [], visibility = None):
    """TensorFlow's documented rule for a custom-op library, for other Bazel workspaces:

        load("@tf_ext//tf_ext:build_defs.bzl", "tf_custom_op_library")
        tf_custom_op_library(
            name = "my_ops.so",
            srcs = ["my_ops.cc"],
            deps = ["@tf_ext//tf_ext:grad_lib"],   # TF_EXT_REGISTER_GRADIENT
        )

    `name` ends in .so, as in TensorFlow's macro. Builds `name` with tf_ext's flags (those of
    the TensorFlow that @local_config_tf found) plus `<stem>_lib`, the same code as a static
    library for C++ tests; gpu_srcs (*.cu.cc) are compiled with nvcc under --config=cuda, and
    into `<stem>_cuda.so` (built only when named: the CUDA variant, see tf_ext_op_library).
    """
    if not name.endswith(".so"):
        fail("tf_custom_op_library: name must end in .so (got %r)" % name)
    tf_ext_op_library(
        name = name[:-len(".so")],
        srcs = srcs,
        hdrs = hdrs,
        gpu_srcs = gpu_srcs,
        deps = deps,
        visibility = visibility,
    )
