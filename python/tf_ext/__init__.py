"""tf_ext: TensorFlow custom ops whose kernels and gradients are all C++.

    import tf_ext
    y = tf_ext.zero_out(x, preserve_index=2)   # differentiable with GradientTape/tf.gradients

The op library is loaded on first use (see tf_ext._loader for where it is looked up; set
TF_EXT_LIBRARY to choose one), and its C++ gradients then bridged into Python's gradient
registry (tf_ext._bridge). `register_cpp_gradients` makes the C++ gradients of any other
custom-op library usable from Python the same way; `use_cpp_gradients` makes tf.GradientTape
and tf.gradients use the C++ gradient of every op that has one, TensorFlow's own included.

Importing checks first that the running TensorFlow is the release the op library was built
for (TensorFlowVersionError otherwise; see tf_ext._loader.check_tensorflow_version).
"""

from tf_ext import _loader

_loader.check_tensorflow_version()

# tf_ext's release, as the wheel's metadata and the C API's TF_EXT_VERSION_STRING give it.
__version__ = _loader.tf_ext_version()

# pylint: disable=g-import-not-at-top,wrong-import-position
from tf_ext._bridge import (
    GradientNotImplementedError,
    GradientStatus,
    library,
    library_path,
    op_names,
    register_cpp_gradients,
    xla_status,
)
from tf_ext._loader import (
    LibraryLoadError,
    TensorFlowVersionError,
    TensorFlowVersionWarning,
    build_info,
)
from tf_ext.registries import unify_cpp_gradient_registries
from tf_ext.cpp_gradients import (
    CppGradientScope,
    GradientCounts,
    cpp_gradients_enabled,
    disable_cpp_gradients,
    enable_cpp_gradients,
    gradient_counts,
    use_cpp_gradients,
)
from tf_ext.training import export_for_training
from tf_ext._tools import c_library_path, get_include, get_lib, tf_ext_train_path
from tf_ext import ops as _ops
from tf_ext.ops import (
    OpNotInLibraryError,
    declared_ops,
    gradient_reversal,
    median_pool2d,
    ps_roi_align,
    roi_pool,
    sign_ste,
    zero_out,
)

_STATIC_ALL = [
    "CppGradientScope",
    "GradientCounts",
    "GradientNotImplementedError",
    "GradientStatus",
    "LibraryLoadError",
    "OpNotInLibraryError",
    "TensorFlowVersionError",
    "TensorFlowVersionWarning",
    "build_info",
    "c_library_path",
    "cpp_gradients_enabled",
    "declared_ops",
    "disable_cpp_gradients",
    "enable_cpp_gradients",
    "export_for_training",
    "get_include",
    "get_lib",
    "gradient_counts",
    "gradient_reversal",
    "library",
    "library_path",
    "median_pool2d",
    "op_names",
    "ps_roi_align",
    "register_cpp_gradients",
    "roi_pool",
    "sign_ste",
    "tf_ext_train_path",
    "unify_cpp_gradient_registries",
    "use_cpp_gradients",
    "xla_status",
    "zero_out",
]


def __getattr__(name: str):  # PEP 562
    # Ops without a hand-written function get a generated one (tf_ext.ops); __all__ lists
    # them too, so it is computed on first access (this loads the op library).
    if name == "__all__":
        return sorted(_STATIC_ALL + _ops.generated_names())
    if name.startswith("_"):
        raise AttributeError(name)
    return getattr(_ops, name)


def __dir__():
    return sorted(set(globals()) | set(_ops.generated_names()))
