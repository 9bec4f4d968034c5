// Gradients of TensorFlow's block LSTM ops, which TensorFlow 2.21 has only in Python
// (python/ops/rnn_grad.py). Registered in both C++ registries when the op library loads,
// unless TensorFlow has them (TF_EXT_REGISTER_TF_GRADIENT).
//
// BlockLSTM[V2](seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b) runs an LSTM cell over
// the time steps of x and returns every step's gates and states (i, cs, f, o, ci, co, h). As
// Python, only the states cs and h are differentiated (the incoming gradients of i, f, o, ci,
// co are ignored); the dedicated backward op back-propagates through time from the forward
// outputs:
//   (d(x), d(cs_prev), d(h_prev), d(w), d(wci), d(wcf), d(wco), d(b))
//       = BlockLSTMGrad[V2](inputs, i, cs, f, o, ci, co, h, d(cs), d(h))
// and seq_len_max (int64) gets zeros (Python: None).
//
// Tested by tests/tf_misc_parity_grads_test.cc (numeric Jacobians) and
// tests/python/test_tf_misc_parity_grads.py (against Python's tf.gradients).
#include <string>

#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

// BlockLSTM lays its four gates out in w and b as [i, c, f, o], BlockLSTMV2 as [i, f, c, o]
// (lstm_ops.cc, ICFO / IFCO), and each backward op packs d(gates) into d(w), d(b) in its
// forward's layout. Python's gradient of BlockLSTMV2 calls BlockLSTMGrad, the ICFO op, so its
// d(x), d(h_prev), d(w) and d(b) are not the derivative (its gate blocks are swapped);
// C++ calls BlockLSTMGradV2, the derivative.
absl::Status BlockLSTMGrad(const std::string& op, const std::string& grad_op,
                           const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  b.DedicatedOp(grad_op,
                {"seq_len_max", "x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b", "i",
                 "cs", "f", "o", "ci", "co", "h", GradName("cs"), GradName("h")},
                {"T", "use_peephole"},
                {"x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"});
  b.NotDifferentiable("seq_len_max");
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("BlockLSTM", [](const AttrSlice& a, FunctionDef* g) {
  return BlockLSTMGrad("BlockLSTM", "BlockLSTMGrad", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("BlockLSTMV2", [](const AttrSlice& a, FunctionDef* g) {
  return BlockLSTMGrad("BlockLSTMV2", "BlockLSTMGradV2", a, g);
});
// Front ends that have the forward node pass its outputs (no recomputation).
static const bool block_lstm_reads_outputs [[maybe_unused]] =
    (DeclareReadsForwardOutputs("BlockLSTM"), DeclareReadsForwardOutputs("BlockLSTMV2"), true);

}  // namespace tensorflow::tf_ext
