"""The import-time version guard (tf_ext._loader.version_mismatch / check_tensorflow_version):
which TensorFlow releases and ABI flags it accepts, warns about or refuses, and that the build
this test runs against is recorded consistently. The installed-wheel path is in test_wheel.py,
the real cross-release one in `make test-tf`."""

from __future__ import annotations

import os
import re
import warnings

import pytest
import tensorflow as tf

import tf_ext
from tf_ext import _loader

ABI1 = ["-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1", "-DEIGEN_MAX_ALIGN_BYTES=64"]
ABI0 = ["-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=0", "-DEIGEN_MAX_ALIGN_BYTES=64"]


def _info(version: str, flags: list[str] = ABI1, dist: str = "tensorflow-cpu") -> dict:
    major, minor = (int(v) for v in version.split(".")[:2])
    return {"tensorflow_version": version, "compile_flags": flags,
            "tensorflow_distribution": dist,
            "tensorflow_requirement": f"{dist}>={major}.{minor}.0,<{major}.{minor + 1}"}


def test_same_release_and_abi_is_accepted():
    assert _loader.version_mismatch(_info("2.21.0"), "2.21.0", ABI1) is None


def test_no_build_info_means_nothing_to_check():
    assert _loader.version_mismatch({}, "2.21.0", ABI1) is None


@pytest.mark.parametrize("running", ["2.21.1", "2.21.0rc2", "2.21.13"])
def test_other_patch_release_warns(running):
    level, message = _loader.version_mismatch(_info("2.21.0"), running, ABI1)
    assert level == "warning"
    assert "built for TensorFlow 2.21.0" in message and f"runs TensorFlow {running}" in message
    assert "patch releases of TensorFlow 2.21 keep its C++ ABI" in message


@pytest.mark.parametrize("running", ["2.20.0", "2.22.0", "2.12.1", "3.21.0"])
def test_other_minor_or_major_release_is_an_error(running):
    level, message = _loader.version_mismatch(_info("2.21.0"), running, ABI1)
    assert level == "error"
    assert "built for TensorFlow 2.21.0 (tensorflow-cpu, _GLIBCXX_USE_CXX11_ABI=1)" in message
    assert f"runs TensorFlow {running}" in message
    assert "pip install 'tensorflow-cpu>=2.21.0,<2.22'" in message
    assert "TF_EXT_SKIP_VERSION_CHECK=1" in message


def test_other_cxx11_abi_flag_is_an_error_even_for_the_same_release():
    level, message = _loader.version_mismatch(_info("2.21.0", ABI0), "2.21.0", ABI1)
    assert level == "error"
    assert "_GLIBCXX_USE_CXX11_ABI=0" in message and "(_GLIBCXX_USE_CXX11_ABI=1)" in message
    level, _ = _loader.version_mismatch(_info("2.21.0", ABI0), "2.21.3", ABI1)
    assert level == "error"


def test_check_raises_and_warns(monkeypatch):
    monkeypatch.delenv(_loader.SKIP_VERSION_CHECK_ENV, raising=False)
    monkeypatch.setattr(_loader, "build_info", lambda: _info("1.15.0"))
    with pytest.raises(tf_ext.TensorFlowVersionError, match="built for TensorFlow 1.15.0"):
        _loader.check_tensorflow_version()
    assert issubclass(tf_ext.TensorFlowVersionError, ImportError)
    major, minor, patch = (int(v) for v in tf.__version__.split(".")[:3])
    flags = tf.sysconfig.get_compile_flags()
    monkeypatch.setattr(_loader, "build_info",
                        lambda: _info(f"{major}.{minor}.{patch + 1}", flags))
    with pytest.warns(tf_ext.TensorFlowVersionWarning, match="keep its C\\+\\+ ABI"):
        _loader.check_tensorflow_version()
    monkeypatch.setenv(_loader.SKIP_VERSION_CHECK_ENV, "1")
    monkeypatch.setattr(_loader, "build_info", lambda: _info("1.15.0"))
    _loader.check_tensorflow_version()  # skipped on request


def test_this_build_matches_the_running_tensorflow():
    info = tf_ext.build_info()
    assert info["tensorflow_version"] == tf.__version__
    assert info["tensorflow_git_version"] == tf.version.GIT_VERSION
    # Every define TensorFlow compiles with (the ABI flag among them) is recorded.
    defines = {f for f in tf.sysconfig.get_compile_flags() if f.startswith("-D")}
    assert "-D_GLIBCXX_USE_CXX11_ABI=1" in defines or "-D_GLIBCXX_USE_CXX11_ABI=0" in defines
    assert defines <= set(info["compile_flags"]), (defines, info["compile_flags"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _loader.check_tensorflow_version()


def test_version_is_version_h_release():
    # tf_ext.__version__: TF_EXT_VERSION_STRING of tf_ext/version.h (the C API's and the
    # wheel's version), through the build info; a package without one asks its distribution.
    root = os.path.join(os.environ.get("TEST_SRCDIR", ""), "tf_ext")
    with open(os.path.join(root, "tf_ext", "version.h"), encoding="utf-8") as f:
        (line,) = [l for l in f if l.startswith("#define TF_EXT_VERSION_STRING ")]
    assert tf_ext.__version__ == line.split()[2].strip('"')
    assert re.fullmatch(r"\d+\.\d+\.\d+", tf_ext.__version__)
    assert tf_ext.build_info()["tf_ext_version"] == tf_ext.__version__


def test_version_without_build_info_is_the_distributions(monkeypatch):
    import importlib.metadata
    monkeypatch.setattr(_loader, "build_info", lambda: {})
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: {"tf_ext": "9.8.7"}[name])
    assert _loader.tf_ext_version() == "9.8.7"

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert _loader.tf_ext_version() == "0+unknown"
