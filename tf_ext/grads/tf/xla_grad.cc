// Gradients of TensorFlow's XLA ops (compiler/tf2xla) that TensorFlow 2.21 has only in Python,
// written from Python's rules: XlaEinsum (python/ops/special_math_ops.py), XlaSharding and
// XlaSpmdShardToFullShape (compiler/tf2xla/python/xla.py). Each is registered in both C++
// registries when the op library loads, unless TensorFlow has one already
// (TF_EXT_REGISTER_TF_GRADIENT).
//
// XlaEinsum and XlaSharding run on CPU through XLA's compile-on-demand kernels; they are
// checked against Python's gradients (tests/python/test_tf_xla_grads.py) and numeric Jacobians
// (tf_ext_gradcheck, tf_ext/tools/tf_core_gradcheck_spec.txt). XlaSpmdShardToFullShape's
// gradient is an XlaSpmdFullToShardShape node, which has no kernel in tensorflow-cpu 2.21
// (nor any other device's outside an XLA cluster): tf_ext_gradcheck cannot run it. It is
// checked structurally against Python's gradient graph of the same node (its op and attrs),
// and run inside an XLA cluster (jit_compile) for the shardings one CPU device can take, in
// tests/python/test_unrunnable_grads.py.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

// XlaEinsum(a, b; equation = "A,B->C"): product = einsum over the labels of A, B into C.
// The product is bilinear, so each input's gradient is the einsum of d(product) with the other
// input into the input's labels, as Python's rule: d(a) = einsum("C,B->A", d(product), b),
// d(b) = einsum("C,A->B", d(product), a). As in Python, nothing is conjugated for complex64
// (d(a) = d(product) b^T for "ij,jk->ik", not TensorFlow's d(product) b^H), and a label summed
// within one input alone gives an equation XLA refuses, as Python's does.
absl::Status XlaEinsumGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("XlaEinsum", attrs);
  const std::string equation = b.GetAttr<std::string>("equation");
  const std::vector<std::string> sides = absl::StrSplit(equation, "->");
  const std::vector<std::string> operands =
      sides.size() == 2 ? absl::StrSplit(sides[0], ',') : std::vector<std::string>{};
  if (operands.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("XlaEinsum: gradient needs an equation 'A,B->C' (two operands, one "
                     "output), got '", equation, "'"));
  }
  const std::string& left = operands[0];
  const std::string& right = operands[1];
  const std::string& out = sides[1];
  const std::string dy = GradName("product");
  // d(a) = einsum("C,B->A", d(product), b)
  b.Return("a", b.Add({{"da"}, "XlaEinsum", {dy, "b"},
                       {{"T", grad::Placeholder("T")},
                        {"equation", absl::StrCat(out, ",", right, "->", left)}}}));
  // d(b) = einsum("C,A->B", d(product), a)
  b.Return("b", b.Add({{"db"}, "XlaEinsum", {dy, "a"},
                       {{"T", grad::Placeholder("T")},
                        {"equation", absl::StrCat(out, ",", left, "->", right)}}}));
  return b.Build(g);
}

// XlaSharding(input; sharding, unspecified_dims): output = input, annotated with a sharding
// for XLA's SPMD partitioner. d(input) = d(output), annotated with the same sharding (the
// op's attrs, and the node attr _XlaSharding = sharding that Python's rule sets too, which the
// partitioner reads).
absl::Status XlaShardingGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("XlaSharding", attrs);
  const std::string sharding = b.GetAttr<std::string>("sharding");
  grad::NodeAttrs node_attrs = b.PassAttrs({"T", "sharding", "unspecified_dims"});
  node_attrs.push_back({"_XlaSharding", sharding});
  // d(input) = d(output)
  b.Return("input", b.Add({{"dx"}, "XlaSharding", {GradName("output")}, node_attrs}));
  return b.Build(g);
}

// XlaSpmdShardToFullShape(input; manual_sharding, full_shape, dim, unspecified_dims): output =
// the full-shaped tensor that the per-device shards `input` make up under manual_sharding (an
// annotation for XLA's SPMD partitioner; on one device, the identity). Its adjoint is the
// inverse annotation: d(input) = XlaSpmdFullToShardShape(d(output)) with the same
// manual_sharding, dim and unspecified_dims, as Python's rule.
absl::Status XlaSpmdShardToFullShapeGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("XlaSpmdShardToFullShape", attrs);
  // d(input) = full_to_shard(d(output))
  b.Return("input", b.Add({{"dinput"}, "XlaSpmdFullToShardShape", {GradName("output")},
                           b.PassAttrs({"T", "manual_sharding", "dim", "unspecified_dims"})}));
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("XlaEinsum", XlaEinsumGrad);
TF_EXT_REGISTER_TF_GRADIENT("XlaSharding", XlaShardingGrad);
TF_EXT_REGISTER_TF_GRADIENT("XlaSpmdShardToFullShape", XlaSpmdShardToFullShapeGrad);

}  // namespace tensorflow::tf_ext
