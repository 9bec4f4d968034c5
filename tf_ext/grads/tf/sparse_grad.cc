// Gradients of TensorFlow's sparse-tensor ops that no C++ registry has in TensorFlow 2.21
// (Python's python/ops/sparse_grad.py has them). Written from the maths; each is registered in
// both C++ registries when the op library loads, unless TensorFlow has one already
// (TF_EXT_REGISTER_TF_GRADIENT).
//
// A sparse tensor is (indices [N, R] int64, values [N], dense_shape [R]); only the values are
// differentiable: indices, shapes, starts, sizes, axes and thresholds get zeros (Python: None).
// Every gradient first checks 0 <= indices < dense_shape: an index out of range fails the
// gradient with InvalidArgument "<op>: an index is out of range ..." (a CheckNumerics node
// ordered before every gather and every recomputation of the forward), where the gradient's
// own gathers would fail with a message that names no op (or, on a GPU, read zeros).
//
// Complex values (SparseTensorDenseMatMul, SparseAdd, ...): TensorFlow's convention,
// d(x) = d(y) * conj(dy/dx), as Python.
//
// Tested in tests/tf_sparse_grads_test.cc (numeric Jacobians, bad indices, empty tensors) and
// against Python's gradients in tests/python/test_tf_sparse_grads.py.
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

bool IsComplexType(DataType t) { return t == DT_COMPLEX64 || t == DT_COMPLEX128; }

// A node that fails unless 0 <= indices < shape, indices [N, R] (or anything that broadcasts
// against shape [R]) of integer type `type`; `what` names the indices in the message, `p`
// prefixes the node names (two checks in one gradient). Returns its name, for control
// dependencies.
std::string CheckIndices(grad::GradBuilder& b, const std::string& op, const std::string& indices,
                         const std::string& shape, const FDH::AttrValueWrapper& type,
                         const std::string& what = "an index", const std::string& p = "check") {
  auto n = [&p](const char* s) { return absl::StrCat(p, "_", s); };
  b.Add({{n("zeros")}, "ZerosLike", {indices}, {{"T", type}}});
  b.Add({{n("ge")}, "GreaterEqual", {indices, n("zeros")}, {{"T", type}}});  // i >= 0
  b.Add({{n("lt")}, "Less", {indices, shape}, {{"T", type}}});               // i < shape
  b.Add({{n("ok")}, "LogicalAnd", {n("ge"), n("lt")}, {}});
  b.Add({{n("rank")}, "Rank", {n("ok")}, {{"T", DT_BOOL}}});
  b.Add(FDH::Const<int32>(n("zero"), 0));
  b.Add(FDH::Const<int32>(n("one"), 1));
  b.Add({{n("axes")}, "Range", {n("zero"), n("rank"), n("one")}, {{"Tidx", DT_INT32}}});
  b.Add({{n("all")}, "All", {n("ok"), n("axes")}, {{"Tidx", DT_INT32}}});
  b.Add(FDH::Const<float>(n("pass"), 0.0f));
  b.Add(FDH::Const<float>(n("fail"), std::numeric_limits<float>::quiet_NaN()));
  // NaN (fails the check below) unless every index is in range
  b.Add({{n("flag")}, "Select", {n("all"), n("pass"), n("fail")}, {{"T", DT_FLOAT}}});
  return b.Add({{n("index")}, "CheckNumerics", {n("flag")},
                {{"T", DT_FLOAT},
                 {"message", absl::StrCat(op, ": ", what, " is out of range of the dense "
                                              "shape (in the gradient)")}}});
}

// conj(x) for complex T, x itself otherwise (Conj has no real kernels).
std::string MaybeConj(grad::GradBuilder& b, DataType t, const std::string& name,
                      const std::string& x) {
  if (!IsComplexType(t)) return x;
  return b.Add({{name}, "Conj", {x}, {{"T", t}}});
}

// SparseReorder(indices, values, shape) = the entries in row-major order: output_values[j] =
// values[perm[j]], so d(values) = d(output_values)[perm^-1]. perm is the reorder of 0..N-1.
absl::Status SparseReorderGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseReorder", attrs);
  const std::string check = CheckIndices(b, "SparseReorder", "input_indices", "input_shape",
                                         DT_INT64);
  b.Add(FDH::Const<int64_t>("zero64", 0));
  b.Add(FDH::Const<int64_t>("one64", 1));
  b.Add(FDH::Const<int32>("axis0", 0));
  b.Add({{"n"}, "Size", {"input_values"}, {{"T", Placeholder("T")}, {"out_type", DT_INT64}}});
  b.Add({{"ids"}, "Range", {"zero64", "n", "one64"}, {{"Tidx", DT_INT64}}});
  b.Add({{"ordered_indices", "perm"}, "SparseReorder", {"input_indices", "ids", "input_shape"},
         {{"T", DT_INT64}}, {check}});
  b.Add({{"inverse"}, "InvertPermutation", {"perm"}, {{"T", DT_INT64}}});
  // d(values) = d(output_values)[perm^-1]
  b.Return("input_values",
           b.Add({{"dvalues"}, "GatherV2", {GradName("output_values"), "inverse", "axis0"},
                  {{"Tparams", Placeholder("T")}, {"Tindices", DT_INT64}, {"Taxis", DT_INT32}}}));
  b.NotDifferentiable("input_indices");
  b.NotDifferentiable("input_shape");
  return b.Build(g);
}

// SparseAdd(a, b, thresh) = a + b (entries with |sum| < thresh dropped): each value of the
// sum is routed back to the a and b values at its index (SparseAddGrad, which reads the sum's
// indices: given by front ends that have the forward, else recomputed).
absl::Status SparseAddGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseAdd", attrs);
  const std::string check_a = CheckIndices(b, "SparseAdd", "a_indices", "a_shape", DT_INT64,
                                           "an index of a");
  const std::string check_b = CheckIndices(b, "SparseAdd", "b_indices", "b_shape", DT_INT64,
                                           "an index of b", "check_b");
  std::string sum_indices = "sum_indices";
  if (!b.with_outputs()) {
    b.Add({{"fwd_indices", "fwd_values", "fwd_shape"}, "SparseAdd",
           {"a_indices", "a_values", "a_shape", "b_indices", "b_values", "b_shape", "thresh"},
           b.PassAttrs({"T", "Treal"}), {check_a, check_b}});
    sum_indices = "fwd_indices";
  }
  // d(a_values), d(b_values) = d(sum_values) at the sum entries of their indices
  b.Add({{"da", "db"}, "SparseAddGrad",
         {GradName("sum_values"), "a_indices", "b_indices", sum_indices}, b.PassAttrs({"T"}),
         {check_a, check_b}});
  b.Return("a_values", "da");
  b.Return("b_values", "db");
  for (const char* in : {"a_indices", "a_shape", "b_indices", "b_shape", "thresh"}) {
    b.NotDifferentiable(in);
  }
  return b.Build(g);
}

// SparseTensorDenseAdd(a, b) = dense a + b: d(a_values) = d(output) at a's indices,
// d(b) = d(output).
absl::Status SparseTensorDenseAddGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseTensorDenseAdd", attrs);
  const FDH::AttrValueWrapper ti = Placeholder("Tindices");
  const std::string check = CheckIndices(b, "SparseTensorDenseAdd", "a_indices", "a_shape", ti);
  // d(a_values)[n] = d(output)[a_indices[n]]
  b.Return("a_values", b.Add({{"da"}, "GatherNd", {GradName("output"), "a_indices"},
                              {{"Tparams", Placeholder("T")}, {"Tindices", ti}}, {check}}));
  // d(b) = d(output)
  b.Return("b", b.Add({{"db"}, "Identity", {GradName("output")}, b.PassAttrs({"T"}), {check}}));
  b.NotDifferentiable("a_indices");
  b.NotDifferentiable("a_shape");
  return b.Build(g);
}

// SparseReduceSum(indices, values, shape, axes) = dense sum over axes: d(values)[n] =
// d(output) (with the reduced axes kept as 1) at indices[n] divided by shape / kept_shape
// (the reduced coordinates become 0, the others stay).
absl::Status SparseReduceSumGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseReduceSum", attrs);
  const std::string check = CheckIndices(b, "SparseReduceSum", "input_indices", "input_shape",
                                         DT_INT64);
  const NodeAttrs i64 = {{"T", DT_INT64}};
  b.Add(FDH::Const<int32>("minus_one", -1));
  b.Add(FDH::Const<int64_t>("one64", 1));
  b.Add({{"rank"}, "Size", {"input_shape"}, {{"T", DT_INT64}, {"out_type", DT_INT64}}});
  b.Add({{"axes64"}, "Cast", {"reduction_axes"}, {{"SrcT", DT_INT32}, {"DstT", DT_INT64}}});
  b.Add(FDH::Const<int32>("flat", std::vector<int32>{-1}));
  b.Add({{"axes_flat"}, "Reshape", {"axes64", "flat"}, {{"T", DT_INT64}, {"Tshape", DT_INT32}}});
  b.Add({{"axes_mod"}, "FloorMod", {"axes_flat", "rank"}, i64});  // axes in [0, rank)
  b.Add({{"axes_col"}, "ExpandDims", {"axes_mod", "minus_one"},
         {{"T", DT_INT64}, {"Tdim", DT_INT32}}});
  b.Add({{"ones"}, "OnesLike", {"axes_mod"}, i64});
  // shape with the reduced axes set to 1
  b.Add({{"kept"}, "TensorScatterUpdate", {"input_shape", "axes_col", "ones"},
         {{"T", DT_INT64}, {"Tindices", DT_INT64}}});
  b.Add({{"grad_kept"}, "Reshape", {GradName("output"), "kept"},
         {{"T", Placeholder("T")}, {"Tshape", DT_INT64}}});
  // scale = shape / kept: the axis' size on reduced axes, 1 elsewhere (at least 1, so that
  // empty shapes divide nothing by zero; no index exists there)
  b.Add({{"kept_pos"}, "Maximum", {"kept", "one64"}, i64});
  b.Add({{"ratio"}, "FloorDiv", {"input_shape", "kept_pos"}, i64});
  b.Add({{"scale"}, "Maximum", {"ratio", "one64"}, i64});
  b.Add({{"scaled"}, "FloorDiv", {"input_indices", "scale"}, i64});
  // d(values)[n] = d(output)[indices[n] with reduced coordinates 0]
  b.Return("input_values", b.Add({{"dvalues"}, "GatherNd", {"grad_kept", "scaled"},
                                  {{"Tparams", Placeholder("T")}, {"Tindices", DT_INT64}},
                                  {check}}));
  b.NotDifferentiable("input_indices");
  b.NotDifferentiable("input_shape");
  b.NotDifferentiable("reduction_axes");
  return b.Build(g);
}

// SparseSlice(indices, values, shape, start, size) = the entries inside the box: each output
// value's gradient goes back to the input entry it came from (SparseSliceGrad, which reads
// the output indices: given by front ends that have the forward, else recomputed).
absl::Status SparseSliceGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseSlice", attrs);
  const std::string check = CheckIndices(b, "SparseSlice", "indices", "shape", DT_INT64);
  std::string out_indices = "output_indices";
  if (!b.with_outputs()) {
    b.Add({{"fwd_indices", "fwd_values", "fwd_shape"}, "SparseSlice",
           {"indices", "values", "shape", "start", "size"}, b.PassAttrs({"T"}), {check}});
    out_indices = "fwd_indices";
  }
  // d(values) = d(output_values) at the entries kept, zeros elsewhere
  b.Return("values", b.Add({{"dvalues"}, "SparseSliceGrad",
                            {GradName("output_values"), "indices", "start", out_indices},
                            b.PassAttrs({"T"}), {check}}));
  for (const char* in : {"indices", "shape", "start", "size"}) b.NotDifferentiable(in);
  return b.Build(g);
}

// SparseTensorDenseMatMul(A, B) = op(A) op(B), A sparse [rows, cols] with entries
// A[r_n, c_n] = a_values[n], op = adjoint where asked. With G = d(product):
//   d(B) = op'(op(A)^H G), i.e. SparseTensorDenseMatMul(A, G, adjoint_a = !adjoint_a), then
//          adjointed when adjoint_b;
//   d(a_values)[n] = the (r_n, c_n) entry of d(A) =
//       no adjoint:      sum_j G[r, j] conj(B[c, j])
//       adjoint_a:       sum_j conj(G[c, j]) B[r, j]
//       adjoint_b:       sum_j G[r, j] B[j, c]
//       both:            sum_j conj(G[c, j]) conj(B[j, r]).
absl::Status SparseTensorDenseMatMulGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseTensorDenseMatMul", attrs);
  const bool adj_a = b.GetAttr<bool>("adjoint_a"), adj_b = b.GetAttr<bool>("adjoint_b");
  const DataType t = b.GetAttr<DataType>("T");
  const FDH::AttrValueWrapper ti = Placeholder("Tindices");
  const NodeAttrs tt = b.PassAttrs({"T"});
  const std::string d = GradName("product");
  b.Add({{"indices64"}, "Cast", {"a_indices"}, {{"SrcT", ti}, {"DstT", DT_INT64}}});
  const std::string check =
      CheckIndices(b, "SparseTensorDenseMatMul", "indices64", "a_shape", DT_INT64);
  // d(B)
  b.Add({{"db_raw"}, "SparseTensorDenseMatMul", {"a_indices", "a_values", "a_shape", d},
         {{"T", Placeholder("T")}, {"Tindices", ti}, {"adjoint_a", !adj_a},
          {"adjoint_b", false}},
         {check}});
  b.Add(FDH::Const<int32>("swap", std::vector<int32>{1, 0}));
  if (adj_b) {
    b.Return("b", b.Add({{"db"}, IsComplexType(t) ? "ConjugateTranspose" : "Transpose",
                         {"db_raw", "swap"}, {{"T", t}, {"Tperm", DT_INT32}}}));
  } else {
    b.Return("b", b.Add({{"db"}, "Identity", {"db_raw"}, tt}));
  }
  // d(a_values)
  b.Add(FDH::Const<int32>("zero", 0));
  b.Add(FDH::Const<int32>("one", 1));
  const NodeAttrs column = {{"Tparams", ti}, {"Tindices", DT_INT32}, {"Taxis", DT_INT32}};
  b.Add({{"rows"}, "GatherV2", {"a_indices", "zero", "one"}, column});  // r_n
  b.Add({{"cols"}, "GatherV2", {"a_indices", "one", "one"}, column});   // c_n
  const NodeAttrs gather = {{"Tparams", Placeholder("T")}, {"Tindices", ti}, {"Taxis", DT_INT32}};
  std::string dense = "b";
  if (adj_b) dense = b.Add({{"b_t"}, "Transpose", {"b", "swap"}, {{"T", t}, {"Tperm", DT_INT32}}});
  b.Add({{"parts_g"}, "GatherV2", {d, adj_a ? "cols" : "rows", "zero"}, gather, {check}});
  b.Add({{"parts_b"}, "GatherV2", {dense, adj_a ? "rows" : "cols", "zero"}, gather, {check}});
  const std::string pg = adj_a ? MaybeConj(b, t, "parts_g_conj", "parts_g") : "parts_g";
  const std::string pb = adj_a == adj_b ? MaybeConj(b, t, "parts_b_conj", "parts_b") : "parts_b";
  b.Add({{"products"}, "Mul", {pg, pb}, tt});
  // d(a_values)[n] = sum_j of the products above
  b.Return("a_values", b.Add({{"da"}, "Sum", {"products", "one"},
                              {{"T", Placeholder("T")}, {"Tidx", DT_INT32},
                               {"keep_dims", false}}}));
  b.NotDifferentiable("a_indices");
  b.NotDifferentiable("a_shape");
  return b.Build(g);
}

// SparseDenseCwiseMul/Div(sp, dense) = sp.values * (or /) dense[broadcast index], dense
// broadcast to sp's shape (its trailing axes; a scalar too, which Python's gradient cannot
// take). With y_n = dense at entry n's index:
//   Mul: d(sp_values) = d * y_n,   d(dense) = sum over the entries at each index of d * x_n
//   Div: d(sp_values) = d / y_n,   d(dense) = sum of d * (-x_n / y_n^2).
// (Their kernels are real only.)
absl::Status SparseDenseCwiseGrad(const std::string& op, const AttrSlice& attrs,
                                  FunctionDef* g) {
  const bool is_mul = op == "SparseDenseCwiseMul";
  grad::GradBuilder b(op, attrs);
  const FDH::AttrValueWrapper t = Placeholder("T");
  const NodeAttrs tt = b.PassAttrs({"T"}), i64 = {{"T", DT_INT64}};
  const std::string check = CheckIndices(b, op, "sp_indices", "sp_shape", DT_INT64);
  b.Add(FDH::Const<int32>("zero", 0));
  b.Add(FDH::Const<int32>("one", 1));
  b.Add(FDH::Const<int64_t>("one64", 1));
  b.Add(FDH::Const<int64_t>("one64_v", std::vector<int64_t>{1}));
  b.Add(FDH::Const<int32>("zero_v", std::vector<int32>{0}));
  b.Add(FDH::Const<int32>("all", std::vector<int32>{-1, -1}));
  b.Add({{"y_shape"}, "Shape", {"dense"}, {{"T", t}, {"out_type", DT_INT64}}});
  b.Add({{"x_rank"}, "Size", {"sp_shape"}, {{"T", DT_INT64}, {"out_type", DT_INT32}}});
  b.Add({{"y_rank"}, "Size", {"y_shape"}, {{"T", DT_INT64}, {"out_type", DT_INT32}}});
  b.Add({{"added"}, "Sub", {"x_rank", "y_rank"}, {{"T", DT_INT32}}});  // leading axes of sp
  b.Add({{"added_v"}, "ExpandDims", {"added", "zero"}, {{"T", DT_INT32}, {"Tdim", DT_INT32}}});
  b.Add({{"added_ones"}, "Fill", {"added_v", "one64"}, {{"T", DT_INT64},
                                                       {"index_type", DT_INT32}}});
  b.Add({{"y_shape_aug"}, "ConcatV2", {"added_ones", "y_shape", "zero"},
         {{"N", 2}, {"T", DT_INT64}, {"Tidx", DT_INT32}}});
  // sp index -> dense index: divided by the axis' size where dense has 1 (broadcast), by 1
  // elsewhere (at least 1: empty shapes divide nothing by zero)
  b.Add({{"y_pos"}, "Maximum", {"y_shape_aug", "one64"}, i64});
  b.Add({{"ratio"}, "FloorDiv", {"sp_shape", "y_pos"}, i64});
  b.Add({{"scale"}, "Maximum", {"ratio", "one64"}, i64});
  b.Add({{"scaled_all"}, "FloorDiv", {"sp_indices", "scale"}, i64});
  // the dense axes only, behind a leading 0: dense is read as [1, dense...] (a scalar too)
  b.Add({{"begin"}, "ConcatV2", {"zero_v", "added_v", "zero"},
         {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
  b.Add({{"scaled"}, "Slice", {"scaled_all", "begin", "all"},
         {{"T", DT_INT64}, {"Index", DT_INT32}}});
  b.Add(FDH::Const<int32>("all_first", std::vector<int32>{-1, 1}));
  b.Add(FDH::Const<int32>("origin", std::vector<int32>{0, 0}));
  b.Add({{"first"}, "Slice", {"scaled_all", "origin", "all_first"},
         {{"T", DT_INT64}, {"Index", DT_INT32}}});
  b.Add({{"lead"}, "ZerosLike", {"first"}, i64});  // [N, 1] zeros
  b.Add({{"indices"}, "ConcatV2", {"lead", "scaled", "one"},
         {{"N", 2}, {"T", DT_INT64}, {"Tidx", DT_INT32}}});
  b.Add({{"y_shape1"}, "ConcatV2", {"one64_v", "y_shape", "zero"},
         {{"N", 2}, {"T", DT_INT64}, {"Tidx", DT_INT32}}});
  b.Add({{"dense1"}, "Reshape", {"dense", "y_shape1"}, {{"T", t}, {"Tshape", DT_INT64}}});
  b.Add({{"y_n"}, "GatherNd", {"dense1", "indices"}, {{"Tparams", t}, {"Tindices", DT_INT64}},
         {check}});
  const std::string d = GradName("output");
  std::string dy_n;
  if (is_mul) {
    // d(sp_values) = d * y_n
    b.Return("sp_values", b.Add({{"dx"}, "Mul", {d, "y_n"}, tt}));
    dy_n = b.Add({{"dy_n"}, "Mul", {d, "sp_values"}, tt});  // per entry: d * x_n
  } else {
    // d(sp_values) = d / y_n
    b.Return("sp_values", b.Add({{"dx"}, "RealDiv", {d, "y_n"}, tt}));
    b.Add({{"y_sq"}, "Square", {"y_n"}, tt});
    b.Add({{"x_over"}, "RealDiv", {"sp_values", "y_sq"}, tt});
    b.Add({{"neg"}, "Neg", {"x_over"}, tt});
    dy_n = b.Add({{"dy_n"}, "Mul", {d, "neg"}, tt});  // per entry: d * (-x_n / y_n^2)
  }
  // d(dense) = the per-entry gradients summed at each dense index (indices repeat where
  // dense was broadcast)
  b.Add({{"ddense1"}, "ScatterNd", {"indices", dy_n, "y_shape1"},
         {{"T", t}, {"Tindices", DT_INT64}}, {check}});
  b.Return("dense", b.Add({{"ddense"}, "Reshape", {"ddense1", "y_shape"},
                           {{"T", t}, {"Tshape", DT_INT64}}}));
  b.NotDifferentiable("sp_indices");
  b.NotDifferentiable("sp_shape");
  return b.Build(g);
}

// SparseSoftmax(sp) = softmax of each innermost row's entries: y = output (given by front ends
// that have the forward, else recomputed), d(values) = (d - sum_row(d * y)) * y.
absl::Status SparseSoftmaxGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseSoftmax", attrs);
  const NodeAttrs tt = b.PassAttrs({"T"});
  const std::string check = CheckIndices(b, "SparseSoftmax", "sp_indices", "sp_shape", DT_INT64);
  std::string y = "output";
  if (!b.with_outputs()) {
    y = b.Add({{"fwd"}, "SparseSoftmax", {"sp_indices", "sp_values", "sp_shape"}, tt, {check}});
  }
  const std::string d = GradName("output");
  b.Add(FDH::Const<int32>("last", std::vector<int32>{-1}));
  b.Add({{"dy"}, "Mul", {d, y}, tt});
  // sum_row(d * y), dense [..., rows, 1]
  b.Add({{"row_sums"}, "SparseReduceSum", {"sp_indices", "dy", "sp_shape", "last"},
         {{"T", Placeholder("T")}, {"keep_dims", true}}, {check}});
  b.Add({{"neg_sums"}, "Neg", {"row_sums"}, tt});
  // d - sum_row(d * y), at the entries
  b.Add({{"centered"}, "SparseDenseCwiseAdd", {"sp_indices", d, "sp_shape", "neg_sums"}, tt});
  // d(values) = (d - sum_row(d * y)) * y
  b.Return("sp_values", b.Add({{"dvalues"}, "Mul", {"centered", y}, tt}));
  b.NotDifferentiable("sp_indices");
  b.NotDifferentiable("sp_shape");
  return b.Build(g);
}

// SparseFillEmptyRows(indices, values, dense_shape, default) = the entries plus one
// (row, 0) = default per empty row: reverse_index_map[n] = the output entry of input entry n
// (given by front ends that have the forward, else recomputed), so
// d(values)[n] = d(output_values)[reverse_index_map[n]], d(default) = the sum of d over the
// added entries (SparseFillEmptyRowsGrad).
absl::Status SparseFillEmptyRowsGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseFillEmptyRows", attrs);
  const std::string check =
      CheckIndices(b, "SparseFillEmptyRows", "indices", "dense_shape", DT_INT64);
  std::string map = "reverse_index_map";
  if (!b.with_outputs()) {
    b.Add({{"fwd_indices", "fwd_values", "fwd_empty", "fwd_map"}, "SparseFillEmptyRows",
           {"indices", "values", "dense_shape", "default_value"}, b.PassAttrs({"T"}), {check}});
    map = "fwd_map";
  }
  b.Add({{"dvalues", "ddefault"}, "SparseFillEmptyRowsGrad",
         {map, GradName("output_values")}, b.PassAttrs({"T"}), {check}});
  b.Return("values", "dvalues");
  b.Return("default_value", "ddefault");
  b.NotDifferentiable("indices");
  b.NotDifferentiable("dense_shape");
  return b.Build(g);
}

// SparseToDense(indices, output_shape, values, default) = dense with values at indices (values
// a scalar: the same at every index), default elsewhere: d(values) = d(dense) at the indices
// (summed when values is a scalar), d(default) = sum(d(dense)) - sum(d(values)), as Python.
// indices may be 0-D, 1-D ([N] indices of a vector) or [N, R]: read as [N, R].
absl::Status SparseToDenseGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseToDense", attrs);
  const FDH::AttrValueWrapper ti = Placeholder("Tindices");
  const NodeAttrs tt = b.PassAttrs({"T"});
  const FDH::AttrValueWrapper t = Placeholder("T");
  b.Add(FDH::Const<int32>("zero", 0));
  b.Add(FDH::Const<int32>("minus_one", std::vector<int32>{-1}));
  b.Add({{"rank"}, "Size", {"output_shape"}, {{"T", ti}, {"out_type", DT_INT32}}});
  b.Add({{"rank_v"}, "ExpandDims", {"rank", "zero"}, {{"T", DT_INT32}, {"Tdim", DT_INT32}}});
  b.Add({{"nr"}, "ConcatV2", {"minus_one", "rank_v", "zero"},
         {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
  b.Add({{"indices_2d"}, "Reshape", {"sparse_indices", "nr"},
         {{"T", ti}, {"Tshape", DT_INT32}}});  // [N, R]
  const std::string check = CheckIndices(b, "SparseToDense", "indices_2d", "output_shape", ti);
  const std::string d = GradName("dense");
  b.Add({{"gathered"}, "GatherNd", {d, "indices_2d"}, {{"Tparams", t}, {"Tindices", ti}},
         {check}});
  // reduced to values' shape ([N], or a scalar: summed)
  b.Add({{"values_shape"}, "Shape", {"sparse_values"}, {{"T", t}, {"out_type", DT_INT32}}});
  b.Add({{"gathered_shape"}, "Shape", {"gathered"}, {{"T", t}, {"out_type", DT_INT32}}});
  b.Add({{"values_axes", "gathered_axes"}, "BroadcastGradientArgs",
         {"values_shape", "gathered_shape"}, {{"T", DT_INT32}}});
  b.Add({{"summed"}, "Sum", {"gathered", "values_axes"},
         {{"T", t}, {"Tidx", DT_INT32}, {"keep_dims", false}}});
  // d(values) = d(dense)[indices]
  b.Return("sparse_values", b.Add({{"dvalues"}, "Reshape", {"summed", "values_shape"},
                                   {{"T", t}, {"Tshape", DT_INT32}}}));
  b.Add({{"all_d"}, "Rank", {d}, {{"T", t}}});
  b.Add(FDH::Const<int32>("one", 1));
  b.Add({{"d_axes"}, "Range", {"zero", "all_d", "one"}, {{"Tidx", DT_INT32}}});
  b.Add({{"d_total"}, "Sum", {d, "d_axes"}, {{"T", t}, {"Tidx", DT_INT32}, {"keep_dims", false}}});
  b.Add({{"g_rank"}, "Rank", {"gathered"}, {{"T", t}}});
  b.Add({{"g_axes"}, "Range", {"zero", "g_rank", "one"}, {{"Tidx", DT_INT32}}});
  b.Add({{"g_total"}, "Sum", {"gathered", "g_axes"},
         {{"T", t}, {"Tidx", DT_INT32}, {"keep_dims", false}}});
  // d(default) = sum(d(dense)) - sum(d(dense)[indices])
  b.Return("default_value", b.Add({{"ddefault"}, "Sub", {"d_total", "g_total"}, tt}));
  b.NotDifferentiable("sparse_indices");
  b.NotDifferentiable("output_shape");
  return b.Build(g);
}

// Python's gradients that raise (NotImplementedError): differentiating them fails, with
// Python's message, where a no-gradient op would silently give zeros.
bool RegisterUnimplementedIfMissing(const std::string& op) {
  if (LookupGradientKind(op) != GradientKind::kMissing) return true;
  return RegisterUnimplementedGradient(op, absl::StrCat("Gradient for ", op,
                                                        " is not implemented."));
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("SparseReorder", SparseReorderGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseAdd", SparseAddGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseTensorDenseAdd", SparseTensorDenseAddGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseReduceSum", SparseReduceSumGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseSlice", SparseSliceGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseTensorDenseMatMul", SparseTensorDenseMatMulGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseDenseCwiseMul", [](const AttrSlice& a, FunctionDef* g) {
  return SparseDenseCwiseGrad("SparseDenseCwiseMul", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("SparseDenseCwiseDiv", [](const AttrSlice& a, FunctionDef* g) {
  return SparseDenseCwiseGrad("SparseDenseCwiseDiv", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("SparseSoftmax", SparseSoftmaxGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseFillEmptyRows", SparseFillEmptyRowsGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseToDense", SparseToDenseGrad);
// Front ends that have the forward node pass the outputs these gradients read (no
// recomputation): the sum's / slice's indices, the softmax, the reverse index map.
static const bool sparse_reads_outputs [[maybe_unused]] =
    (DeclareReadsForwardOutputs("SparseAdd"), DeclareReadsForwardOutputs("SparseSlice"),
     DeclareReadsForwardOutputs("SparseSoftmax"),
     DeclareReadsForwardOutputs("SparseFillEmptyRows"), true);
// Not differentiable, as in Python.
TF_EXT_REGISTER_TF_GRADIENT("SparseAddGrad", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("SparseConcat", nullptr);
// Python's gradient raises NotImplementedError.
static const bool unimplemented_sparse [[maybe_unused]] =
    RegisterUnimplementedIfMissing("SparseDenseCwiseAdd") &&
    RegisterUnimplementedIfMissing("SparseSparseMaximum") &&
    RegisterUnimplementedIfMissing("SparseSparseMinimum");

}  // namespace tensorflow::tf_ext
