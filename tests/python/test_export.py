"""tf_ext_grad --export: the C++ gradient as a SavedModel that runs without tf_ext.

A Keras MobileNetV2 (weights=None, 32x32, batch 2), and an LSTM whose frozen graph keeps its
While loop (so the export holds loop functions), are frozen to GraphDefs with Python's
gradient of the same frozen function as the reference (scripts/freeze_keras_model.py), their
gradients are built and exported by tf_ext_grad, and each SavedModel is run by
  * a Python process that never imports tf_ext (tf.saved_model.load, signature "gradients"),
  * run_exported_gradients, a C++ program linking only TensorFlow (LoadSavedModel),
  * TensorFlow's saved_model_cli (the TF1 Session loader),
each checking that no tf_ext op is registered and no tf_ext library mapped in it. Negative
controls show those checks see tf_ext when it is there. The exported graph is inspected: no
SymbolicGradient or function-call nodes, only TensorFlow's ops, the weights in variables/.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
FREEZE = os.path.join(WORKSPACE, "scripts", "freeze_keras_model.py")
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_grad")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")
CPP_RUNNER = os.path.join(WORKSPACE, "tests", "run_exported_gradients")
CALL_OPS = {"SymbolicGradient", "PartitionedCall", "StatefulPartitionedCall"}

# Runs in a fresh interpreter: loads the SavedModel, runs its "gradients" signature on .npy
# inputs, saves the outputs, and reports whether tf_ext is anywhere in the process.
# argv: DIR OUT.npz REPORT.json IMPORT_TF_EXT(0/1) KEY=FILE.npy...
CHILD = r'''
import json, sys, time
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session as c_api
export_dir, out, report, import_tf_ext = sys.argv[1:5]
if import_tf_ext == "1":  # the negative control, and graphs that use tf_ext's ops
    import tf_ext
    tf_ext.smooth_l1(tf.constant([1.0]), delta=1.0)  # the op library loads on first use
inputs = dict(a.split("=", 1) for a in sys.argv[5:])
start = time.time()
loaded = tf.saved_model.load(export_dir)
load_s = time.time() - start
fn = loaded.signatures["gradients"]
feeds = {k: tf.constant(np.load(v)) for k, v in inputs.items()}
start = time.time()
result = fn(**feeds)
first_s = time.time() - start
times = []
for _ in range(5):
    start = time.time()
    fn(**feeds)
    times.append(time.time() - start)
np.savez(out, **{k: v.numpy() for k, v in result.items()})
buf = c_api.TF_GetAllOpList()  # every op registered in this process
ops = [o.name for o in op_def_pb2.OpList.FromString(c_api.TF_GetBuffer(buf)).op
       if o.name.startswith("TfExt>")]
c_api.TF_DeleteBuffer(buf)
maps = [l for l in open("/proc/self/maps") if "_tf_ext_ops" in l]
json.dump({"tf_ext_imported": [m for m in sys.modules if m.split(".")[0] == "tf_ext"],
           "tf_ext_ops": ops, "tf_ext_maps": len(maps), "load_s": load_s,
           "first_run_s": first_s, "steady_ms": 1e3 * sorted(times)[2]}, open(report, "w"))
'''


def tf_ext_grad(*args):
    return subprocess.run([TOOL, "--library=" + LIBRARY] + list(args), capture_output=True,
                          text=True)


def child_env():
    env = dict(os.environ)
    env.pop("TF_EXT_LIBRARY", None)  # nothing points the child at the op library
    env.pop("TF_EXT_TEST_LIBRARY", None)
    return env


def run_python(tmp_path, export_dir, inputs, import_tf_ext=False):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out, report = tmp_path / "py_out.npz", tmp_path / "py_report.json"
    env = child_env()
    if import_tf_ext:
        env["TF_EXT_LIBRARY"] = LIBRARY
    r = subprocess.run([sys.executable, str(script), str(export_dir), str(out), str(report),
                        "1" if import_tf_ext else "0"] +
                       ["%s=%s" % kv for kv in inputs.items()],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(np.load(out)), json.load(open(report))


def run_cpp(tmp_path, export_dir, inputs, preload=None):
    out = tmp_path / "cpp_out"
    out.mkdir(exist_ok=True)
    args = [CPP_RUNNER, str(export_dir), str(out)]
    for key, path in inputs.items():
        raw = str(tmp_path / (key + ".bin"))
        np.load(path).tofile(raw)
        args.append("%s=%s" % (key, raw))
    env = child_env()
    if preload:
        env["LD_PRELOAD"] = preload
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    return r, out


def read_cpp_outputs(stdout, out):
    arrays = {}
    for line in stdout.splitlines():
        if line.startswith("output "):
            _, key, dtype, dims = line.split(" ")
            shape = tuple(int(d) for d in dims.strip("[]").split(",") if d)
            dtype = {"float": np.float32, "double": np.float64, "half": np.float16}[dtype]
            arrays[key] = np.fromfile(str(out / (key + ".bin")), dtype).reshape(shape)
    return arrays


def cpp_number(stdout, prefix):
    for line in stdout.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):].split()[0])
    raise AssertionError("no '%s' in %s" % (prefix, stdout))


def load_meta_graph(export_dir):
    from tensorflow.core.protobuf import saved_model_pb2
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString(open(os.path.join(export_dir, "saved_model.pb"), "rb").read())
    assert len(sm.meta_graphs) == 1
    return sm.meta_graphs[0]


def all_nodes(graph_def):
    yield from graph_def.node
    for f in graph_def.library.function:
        yield from f.node_def


def float_const_elements(node):
    from tensorflow.core.framework import types_pb2
    t = node.attr["value"].tensor
    if t.dtype not in (types_pb2.DT_FLOAT, types_pb2.DT_DOUBLE, types_pb2.DT_HALF,
                       types_pb2.DT_BFLOAT16):
        return 0
    return int(np.prod([d.size for d in t.tensor_shape.dim])) if t.tensor_shape.dim else 1


def assert_close(got, ref, what):
    scale = np.abs(ref).max()
    assert scale > 0, what
    rel = np.abs(got - ref).max() / scale
    assert rel <= 1e-4, "%s: max relative error %.3g" % (what, rel)


# (model, freeze flags): MobileNetV2 is the model; the LSTM's loop is functional in
# the frozen graph (Python's reference gradient needs that) and in the export.
MODELS = {"MobileNetV2": ["--size=32", "--batch=2"],
          "LSTM": ["--size=32", "--batch=2", "--functional_control_flow"]}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    frozen = tmp / "frozen"
    r = subprocess.run([sys.executable, FREEZE, request.param, "--out=" + str(frozen)] +
                       MODELS[request.param], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    export = tmp / "export"
    r = tf_ext_grad("--graph=%s" % (frozen / "model.pb"), "--y=y", "--x=x",
                    "--feed=x=@%s" % (frozen / "input.npy"), "--save=%s" % (tmp / "cli.npz"),
                    "--export=%s" % export)
    assert r.returncode == 0, r.stderr[-3000:]
    return {"name": request.param, "frozen": frozen, "export": export, "stdout": r.stdout,
            "info": json.load(open(frozen / "info.json")),
            "expected": dict(np.load(frozen / "expected.npz")),
            "cli": dict(np.load(tmp / "cli.npz")),
            "inputs": {"x": str(frozen / "input.npy")}}


def test_exported_graph_is_plain_tensorflow_with_weights_in_variables(model):
    export = model["export"]
    assert "only TensorFlow's own ops: it loads without tf_ext" in model["stdout"]
    meta = load_meta_graph(export)
    assert list(meta.meta_info_def.tags) == ["serve"]
    assert list(meta.signature_def) == ["gradients"]
    sig = meta.signature_def["gradients"]
    assert sorted(sig.inputs) == ["x"] and sorted(sig.outputs) == ["d_x", "y"]
    shape = model["info"]["input_shape"]
    assert [d.size for d in sig.inputs["x"].tensor_shape.dim] == shape
    ops = {n.op for n in all_nodes(meta.graph_def)}
    assert not ops & CALL_OPS, ops & CALL_OPS
    assert not [o for o in ops if o.startswith("TfExt>")]
    function_names = {f.signature.name for f in meta.graph_def.library.function}
    assert not ops & function_names  # no call by a function's name either
    # Every op is TensorFlow's own: registered in this process, which has not loaded tf_ext.
    from tensorflow.python.framework import op_def_registry
    assert "tf_ext" not in sys.modules
    assert all(op_def_registry.get(o) is not None for o in ops), ops
    # The weights are variables restored from variables/, not constants in the graph.
    assert "VarHandleOp" in ops and "RestoreV2" in ops
    big = [n.name for n in all_nodes(meta.graph_def)
           if n.op == "Const" and float_const_elements(n) >= 16]
    assert big == []
    if model["name"] == "LSTM":  # the loop and its gradient loop, as functions
        assert "While" in ops or "StatelessWhile" in ops
        assert len(meta.graph_def.library.function) >= 2
    data = os.path.join(export, "variables", "variables.data-00000-of-00001")
    assert os.path.isfile(os.path.join(export, "variables", "variables.index"))
    if model["name"] == "MobileNetV2":
        params = model["info"]["params"]
        assert os.path.getsize(data) >= 4 * params  # every float32 weight
        assert os.path.getsize(os.path.join(export, "saved_model.pb")) < os.path.getsize(data) / 4
    assert not [p for p in os.listdir(export.parent) if ".partial-" in p]


def test_python_process_without_tf_ext_runs_it(model, tmp_path):
    got, report = run_python(tmp_path, model["export"], model["inputs"])
    assert report["tf_ext_imported"] == [] and report["tf_ext_ops"] == []
    assert report["tf_ext_maps"] == 0
    ref = model["expected"]
    assert got["d_x"].shape == ref["dy_dx"].shape == tuple(model["info"]["input_shape"])
    assert_close(got["d_x"], ref["dy_dx"], "Python-loaded export vs Python's gradient")
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-4)
    assert_close(got["d_x"], model["cli"]["d_x"], "Python-loaded export vs tf_ext_grad")
    print("python: load %.2f s, first run %.2f s, steady %.1f ms" %
          (report["load_s"], report["first_run_s"], report["steady_ms"]))


def test_python_check_sees_tf_ext_when_imported(model, tmp_path):
    # Negative control: the same child, importing tf_ext first, reports it.
    _, report = run_python(tmp_path, model["export"], model["inputs"],
                           import_tf_ext=True)
    assert "tf_ext" in report["tf_ext_imported"]
    assert "TfExt>SmoothL1" in report["tf_ext_ops"] and report["tf_ext_maps"] > 0


def test_cpp_program_without_tf_ext_runs_it(model, tmp_path):
    r, out = run_cpp(tmp_path, model["export"], model["inputs"])
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "tf_ext ops registered: 0" in r.stdout and "tf_ext libraries mapped: 0" in r.stdout
    got = read_cpp_outputs(r.stdout, out)
    ref = model["expected"]
    assert got["d_x"].shape == ref["dy_dx"].shape and got["d_x"].dtype == np.float32
    assert_close(got["d_x"], ref["dy_dx"], "C++-loaded export vs Python's gradient")
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-4)
    print("c++: load %.2f s, first run %.2f s, steady %.1f ms" %
          (cpp_number(r.stdout, "load seconds"), cpp_number(r.stdout, "first run seconds"),
           cpp_number(r.stdout, "steady run ms median")))


def test_cpp_check_sees_tf_ext_when_loaded(model, tmp_path):
    # Negative control: with the op library preloaded, the program reports it and exits 3.
    r, _ = run_cpp(tmp_path, model["export"], model["inputs"], preload=LIBRARY)
    assert r.returncode == 3, r.stdout + r.stderr[-2000:]
    assert "tf_ext ops registered: 0" not in r.stdout
    assert "tf_ext libraries mapped: 0" not in r.stdout


def test_saved_model_cli_runs_it(model, tmp_path):
    # TensorFlow's own tool, through the TF1 Session loader (tf.compat.v1.saved_model.load).
    out = tmp_path / "cli_out"
    r = subprocess.run([sys.executable, "-m", "tensorflow.python.tools.saved_model_cli", "run",
                        "--dir", str(model["export"]), "--tag_set", "serve",
                        "--signature_def", "gradients",
                        "--inputs", "x=" + model["inputs"]["x"], "--outdir", str(out)],
                       capture_output=True, text=True, env=child_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert_close(np.load(out / "d_x.npy"), model["expected"]["dy_dx"],
                 "saved_model_cli run vs Python's gradient")


def test_several_xs_and_a_weight_as_x(tmp_path):
    # y = tanh(x w + b): gradients with respect to the input and to a weight that the export
    # turns into a variable, against the closed form.
    import tensorflow as tf
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    w = (0.1 * rng.standard_normal((64, 32))).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        xp = tf.compat.v1.placeholder(tf.float32, [2, 64], name="x")
        tf.identity(tf.tanh(tf.matmul(xp, tf.constant(w, name="w")) + tf.constant(b, name="b")),
                    name="y")
    tf.io.write_graph(g.as_graph_def(), str(tmp_path), "small.pb", as_text=False)
    np.save(tmp_path / "x.npy", x)
    export = tmp_path / "sub" / "export"  # parents are created
    r = tf_ext_grad("--graph=%s" % (tmp_path / "small.pb"), "--y=y", "--x=x,w",
                    "--feed=x=@%s" % (tmp_path / "x.npy"), "--export=%s" % export)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 weights in variables/" in r.stdout, r.stdout
    got, report = run_python(tmp_path, export, {"x": str(tmp_path / "x.npy")})
    assert report["tf_ext_imported"] == []
    dz = 1 - np.tanh(x @ w + b) ** 2
    np.testing.assert_allclose(got["y"], np.tanh(x @ w + b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["d_x"], dz @ w.T, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["d_w"], x.T @ dz, rtol=1e-4, atol=1e-6)


def test_graph_with_tf_ext_ops_says_it_needs_the_library(tmp_path):
    (tmp_path / "model.pbtxt").write_text('''
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "y" op: "TfExt>SmoothL1" input: "x"
       attr { key: "T" value { type: DT_FLOAT } } attr { key: "delta" value { f: 1 } } }
''')
    export = tmp_path / "export"
    export.mkdir()  # an empty directory is fine
    r = tf_ext_grad("--graph=%s" % (tmp_path / "model.pbtxt"), "--y=y", "--x=x",
                    "--feed=x=4:-2,-0.5,0.5,2", "--export=%s" % export)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "it uses tf_ext's ops TfExt>SmoothL1: load the op library" in r.stdout
    assert "0 weights in variables/" in r.stdout
    assert os.listdir(export / "variables") == []
    ops = {n.op for n in all_nodes(load_meta_graph(export).graph_def)}
    assert "TfExt>SmoothL1" in ops and not ops & CALL_OPS
    np.save(tmp_path / "x.npy", np.array([-2, -0.5, 0.5, 2], np.float32))
    got, _ = run_python(tmp_path, export, {"x": str(tmp_path / "x.npy")}, import_tf_ext=True)
    np.testing.assert_allclose(got["d_x"], [-1, -0.5, 0.5, 1])


@pytest.fixture
def small_graph(tmp_path):
    path = tmp_path / "g.pbtxt"
    path.write_text('''
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "y" op: "Tanh" input: "x" attr { key: "T" value { type: DT_FLOAT } } }
''')
    return ["--graph=%s" % path, "--y=y", "--x=x", "--feed=x=2:0.5,1"]


def assert_one_error(r, *fragments):
    assert r.returncode == 1, r.stdout + r.stderr
    errors = [l for l in r.stderr.splitlines() if l.startswith("tf_ext_grad: error:")]
    assert len(errors) == 1, r.stderr
    for f in fragments:
        assert f in errors[0], errors[0]
    assert "exported" not in r.stdout


def test_non_empty_directory_is_refused_and_untouched(tmp_path, small_graph):
    target = tmp_path / "export"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    r = tf_ext_grad(*small_graph, "--export=%s" % target)
    assert_one_error(r, str(target), "not empty")
    assert "built the backward graph" not in r.stdout  # refused before the work
    assert os.listdir(target) == ["keep.txt"] and (target / "keep.txt").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["export", "g.pbtxt"]


def test_a_file_or_a_path_under_a_file_is_refused(tmp_path, small_graph):
    (tmp_path / "file").write_text("x")
    r = tf_ext_grad(*small_graph, "--export=%s" % (tmp_path / "file"))
    assert_one_error(r, "not a directory")
    r = tf_ext_grad(*small_graph, "--export=%s" % (tmp_path / "file" / "sub" / "export"))
    assert_one_error(r, "'%s' is not a directory" % (tmp_path / "file"))
    assert sorted(os.listdir(tmp_path)) == ["file", "g.pbtxt"]
    assert (tmp_path / "file").read_text() == "x"


def test_symbolic_gradients_cannot_be_exported(tmp_path, small_graph):
    r = tf_ext_grad(*small_graph, "--symbolic_gradients", "--export=%s" % (tmp_path / "e"))
    assert_one_error(r, "--symbolic_gradients")
    assert not (tmp_path / "e").exists()
