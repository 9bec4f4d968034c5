"""The wheel built by python/build_wheel.py is self-contained: installed into an empty
--target directory, `import tf_ext` finds its own op library and its gradients work, with
nothing from the source tree or Bazel on the path. Its metadata requires a TensorFlow that the
running one satisfies; `--manylinux` retags it without bundling TensorFlow's libraries; and the
installed package refuses (or warns about) a TensorFlow it was not built for. It also ships
tf_ext_train (runnable from the install, with no Python in the process, and trains as SGD says)
and the C API: its headers, versioned by tf_ext/version.h like the wheel itself, and
libtf_ext_c.so, which exports exactly the functions those headers declare and against which a C
program compiled with cc as docs/c_api.md says differentiates and trains."""

from __future__ import annotations

import base64
import email.parser
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
import tensorflow as tf
from packaging.requirements import Requirement

WHEEL_SCRIPT = "python/build_wheel.py"
BUILD_INFO = "python/tf_ext/_build_info.json"
DIST_INFO = "tf_ext-0.1.0.dist-info"
# The built tf_ext_train: runfiles (bazel test) or bazel-bin (pytest from bazel-bin).
TRAIN_PROGRAM = os.environ.get("TF_EXT_TRAIN", "tf_ext/tf_ext_train")
C_LIBRARY = os.environ.get("TF_EXT_C_LIBRARY", "tf_ext/libtf_ext_c.so")
HEADERS = ("tf_ext/version.h", "tf_ext/graph/c_api/c_gradients.h",
           "tf_ext/graph/c_api/c_gradient_session.h", "tf_ext/train/c_trainer.h")
C_PROGRAM = "tests/wheel_c_program.c"
# docs/c_api.md shows these lines (an excerpt of this file): the test runs them as written, in
# the directory of my_program.c, with the installed wheel on PYTHONPATH.
BUILD_C_PROGRAM = r"""
TF_EXT_INCLUDE=$(python -c 'import tf_ext; print(tf_ext.get_include())')
TF_EXT_LIB=$(python -c 'import tf_ext; print(tf_ext.get_lib())')
TF_INCLUDE=$(python -c 'import tensorflow as tf; print(tf.sysconfig.get_include())')
TF_LIB=$(python -c 'import tensorflow as tf; print(tf.sysconfig.get_lib())')
cc -std=c11 -o my_program my_program.c \
    -I"$TF_EXT_INCLUDE" -I"$TF_INCLUDE" -L"$TF_EXT_LIB" -ltf_ext_c -Wl,-rpath,"$TF_EXT_LIB" \
    -L"$TF_LIB" -l:libtensorflow_cc.so.2 -l:libtensorflow_framework.so.2 -Wl,-rpath,"$TF_LIB"
"""


def _build(out, *extra: str) -> str:
    result = subprocess.run(
        [sys.executable, WHEEL_SCRIPT, "--library", os.environ["TF_EXT_LIBRARY"],
         "--tf-ext-train", TRAIN_PROGRAM, "--c-library", C_LIBRARY, "--build-info", BUILD_INFO,
         "--out", str(out),
         *extra],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def _metadata(wheel: str):
    with zipfile.ZipFile(wheel) as whl:
        return email.parser.Parser().parsestr(whl.read(f"{DIST_INFO}/METADATA").decode())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    return _build(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def manylinux_wheel(tmp_path_factory) -> str:
    return _build(tmp_path_factory.mktemp("dist"), "--manylinux")


def test_wheel_contents_and_record(wheel):
    name = os.path.basename(wheel)
    assert name.startswith("tf_ext-0.1.0-cp%d%d-" % sys.version_info[:2]) and name.endswith(".whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        for required in ("tf_ext/__init__.py", "tf_ext/_bridge.py", "tf_ext/_loader.py",
                         "tf_ext/ops.py", "tf_ext/layers.py", "tf_ext/_tf_ext_ops.so",
                         "tf_ext/_build_info.json", "tf_ext/_tools.py", "tf_ext/tf_ext_train",
                         "tf_ext/libtf_ext_c.so",
                         "tf_ext-0.1.0.dist-info/entry_points.txt",
                         "tf_ext-0.1.0.dist-info/RECORD",
                         "tf_ext-0.1.0.dist-info/WHEEL", "tf_ext-0.1.0.dist-info/METADATA"):
            assert required in names
        record = whl.read("tf_ext-0.1.0.dist-info/RECORD").decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if path.endswith("RECORD"):
                continue
            data = whl.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={want}" and int(size) == len(data), path
        assert len(record) == len(names)


def test_wheel_ships_tf_ext_train_and_the_c_api_headers(wheel):
    """The program and the C API library as built (executable), each C API header as in the
    source tree under tf_ext/include/, a console script, and one version: version.h's is the
    wheel's."""
    with zipfile.ZipFile(wheel) as whl:
        for name, built in (("tf_ext/tf_ext_train", TRAIN_PROGRAM),
                            ("tf_ext/libtf_ext_c.so", C_LIBRARY)):
            info = whl.getinfo(name)
            assert (info.external_attr >> 16) & 0o111, (name, oct(info.external_attr >> 16))
            with open(built, "rb") as f:
                assert whl.read(name) == f.read(), name
        for header in HEADERS:
            with open(header, "rb") as f:
                assert whl.read(f"tf_ext/include/{header}") == f.read(), header
        shipped = sorted(n for n in whl.namelist() if n.endswith(".h"))
        assert shipped == sorted(f"tf_ext/include/{h}" for h in HEADERS)
        entry_points = whl.read(f"{DIST_INFO}/entry_points.txt").decode()
        version_h = whl.read("tf_ext/include/tf_ext/version.h").decode()
    assert "tf_ext_train = tf_ext._tools:tf_ext_train" in entry_points.splitlines()
    assert f'#define TF_EXT_VERSION_STRING "{_metadata(wheel)["Version"]}"' in version_h
    for header in HEADERS[1:]:
        with open(header, encoding="utf-8") as f:
            assert '#include "tf_ext/version.h"' in f.read(), header


def test_installed_wheel_is_self_contained(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                    "--no-cache-dir", "--disable-pip-version-check", "--quiet",
                    "--target", str(site), wheel], check=True)
    # Only the install dir on the path; no source tree, runfiles or library override.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TF_EXT_LIBRARY", "RUNFILES_DIR", "PYTHON_RUNFILES",
                        "RUNFILES_MANIFEST_FILE")}
    env["PYTHONPATH"] = str(site)
    code = textwrap.dedent("""
        import json
        import tensorflow as tf
        import tf_ext
        x = tf.constant([1.0, 2.0, 3.0, 4.0])
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf_ext.zero_out(x, preserve_index=2)
        g = tape.gradient(y, x, output_gradients=tf.constant([5.0, 6.0, 7.0, 8.0]))
        print("RESULT", json.dumps({"module": tf_ext.__file__, "library": tf_ext.library_path(),
                                    "train": tf_ext.tf_ext_train_path(),
                                    "include": tf_ext.get_include(),
                                    "lib": tf_ext.get_lib(),
                                    "c_library": tf_ext.c_library_path(),
                                    "y": y.numpy().tolist(), "g": g.numpy().tolist(),
                                    "built_for": tf_ext.build_info()["tensorflow_version"],
                                    "version": tf_ext.__version__}))
    """)
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT"))
    got = json.loads(line[len("RESULT"):])
    assert got["module"].startswith(str(site)), got
    assert got["library"].startswith(os.path.realpath(site)), got
    assert got["train"] == str(site / "tf_ext" / "tf_ext_train"), got
    assert got["lib"] == str(site / "tf_ext"), got
    assert got["c_library"] == str(site / "tf_ext" / "libtf_ext_c.so"), got
    assert os.path.isfile(os.path.join(got["include"], "tf_ext", "train", "c_trainer.h")), got
    assert got["y"] == [0.0, 0.0, 3.0, 0.0]
    assert got["g"] == [0.0, 0.0, 7.0, 0.0]
    assert got["built_for"]
    assert got["version"] == _metadata(wheel)["Version"], got


def test_metadata_requires_the_tensorflow_it_was_built_for(wheel):
    meta = _metadata(wheel)
    with open(BUILD_INFO, encoding="utf-8") as f:
        info = json.load(f)
    (req,) = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    # The distribution providing this process's TensorFlow, any patch of its minor release.
    running = [d for d in importlib.metadata.distributions()
               if any(str(p) == "tensorflow/__init__.py" for p in (d.files or []))]
    assert len(running) == 1
    assert req.name == re.sub(r"[-_.]+", "-", running[0].metadata["Name"]).lower()
    assert req.specifier.contains(tf.__version__)
    major, minor = (int(v) for v in tf.__version__.split(".")[:2])
    assert req.specifier.contains(f"{major}.{minor}.99")
    assert not req.specifier.contains(f"{major}.{minor + 1}.0")
    assert not req.specifier.contains(f"{major}.{minor - 1}.9")
    assert info["tensorflow_version"] == tf.__version__
    assert str(Requirement(info["tensorflow_requirement"])) == str(req)


def test_metadata_version_licence_readme(wheel):
    meta = _metadata(wheel)
    assert meta["Name"] == "tf_ext" and meta["Version"] == "0.1.0"
    assert meta["License"] == "Apache-2.0"
    assert "License :: OSI Approved :: Apache Software License" in meta.get_all("Classifier")
    assert meta["Description-Content-Type"] == "text/markdown"
    with open("README.md", encoding="utf-8") as f:
        readme = f.read()
    assert meta.get_payload().strip() == readme.strip()
    with zipfile.ZipFile(wheel) as whl, open("LICENSE", "rb") as f:
        assert whl.read(f"{DIST_INFO}/LICENSE") == f.read()


def test_other_tensorflow_distribution_same_binary(wheel, tmp_path):
    other = _build(tmp_path, "--tensorflow-dist", "tensorflow")
    (req,) = [Requirement(r) for r in _metadata(other).get_all("Requires-Dist")]
    (base,) = [Requirement(r) for r in _metadata(wheel).get_all("Requires-Dist")]
    assert req.name == "tensorflow" and req.specifier == base.specifier
    with zipfile.ZipFile(wheel) as a, zipfile.ZipFile(other) as b:
        assert a.read("tf_ext/_tf_ext_ops.so") == b.read("tf_ext/_tf_ext_ops.so")


def _glibc() -> tuple[int, int]:
    major, minor = platform.libc_ver()[1].split(".")[:2]
    return int(major), int(minor)


def test_manylinux_tag_without_tensorflow_libraries(manylinux_wheel):
    name = os.path.basename(manylinux_wheel)
    m = re.fullmatch(r"tf_ext-0\.1\.0-cp\d+-cp\d+-manylinux_(\d+)_(\d+)_x86_64\.whl", name)
    assert m, name
    assert (int(m.group(1)), int(m.group(2))) <= _glibc()
    with zipfile.ZipFile(manylinux_wheel) as whl:
        names = whl.namelist()
        assert "tf_ext/_tf_ext_ops.so" in names and "tf_ext/libtf_ext_c.so" in names
        assert not [n for n in names if "libtensorflow" in n], names
        tag = [l for l in whl.read(f"{DIST_INFO}/WHEEL").decode().splitlines()
               if l.startswith("Tag:")]
        assert tag == [f"Tag: {'-'.join(name[:-4].split('-')[2:])}"]
        library = whl.read("tf_ext/_tf_ext_ops.so")
        c_library = whl.read("tf_ext/libtf_ext_c.so")
    # Still linked against TensorFlow's framework library, to be found in the process.
    assert b"libtensorflow_framework.so.2" in library
    # The C API library too, and it still looks for them beside tf_ext in site-packages.
    assert b"libtensorflow_cc.so.2" in c_library and b"$ORIGIN/../tensorflow" in c_library


def _install(wheel: str, site) -> dict[str, str]:
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                    "--no-cache-dir", "--disable-pip-version-check", "--quiet",
                    "--target", str(site), wheel], check=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TF_EXT_LIBRARY", "RUNFILES_DIR", "PYTHON_RUNFILES",
                        "RUNFILES_MANIFEST_FILE", "TF_EXT_SKIP_VERSION_CHECK")}
    env["PYTHONPATH"] = str(site)
    return env


def _claim_built_for(site, version: str) -> None:
    """Rewrites the installed build info as if the library had been built for `version`
    (make test-tf checks the same with a library really built for another release)."""
    path = site / "tf_ext" / "_build_info.json"
    info = json.loads(path.read_text())
    major, minor = (int(v) for v in version.split(".")[:2])
    info["tensorflow_version"] = version
    info["tensorflow_requirement"] = (f"{info['tensorflow_distribution']}>={major}.{minor}.0,"
                                      f"<{major}.{minor + 1}")
    path.write_text(json.dumps(info))


IMPORT_AND_DIFFERENTIATE = """
import warnings
import tensorflow as tf
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import tf_ext
for w in caught:
    print("WARNING", w.category.__name__, w.message)
x = tf.constant([1.0, 2.0, 3.0])
with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf_ext.zero_out(x, preserve_index=1)
print("GRAD", tape.gradient(y, x).numpy().tolist())
"""


@pytest.mark.parametrize("case", ["other_minor", "same_minor_other_patch", "skip_env"])
def test_version_guard_of_the_installed_package(wheel, tmp_path, case):
    site = tmp_path / "site"
    env = _install(wheel, site)
    major, minor, patch = (int(v) for v in tf.__version__.split(".")[:3])
    if case == "same_minor_other_patch":
        _claim_built_for(site, f"{major}.{minor}.{patch + 7}")
    else:
        _claim_built_for(site, f"{major}.{minor - 1}.0")
    if case == "skip_env":
        env["TF_EXT_SKIP_VERSION_CHECK"] = "1"
    result = subprocess.run([sys.executable, "-c", IMPORT_AND_DIFFERENTIATE], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    if case == "other_minor":
        assert result.returncode != 0
        # One clear error, raised by tf_ext's guard before anything loads the library.
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("tf_ext._loader.TensorFlowVersionError: tf_ext's op library was "
                               f"built for TensorFlow {major}.{minor - 1}.0"), last
        assert f"this process runs TensorFlow {tf.__version__}" in last
        assert f">={major}.{minor - 1}.0,<{major}.{minor}'" in last
        assert "undefined symbol:" not in result.stderr  # no dlerror: the guard came first
        assert "GRAD" not in result.stdout
    else:
        assert result.returncode == 0, result.stderr[-3000:]
        assert "GRAD [0.0, 1.0, 0.0]" in result.stdout
        warned = [l for l in result.stdout.splitlines() if l.startswith("WARNING")]
        if case == "same_minor_other_patch":
            assert len(warned) == 1 and "TensorFlowVersionWarning" in warned[0], warned
            assert f"built for TensorFlow {major}.{minor}.{patch + 7}" in warned[0]
        else:
            assert warned == [], warned


def _linear_model(tmp_path):
    """A linear model y = x w + b (3 inputs, 1 output) saved by Python as tmp_path/model, and
    8 rows of data: (model_dir, x, y, w0, b0)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32)
    w0 = rng.normal(size=(3, 1)).astype(np.float32)
    b0 = np.zeros([1], np.float32)

    class Linear(tf.Module):
        def __init__(self):
            super().__init__()
            self.kernel = tf.Variable(w0, name="kernel")
            self.bias = tf.Variable(b0, name="bias")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            return tf.matmul(x, self.kernel) + self.bias

    module = Linear()
    model_dir = str(tmp_path / "model")
    tf.saved_model.save(module, model_dir, signatures={"serving_default": module.__call__})
    return model_dir, x, y, w0, b0


def _sgd_reference(x, y, w0, b0):
    """Mean squared error and plain SGD (learning rate 0.1) over batches of 4 rows, in numpy:
    the loss of each batch before its update, and the final weights."""
    w, b, losses = w0.astype(np.float64), b0.astype(np.float64), []
    for i in (0, 4):
        xb, yb = x[i:i + 4].astype(np.float64), y[i:i + 4].astype(np.float64)
        err = xb @ w + b - yb
        losses.append(np.mean(err ** 2))
        w, b = w - 0.1 * 2 * xb.T @ err / 4, b - 0.1 * 2 * err.sum(0) / 4
    return losses, w, b


def test_installed_tf_ext_train_runs_and_trains(wheel, tmp_path):
    """From the install alone: the console script execs the program (TensorFlow's libraries
    found for it); the program run directly finds them through its run path when TensorFlow is
    in the same site-packages, finds the installed op library next to itself, and trains a
    linear model as plain SGD does (two steps, losses and weights against numpy); and the
    installed headers compile in C with the wheel's version."""
    site = tmp_path / "site"
    env = _install(wheel, site)
    env.pop("LD_LIBRARY_PATH", None)
    script = site / "bin" / "tf_ext_train"
    r = subprocess.run([str(script), "--version"], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == f"tf_ext_train 0.1.0 (TensorFlow {tf.__version__})", r.stdout

    # A linear model y = x w + b saved by Python; TensorFlow beside tf_ext, as pip installs it.
    model_dir, x, y, w0, b0 = _linear_model(tmp_path)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    os.symlink(os.path.dirname(tf.__file__), site / "tensorflow")
    program = site / "tf_ext" / "tf_ext_train"
    r = subprocess.run([str(program), f"--saved_model={model_dir}", f"--data={tmp_path / 'd.npz'}",
                        "--inputs=x", "--targets=y", "--loss=mse", "--optimizer=sgd",
                        "--learning_rate=0.1", "--batch_size=4", "--epochs=1",
                        f"--history={tmp_path / 'h.csv'}", f"--save_weights={tmp_path / 'w.npz'}"],
                       env={k: v for k, v in env.items() if k != "PYTHONPATH"}, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    losses, w, b = _sgd_reference(x, y, w0, b0)
    with open(tmp_path / "h.csv") as f:
        got = [float(row.split(",")[2]) for row in f.read().splitlines()[1:]]
    np.testing.assert_allclose(got, losses, rtol=1e-5)
    trained = np.load(tmp_path / "w.npz")
    np.testing.assert_allclose(trained["kernel"], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trained["bias"], b, rtol=1e-5, atol=1e-6)

    source = tmp_path / "version_check.c"
    source.write_text(textwrap.dedent("""
        #include "tf_ext/train/c_trainer.h"
        #include "tf_ext/graph/c_api/c_gradient_session.h"
        #include "tf_ext/graph/c_api/c_gradients.h"
        #if TF_EXT_VERSION_NUMBER != 100
        #error "not tf_ext 0.1.0"
        #endif
        TfExtTrainer* (*new_trainer)(const char*, const char* const*, const char* const*, int,
                                     TF_Status*) = TfExtNewTrainer;
    """))
    r = subprocess.run(["gcc", "-std=c11", "-fsyntax-only", f"-I{site / 'tf_ext' / 'include'}",
                        f"-I{tf.sysconfig.get_include()}", str(source)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _c_api_functions() -> set[str]:
    """The functions the C API headers declare (comments left out)."""
    names = set()
    for header in HEADERS[1:]:
        with open(header, encoding="utf-8") as f:
            text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
        names |= set(re.findall(r"\b(TfExt\w+)\s*\(", text))
    return names


def test_c_library_exports_exactly_the_c_api():
    """libtf_ext_c.so as built: its dynamic symbol table defines every function the shipped
    headers declare and nothing else of tf_ext's (the gradient code it carries stays local, so it
    cannot interpose on the op library's copy); it names itself libtf_ext_c.so, needs TensorFlow's
    libraries and looks for them beside tf_ext in site-packages."""
    declared = _c_api_functions()
    assert {"TfExtAddGradients", "TfExtNewGradientSession", "TfExtNewTrainer"} <= declared
    nm = subprocess.run(["nm", "-D", "--defined-only", C_LIBRARY], capture_output=True,
                        text=True, check=True).stdout
    exported = {}
    for line in nm.splitlines():
        parts = line.split()
        if len(parts) == 3:
            exported[parts[2].split("@")[0]] = parts[1]
    c_api = {name for name, kind in exported.items() if kind == "T"}
    assert c_api == declared, (sorted(declared - c_api), sorted(c_api - declared))
    # No C++ symbol of tf_ext (or of anything else linked in) is exported.
    assert not [n for n in exported if n.startswith("_Z")], sorted(exported)[:20]
    dynamic = subprocess.run(["readelf", "-d", C_LIBRARY], capture_output=True, text=True,
                             check=True).stdout
    assert "Library soname: [libtf_ext_c.so]" in dynamic, dynamic
    assert "Shared library: [libtensorflow_cc.so.2]" in dynamic, dynamic
    assert "$ORIGIN/../tensorflow" in dynamic, dynamic


def test_c_program_built_against_the_installed_wheel(wheel, tmp_path):
    """docs/c_api.md's cc command line, run as written against the wheel installed into an empty
    --target directory, builds a C program that links only the shipped libtf_ext_c.so and
    TensorFlow's libraries. Run with no Python, no LD_LIBRARY_PATH and nothing from the source
    tree, it prints version.h's version, gradients through TfExtAddGradients (before and after
    loading the shipped op library) and TfExtGradientSession, and the losses of two
    TfExtTrainer steps, each against numpy."""
    site = tmp_path / "site"
    env = _install(wheel, site)
    env.pop("LD_LIBRARY_PATH", None)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    work = tmp_path / "c"
    work.mkdir()
    with open(C_PROGRAM, encoding="utf-8") as f:
        (work / "my_program.c").write_text(f.read())
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", BUILD_C_PROGRAM], cwd=work,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    needed = subprocess.run(["readelf", "-d", str(work / "my_program")], capture_output=True,
                            text=True, check=True).stdout
    assert "Shared library: [libtf_ext_c.so]" in needed, needed
    assert str(site / "tf_ext") in needed, needed  # its run path: the installed package

    model_dir, x, y, w0, b0 = _linear_model(tmp_path)
    data = tmp_path / "data.raw"
    data.write_bytes(x.tobytes() + y.tobytes())
    xv = np.array([1.5, -2.25, 0.75])
    run_env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    r = subprocess.run([str(work / "my_program"), str(site / "tf_ext" / "_tf_ext_ops.so"),
                        model_dir, str(data), *map(str, xv)],
                       cwd=work, env=run_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    lines = {}
    for line in r.stdout.splitlines():
        key, *values = line.split()
        lines.setdefault(key, []).append(values)

    version = _metadata(wheel)["Version"]
    major, minor, patch = (int(v) for v in version.split("."))
    assert lines["version"] == [[version, str(major * 10000 + minor * 100 + patch)]]
    # d sum(x * x) / dx = 2 x; through ZeroOut(., preserve_index=1) only element 1 keeps it.
    np.testing.assert_allclose(np.array(lines["square_grad"][0], float), 2 * xv, rtol=1e-15)
    want = np.array([0.0, 2 * xv[1], 0.0])
    np.testing.assert_allclose(np.array(lines["zero_out_grad"][0], float), want, rtol=1e-15)
    np.testing.assert_allclose(np.array(lines["session_grad"][0], float), want, rtol=1e-15)
    losses, _, _ = _sgd_reference(x, y, w0, b0)
    got = [float(v[0]) for v in lines["train_loss"]]
    assert len(got) == 2 and got[0] != got[1], got
    np.testing.assert_allclose(got, losses, rtol=1e-5)
