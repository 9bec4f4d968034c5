"""tf_ext_dependencies(): every repository tf_ext's build needs, all local (offline).

tf_ext's own WORKSPACE calls it, and so does a workspace that uses tf_ext as an external
repository (examples/third_party_ops):

    local_repository(name = "tf_ext", path = "../tf_ext")
    load("@tf_ext//third_party:workspace.bzl", "tf_ext_dependencies")
    tf_ext_dependencies(tf_ext_path = "../tf_ext")

tf_ext_path: tf_ext's directory, relative to the calling workspace or absolute (Bazel resolves a
local_repository path against the main workspace, whatever .bzl declares it).
"""

load("//third_party/tf:tf_configure.bzl", "tf_configure")

def tf_ext_dependencies(tf_ext_path = "."):
    # Bazel 4.2.3's @bazel_tools loads these; the real ones would be downloaded.
    native.local_repository(
        name = "rules_cc",
        path = tf_ext_path + "/third_party/rules_cc",
    )
    native.local_repository(
        name = "rules_java",
        path = tf_ext_path + "/third_party/rules_java",
    )
    native.local_repository(
        name = "remote_coverage_tools",
        path = tf_ext_path + "/third_party/remote_coverage_tools",
    )

    # Debian's bazel-skylib and bazel-platforms.
    native.local_repository(
        name = "bazel_skylib",
        path = "/usr/share/bazel/tools/skylib",
    )
    native.local_repository(
        name = "platforms",
        path = "/usr/share/bazel/tools/platforms",
    )
    native.new_local_repository(
        name = "com_google_googletest",
        build_file = str(Label("//third_party/googletest:BUILD.googletest")),
        path = "/usr/src/googletest",
    )

    # The pip TensorFlow (PYTHON_BIN_PATH, else tf_ext's .venv) and a Python toolchain bound
    # to its interpreter, so py_test targets import that TensorFlow.
    tf_configure(name = "local_config_tf")
    native.register_toolchains("@local_config_tf//:py_toolchain")
