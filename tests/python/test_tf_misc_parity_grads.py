"""tf_ext's C++ gradients of the last ops of Python's gradient registry (docs/registries.md,
"Parity with Python"): the debugger's identities (DebugGradientIdentity,
DebugGradientRefIdentity, DebugIdentityV2), _EagerConst's refusal and the composite-tensor
variants (tf_ext/grads/tf/array_grad.cc), BatchNormWithGlobalNormalization (nn_grad.cc), against
Python's gradients of the same node on the same inputs; BlockLSTM (rnn_grad.cc) too, and
BlockLSTMV2 against central differences, where Python's gradient is not the derivative; the
ragged ops RaggedFillEmptyRows, RaggedTensorToSparse, RaggedGather, RaggedTensorToTensor,
RaggedTensorToVariant and RaggedTensorFromVariant (ragged_grad.cc).

The C++ gradient runs alone (a SymbolicGradient node in a tf.compat.v1 Session, `compare` of
test_tf_nn_math_grads.py); Python's is tf.gradients of the same node. Numeric Jacobians:
tests/tf_misc_parity_grads_test.cc.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2
from tensorflow.python.debug.lib import debug_gradients
from tensorflow.python.ops import composite_tensor_ops

import tf_ext
from test_tf_nn_math_grads import cgrid, compare, grid

FLOATS = [np.float32, np.float64]
TOL = {np.float32: 2e-5, np.float64: 1e-12}


def symbolic_gradient(op, dys, tout):
    f = attr_value_pb2.NameAttrList(name=op.type)
    for k, v in op.node_def.attr.items():
        f.attr[k].CopyFrom(v)
    return tf.raw_ops.SymbolicGradient(input=list(op.inputs) + list(dys), Tout=tout, f=f)


# ------------------------------------------------------------------------------------------
# The debugger's identities: d(input) = d(output).

@pytest.mark.parametrize("dtype", FLOATS)
def test_debug_identity_v2(dtype):
    x = grid((3, 4), dtype, seed=1)
    compare(lambda: tf.raw_ops.DebugIdentityV2(input=x, op_name="x", output_slot=0),
            TOL[dtype])
    z = cgrid((5,), np.complex128, seed=2)
    compare(lambda: tf.raw_ops.DebugIdentityV2(input=z), 1e-12)


@pytest.mark.parametrize("dtype", FLOATS)
def test_debug_gradient_identity(dtype):
    """The op as Python's GradientsDebugger inserts it (Python's gradient needs its name)."""
    debugger = debug_gradients.GradientsDebugger()
    x = grid((2, 3), dtype, seed=3)

    def build():
        y = debugger.identify_gradient(tf.constant(x))
        assert y.op.type == "DebugGradientIdentity"
        return y

    compare(build, TOL[dtype])


def test_debug_gradient_ref_identity():
    """On a v1 (reference) variable, as the GradientsDebugger inserts it."""
    debugger = debug_gradients.GradientsDebugger()
    dy = grid((3,), np.float32, seed=4)
    with tf.Graph().as_default():
        tf_ext.library()
        var = tf.compat.v1.Variable(grid((3,), np.float32, seed=5), use_resource=False)
        y = debugger.identify_gradient(var._variable)  # pylint: disable=protected-access
        assert y.op.type == "DebugGradientRefIdentity" and y.dtype._is_ref_dtype
        (cpp,) = symbolic_gradient(y.op, [tf.constant(dy)], [tf.float32])
        (py,) = tf.gradients(y, var._variable, grad_ys=tf.constant(dy))
        with tf.compat.v1.Session() as sess:
            sess.run(var.initializer)
            got, want = sess.run([cpp, py])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, dy)


# ------------------------------------------------------------------------------------------
# _EagerConst: Python's gradient only raises; C++'s fails with Python's message.

def test_eager_const_refuses_as_python():
    message = "This op should never interact with gradient APIs. Please file a bug."
    with tf.Graph().as_default() as g:
        tf_ext.library()
        x = tf.constant([1.0, 2.0])
        op = g._create_op_internal(  # pylint: disable=protected-access
            "_EagerConst", [x], [tf.float32], name="eager_const")
        cpp = symbolic_gradient(op, [tf.ones([2])], [tf.float32])
        with pytest.raises(AssertionError, match=message):
            tf.gradients(op.outputs[0], x)
        with tf.compat.v1.Session() as sess:
            with pytest.raises(tf.errors.UnimplementedError, match=message):
                sess.run(cpp)


# ------------------------------------------------------------------------------------------
# BatchNormWithGlobalNormalization: its kernels (and Python's graph builder) accept it only in
# graphs of GraphDef version < 9; importing a GraphDef of producer 8 makes the graph one.

def old_graph() -> tf.Graph:
    g = tf.Graph()
    gd = graph_pb2.GraphDef()
    gd.versions.producer = 8
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    assert g.graph_def_versions.producer == 8
    return g


@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("dtype", FLOATS)
def test_batch_norm_with_global_normalization(dtype, scale):
    t = grid((2, 3, 2, 4), dtype, seed=6)
    m, beta, gamma = (grid((4,), dtype, seed=s) for s in (7, 8, 9))
    v = grid((4,), dtype, lo=0.1, hi=2.0, seed=10)
    dy = grid((2, 3, 2, 4), dtype, seed=11)
    with old_graph().as_default():
        tf_ext.library()
        inputs = [tf.constant(a) for a in (t, m, v, beta, gamma)]
        y = tf.raw_ops.BatchNormWithGlobalNormalization(
            t=inputs[0], m=inputs[1], v=inputs[2], beta=inputs[3], gamma=inputs[4],
            variance_epsilon=0.01, scale_after_normalization=scale)
        cpp = symbolic_gradient(y.op, [tf.constant(dy)], [tf.as_dtype(dtype)] * 5)
        py = tf.gradients(y, inputs, grad_ys=tf.constant(dy))
        with tf.compat.v1.Session() as sess:
            got, want = sess.run([cpp, py])
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, i
        np.testing.assert_allclose(g, w, rtol=TOL[dtype],
                                   atol=TOL[dtype] * max(1, np.abs(w).max()), err_msg=f"input {i}")
    assert np.count_nonzero(want[4]) == (want[4].size if scale else 0)


# ------------------------------------------------------------------------------------------
# BlockLSTM, BlockLSTMV2 (float32; the kernels take half and float only).

def lstm_inputs(seq_len_max, seed):
    steps, batch, inp, hidden = 3, 2, 3, 2
    shapes = [(steps, batch, inp), (batch, hidden), (batch, hidden), (inp + hidden, 4 * hidden),
              (hidden,), (hidden,), (hidden,), (4 * hidden,)]
    return [np.int64(seq_len_max)] + [grid(s, np.float32, lo=-0.8, hi=0.8, seed=seed + k)
                                      for k, s in enumerate(shapes)]


LSTM_ARGS = ["seq_len_max", "x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"]


@pytest.mark.parametrize("seq_len_max", [3, 2])
@pytest.mark.parametrize("peephole", [False, True])
def test_block_lstm(peephole, seq_len_max):
    """Both differentiate the states cs and h only (the gates' incoming gradients, random
    here, are ignored by both)."""
    args = dict(zip(LSTM_ARGS, lstm_inputs(seq_len_max, seed=40)))
    compare(lambda: tf.raw_ops.BlockLSTM(**args, use_peephole=peephole, forget_bias=0.7,
                                         cell_clip=3.0)[0], 1e-6)


@pytest.mark.parametrize("seq_len_max", [3, 2])
@pytest.mark.parametrize("peephole", [False, True])
def test_block_lstm_v2_is_the_derivative(peephole, seq_len_max):
    """Python's BlockLSTMV2 gradient calls BlockLSTMGrad, whose gate layout is BlockLSTM's, so
    it is not the derivative; C++'s (BlockLSTMGradV2) is checked against central differences
    of L = sum(v_cs * cs) + sum(v_h * h)."""
    inputs = lstm_inputs(seq_len_max, seed=50)
    with tf.Graph().as_default():
        tf_ext.library()
        feeds = [tf.compat.v1.placeholder(tf.as_dtype(a.dtype), a.shape) for a in inputs]
        outs = tf.raw_ops.BlockLSTMV2(**dict(zip(LSTM_ARGS, feeds)), use_peephole=peephole)
        v_cs = grid(outs[1].shape, np.float32, seed=60)
        v_h = grid(outs[6].shape, np.float32, seed=61)
        loss = tf.reduce_sum(outs[1] * v_cs) + tf.reduce_sum(outs[6] * v_h)
        dys = [tf.zeros_like(o) for o in outs]
        dys[1], dys[6] = tf.constant(v_cs), tf.constant(v_h)
        cpp = symbolic_gradient(outs[0].op, dys, [f.dtype for f in feeds])
        with tf.compat.v1.Session() as sess:
            feed = dict(zip(feeds, inputs))
            got = sess.run(cpp, feed)
            assert got[0] == 0
            delta = 1e-2
            for k in range(1, len(inputs)):
                numeric = np.zeros_like(inputs[k])
                for idx in np.ndindex(inputs[k].shape):
                    plus, minus = inputs[k].copy(), inputs[k].copy()
                    plus[idx] += delta
                    minus[idx] -= delta
                    lp = sess.run(loss, {**feed, feeds[k]: plus})
                    lm = sess.run(loss, {**feed, feeds[k]: minus})
                    numeric[idx] = (np.float64(lp) - np.float64(lm)) / (2 * delta)
                np.testing.assert_allclose(got[k], numeric, rtol=2e-3, atol=2e-3,
                                           err_msg=f"input {k} ({LSTM_ARGS[k]})")


# ------------------------------------------------------------------------------------------
# Ragged ops: the flat values differentiated; row splits, row ids and indices get zeros
# (Python: None).

@pytest.mark.parametrize("dtype", FLOATS)
def test_ragged_fill_empty_rows(dtype):
    """(`compare` cannot: tf.gradients refuses the boolean empty_row_indicator as a y.)"""
    values = grid((4,), dtype, seed=70)
    for rowids, nrows in [([0, 0, 2, 4], 6), ([0, 1, 1, 2], 3)]:  # empty rows; none
        with tf.Graph().as_default():
            tf_ext.library()
            inputs = [tf.constant(np.array(rowids, np.int64)), tf.constant(values),
                      tf.constant(np.int64(nrows)), tf.constant(dtype(0.5))]
            out = tf.raw_ops.RaggedFillEmptyRows(value_rowids=inputs[0], values=inputs[1],
                                                 nrows=inputs[2], default_value=inputs[3])
            dy = tf.constant(grid((len(rowids) + nrows - len(set(rowids)),), dtype, seed=71))
            dys = [tf.zeros_like(o) for o in out]
            dys[1] = dy
            cpp = symbolic_gradient(out[0].op, dys, [t.dtype for t in inputs])
            py = tf.gradients(out.output_values, [inputs[1], inputs[3]], grad_ys=dy)
            with tf.compat.v1.Session() as sess:
                got, want = sess.run([cpp, py])
        assert got[0].tolist() == [0] * len(rowids) and got[2] == 0
        np.testing.assert_allclose(got[1], want[0], rtol=TOL[dtype], atol=TOL[dtype])
        np.testing.assert_allclose(got[3], want[1], rtol=TOL[dtype], atol=TOL[dtype])
        assert (want[1] != 0) == (nrows == 6)  # the default's gradient: only with empty rows


@pytest.mark.parametrize("splits_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", FLOATS)
def test_ragged_tensor_to_sparse(dtype, splits_dtype):
    splits = [np.array([0, 1, 3], splits_dtype), np.array([0, 2, 2, 5], splits_dtype)]
    compare(lambda: tf.raw_ops.RaggedTensorToSparse(
        rt_nested_splits=splits[1:], rt_dense_values=grid((5,), dtype, seed=71)).sparse_values,
        TOL[dtype])
    compare(lambda: tf.raw_ops.RaggedTensorToSparse(
        rt_nested_splits=splits, rt_dense_values=grid((5, 2), dtype, seed=72)).sparse_values,
        TOL[dtype])


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("splits_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", FLOATS)
def test_ragged_gather(dtype, splits_dtype, index_dtype):
    """Rows gathered twice (their gradients summed, Python's IndexedSlices densified), an
    empty row, a row never gathered, 2-D indices, two ragged dimensions."""
    outer = np.array([0, 1, 3], splits_dtype)
    inner = np.array([0, 2, 2, 5], splits_dtype)
    cases = [([inner], grid((5, 2), dtype, seed=73), np.array([2, 0, 2], index_dtype), 1),
             ([inner], grid((5,), dtype, seed=74), np.array([[2, 1], [0, 2]], index_dtype), 2),
             ([outer, inner], grid((5,), dtype, seed=75), np.array([1, 0, 1], index_dtype), 2)]
    for splits, values, indices, output_rank in cases:
        compare(lambda: tf.raw_ops.RaggedGather(
            params_nested_splits=splits, params_dense_values=values, indices=indices,
            OUTPUT_RAGGED_RANK=output_rank).output_dense_values, TOL[dtype])


@pytest.mark.parametrize("case", ["batched", "unbatched", "inferred", "dense", "rank2"])
def test_ragged_tensor_to_and_from_variant(case):
    """Encode then decode: the decoder's C++ gradient (a variant) fed to the encoder's, against
    Python's gradient of the pair; both the identity on the dense values."""
    inner = np.array([0, 2, 2, 5], np.int64)
    splits, shape, batched, in_rank, out_rank = {
        "batched": ([inner], (5, 2), True, 0, 1),
        "unbatched": ([inner], (5,), False, 1, 1),
        "inferred": ([inner], (5,), True, -1, 1),
        "dense": ([], (3, 2), False, 0, 0),
        "rank2": ([np.array([0, 1, 3], np.int64), inner], (5,), True, 1, 2)}[case]
    x = grid(shape, np.float64, seed=80)
    dy = grid(shape, np.float64, seed=81)
    with tf.Graph().as_default():
        tf_ext.library()
        values = tf.constant(x)
        encoded = tf.raw_ops.RaggedTensorToVariant(
            rt_nested_splits=splits, rt_dense_values=values, batched_input=batched)
        decoded = tf.raw_ops.RaggedTensorFromVariant(
            encoded_ragged=encoded, input_ragged_rank=in_rank, output_ragged_rank=out_rank,
            Tvalues=tf.float64, Tsplits=tf.int64)
        outs = list(decoded.output_nested_splits) + [decoded.output_dense_values]
        dys = [tf.zeros_like(o) for o in outs[:-1]] + [tf.constant(dy)]
        (d_encoded,) = symbolic_gradient(outs[-1].op, dys, [tf.variant])
        cpp = symbolic_gradient(encoded.op, [d_encoded], [t.dtype for t in encoded.op.inputs])
        (py,) = tf.gradients(decoded.output_dense_values, values, grad_ys=tf.constant(dy))
        with tf.compat.v1.Session() as sess:
            got, want, out = sess.run([cpp, py, decoded.output_dense_values])
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(got[-1], want)
    np.testing.assert_array_equal(got[-1], dy)
    assert all(not np.any(g) for g in got[:-1])


def test_ragged_tensor_from_variant_of_rank_2_fails_as_python():
    message = "RaggedTensorToVariant can currently only generate 0D or 1D output"
    with tf.Graph().as_default():
        tf_ext.library()
        encoded = tf.raw_ops.RaggedTensorToVariant(
            rt_nested_splits=[np.array([0, 1, 1, 3, 4], np.int64)],
            rt_dense_values=grid((4,), np.float32, seed=82), batched_input=True)
        encoded = tf.reshape(encoded, [2, 2])
        decoded = tf.raw_ops.RaggedTensorFromVariant(
            encoded_ragged=encoded, input_ragged_rank=0, output_ragged_rank=2,
            Tvalues=tf.float32, Tsplits=tf.int64)
        with pytest.raises(ValueError, match=message):
            tf.gradients(decoded.output_dense_values, encoded)
        dys = [tf.zeros_like(s) for s in decoded.output_nested_splits]
        dys.append(tf.ones_like(decoded.output_dense_values))
        cpp = symbolic_gradient(decoded.output_dense_values.op, dys, [tf.variant])
        with tf.compat.v1.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError, match=message):
                sess.run(cpp)


@pytest.mark.parametrize("dtype", FLOATS)
def test_ragged_tensor_to_tensor(dtype):
    """Padding and cropping (dropped values get zeros), defaults broadcast along value and
    leading-one dimensions, row ids with the first dimension's size, the natural shape."""
    splits = np.array([0, 2, 2, 5], np.int64)

    def to_tensor(shape, values, default, partitions=(splits,), types=("ROW_SPLITS",)):
        return lambda: tf.raw_ops.RaggedTensorToTensor(
            shape=np.array(shape, np.int64), values=values, default_value=default,
            row_partition_tensors=list(partitions), row_partition_types=list(types))

    values = grid((5,), dtype, seed=90)
    compare(to_tensor([4, 3], values, dtype(0.25)), TOL[dtype])
    compare(to_tensor([2, 2], values, dtype(0.25)), TOL[dtype])
    compare(to_tensor([3, 4, 2], grid((5, 2), dtype, seed=91), grid((2,), dtype, seed=92)),
            TOL[dtype])
    compare(to_tensor([3, 4, 3, 2], grid((5, 3, 2), dtype, seed=93),
                      grid((1, 2), dtype, seed=94)), TOL[dtype])
    compare(to_tensor([4, 3], values, dtype(0.25),
                      partitions=(np.int64(4), np.array([0, 0, 2, 2, 3], np.int64)),
                      types=("FIRST_DIM_SIZE", "VALUE_ROWIDS")), TOL[dtype])

    def natural():
        rt = tf.RaggedTensor.from_row_splits(tf.constant(values), splits)
        out = rt.to_tensor(default_value=dtype(-1))
        assert out.op.type == "RaggedTensorToTensor"
        return out

    compare(natural, TOL[dtype])


# ------------------------------------------------------------------------------------------
# CompositeTensorVariantFromComponents / ToComponents (array_grad.cc): a ragged tensor
# encoded as one variant and decoded; the decoder's C++ gradient (a variant) fed to the
# encoder's, against Python's gradient of the pair.

@pytest.mark.parametrize("dtype", FLOATS)
def test_composite_tensor_variant_round_trip(dtype):
    x = grid((5, 2), dtype, seed=95)
    dy = grid((5, 2), dtype, seed=96)
    with tf.Graph().as_default():
        tf_ext.library()
        values = tf.constant(x)
        rt = tf.RaggedTensor.from_row_splits(values, np.array([0, 2, 2, 5], np.int64))
        encoded = composite_tensor_ops.composite_tensor_to_variants(rt)
        spec = rt._type_spec  # pylint: disable=protected-access
        decoded = composite_tensor_ops.composite_tensor_from_variant(encoded, spec)
        out = decoded.flat_values
        decode_op, encode_op = out.op, encoded.op
        assert decode_op.type == "CompositeTensorVariantToComponents"
        assert encode_op.type == "CompositeTensorVariantFromComponents"
        dys = [tf.constant(dy) if o is out else tf.zeros_like(o) for o in decode_op.outputs]
        (d_encoded,) = symbolic_gradient(decode_op, dys, [tf.variant])
        cpp = symbolic_gradient(encode_op, [d_encoded], [t.dtype for t in encode_op.inputs])
        (py,) = tf.gradients(out, values, grad_ys=tf.constant(dy))
        i = [t.ref() for t in encode_op.inputs].index(values.ref())
        with tf.compat.v1.Session() as sess:
            got, want, y = sess.run([cpp[i], py, out])
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, dy)
