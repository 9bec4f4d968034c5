// Gradients of TensorFlow's CSR sparse-matrix ops (a CSRSparseMatrix in a DT_VARIANT tensor)
// that TensorFlow 2.21 has only in Python (python/ops/linalg/sparse/sparse_csr_matrix_grad.py):
// the conversions to and from dense and COO tensors, the transpose and the products with a
// dense and a sparse matrix, the sum of two and the softmax. Written from the maths; registered
// in both C++ registries when the op library loads, unless TensorFlow has one already
// (TF_EXT_REGISTER_TF_GRADIENT).
//
// The gradient of a CSR matrix is a CSR matrix of the same sparsity pattern (its entries in
// the same row-major order); index and shape inputs get zeros (Python: None).
//
// Tested against Python's gradients and central differences, through chains of these ops in a
// function (SymbolicGradient of the function: TensorFlow's graph-level builder over this
// registry), in tests/python/test_tf_sparse_grads.py.
//
// SparseMatrixAdd, SparseMatrixSoftmax (and its gradient op) and SparseMatrixMul have GPU
// kernels only: their gradients cannot run in tensorflow-cpu. Those of SparseMatrixAdd and
// SparseMatrixSoftmax are checked structurally against Python's gradient graph of the same
// node (the ops, their attrs and wiring), and SparseMatrixAdd's pruning (which has CPU kernels)
// numerically, in tests/python/test_unrunnable_grads.py. SparseMatrixMul's Python gradient
// only raises NotImplementedError; C++ registers the same refusal.
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

// DenseToCSRSparseMatrix(dense, indices) = the entries of dense at indices, as CSR:
// d(dense) = d(sparse_output) densified (zeros off the pattern).
absl::Status DenseToCsrGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("DenseToCSRSparseMatrix", attrs);
  b.Return("dense_input", b.Add({{"ddense"}, "CSRSparseMatrixToDense",
                                 {GradName("sparse_output")}, {{"type", Placeholder("T")}}}));
  b.NotDifferentiable("indices");
  return b.Build(g);
}

// CSRSparseMatrixToDense(csr) = dense: d(csr) = d(dense_output) at csr's entries, as a CSR
// matrix of csr's pattern.
absl::Status CsrToDenseGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("CSRSparseMatrixToDense", attrs);
  const FDH::AttrValueWrapper t = Placeholder("type");
  b.Add({{"coo_indices", "coo_values", "coo_shape"}, "CSRSparseMatrixToSparseTensor",
         {"sparse_input"}, {{"type", t}}});
  b.Add({{"at_entries"}, "GatherNd", {GradName("dense_output"), "coo_indices"},
         {{"Tparams", t}, {"Tindices", DT_INT64}}});
  // d(csr) = d(dense)[entries of csr]
  b.Return("sparse_input", b.Add({{"dcsr"}, "SparseTensorToCSRSparseMatrix",
                                  {"coo_indices", "at_entries", "coo_shape"}, {{"T", t}}}));
  return b.Build(g);
}

// SparseTensorToCSRSparseMatrix(indices, values, shape) = the same matrix as CSR:
// d(values) = the values of d(sparse_matrix) (the same entries, in the same row-major order).
absl::Status SparseTensorToCsrGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseTensorToCSRSparseMatrix", attrs);
  b.Add({{"g_indices", "g_values", "g_shape"}, "CSRSparseMatrixToSparseTensor",
         {GradName("sparse_matrix")}, {{"type", Placeholder("T")}}});
  b.Return("values", b.Add({{"dvalues"}, "Identity", {"g_values"}, b.PassAttrs({"T"})}));
  b.NotDifferentiable("indices");
  b.NotDifferentiable("dense_shape");
  return b.Build(g);
}

// CSRSparseMatrixToSparseTensor(csr) = (indices, values, shape): d(csr) = the CSR matrix of
// (indices, d(values), shape) (its outputs: given by front ends that have the forward, else
// recomputed).
absl::Status CsrToSparseTensorGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("CSRSparseMatrixToSparseTensor", attrs);
  b.Return("sparse_matrix",
           b.Add({{"dcsr"}, "SparseTensorToCSRSparseMatrix",
                  {"indices", GradName("values"), "dense_shape"}, {{"T", Placeholder("type")}}}));
  return b.Build(g);
}

// SparseMatrixTranspose(csr; conjugate) = csr^T (or csr^H): d(csr) = d(output)^T (or ^H).
absl::Status CsrTransposeGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseMatrixTranspose", attrs);
  b.Return("input", b.Add({{"dinput"}, "SparseMatrixTranspose", {GradName("output")},
                           b.PassAttrs({"conjugate", "type"})}));
  return b.Build(g);
}

// SparseMatrixMatMul(a CSR, b dense) = op_a(A) op_b(B), op_x the identity, transpose or
// adjoint (transpose_x / adjoint_x), the product then transposed and/or conjugated
// (transpose_output, conjugate_output); batched when rank 3. With X = op_a(A), Y = op_b(B) and
// Gc = d(product) with the output's transpose / conjugate undone:
//   d(X) = Gc Y^H: d(A) = op_a^-1(d(X)) at A's entries (a CSR of A's pattern; the product is
//          formed densely, then gathered at the entries, where Python multiplies row by row);
//   d(Y) = X^H Gc: X^H = A^H, conj(A) or A, a SparseMatrixMatMul; d(B) = op_b^-1(d(Y)).
absl::Status CsrMatMulGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseMatrixMatMul", attrs);
  const DataType t = b.GetAttr<DataType>("T");
  const bool cplx = t == DT_COMPLEX64 || t == DT_COMPLEX128;
  const bool t_a = b.GetAttr<bool>("transpose_a"), adj_a = b.GetAttr<bool>("adjoint_a");
  const bool t_b = b.GetAttr<bool>("transpose_b"), adj_b = b.GetAttr<bool>("adjoint_b");
  const bool t_out = b.GetAttr<bool>("transpose_output");
  const bool conj_out = b.GetAttr<bool>("conjugate_output");
  const grad::NodeAttrs tt = {{"T", t}};
  // the perm swapping the last two axes of a rank-2 or rank-3 matrix
  b.Add(FDH::Const<int32>("zero", 0));
  b.Add(FDH::Const<int32>("one", 1));
  b.Add(FDH::Const<int32>("two", 2));
  b.Add({{"rank"}, "Rank", {"b"}, tt});
  b.Add({{"batch_rank"}, "Sub", {"rank", "two"}, {{"T", DT_INT32}}});
  b.Add({{"batch_axes"}, "Range", {"zero", "batch_rank", "one"}, {{"Tidx", DT_INT32}}});
  b.Add({{"last"}, "Sub", {"rank", "one"}, {{"T", DT_INT32}}});
  b.Add({{"last_v"}, "ExpandDims", {"last", "zero"}, {{"T", DT_INT32}, {"Tdim", DT_INT32}}});
  b.Add({{"batch_rank_v"}, "ExpandDims", {"batch_rank", "zero"},
         {{"T", DT_INT32}, {"Tdim", DT_INT32}}});
  b.Add({{"swap"}, "ConcatV2", {"batch_axes", "last_v", "batch_rank_v", "zero"},
         {{"N", 3}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
  int counter = 0;
  // conj(x) (complex only), x^T, x^H
  auto conj = [&](const std::string& x) {
    return cplx ? b.Add({{absl::StrCat("conj_", counter++)}, "Conj", {x}, tt}) : x;
  };
  auto transpose = [&](const std::string& x, bool conjugate) {
    return b.Add({{absl::StrCat("tr_", counter++)},
                  conjugate && cplx ? "ConjugateTranspose" : "Transpose", {x, "swap"},
                  {{"T", t}, {"Tperm", DT_INT32}}});
  };
  // op_x^-1 of a gradient: d(op(x)) -> d(x)
  auto undo = [&](const std::string& d, bool tr, bool adj) {
    return adj ? transpose(d, true) : tr ? transpose(d, false) : d;
  };
  // Gc = d(product) with conjugate_output / transpose_output undone
  std::string gc = GradName("output");
  if (conj_out) gc = conj(gc);
  if (t_out) gc = transpose(gc, false);
  // d(A) = op_a^-1(Gc Y^H) at A's entries
  const std::string y = adj_b ? transpose("b", true) : t_b ? transpose("b", false) : "b";
  b.Add({{"dx"}, "BatchMatMulV2", {gc, y}, {{"T", t}, {"adj_x", false}, {"adj_y", true}}});
  const std::string da_dense = undo("dx", t_a, adj_a);
  b.Add({{"a_indices", "a_values", "a_shape"}, "CSRSparseMatrixToSparseTensor", {"a"},
         {{"type", t}}});
  b.Add({{"da_values"}, "GatherNd", {da_dense, "a_indices"}, {{"Tparams", t},
                                                               {"Tindices", DT_INT64}}});
  b.Return("a", b.Add({{"da"}, "SparseTensorToCSRSparseMatrix",
                       {"a_indices", "da_values", "a_shape"}, {{"T", t}}}));
  // d(B) = op_b^-1(X^H Gc)
  std::string dy;
  if (adj_a) {  // X^H = A
    dy = b.Add({{"dy"}, "SparseMatrixMatMul", {"a", gc}, {{"T", t}}});
  } else if (t_a) {  // X^H = conj(A): conj(A conj(Gc))
    dy = b.Add({{"dy"}, "SparseMatrixMatMul", {"a", conj(gc)},
                {{"T", t}, {"conjugate_output", cplx}}});
  } else {  // X^H = A^H
    dy = b.Add({{"dy"}, "SparseMatrixMatMul", {"a", gc}, {{"T", t}, {"adjoint_a", true}}});
  }
  b.Return("b", undo(dy, t_b, adj_b));
  return b.Build(g);
}

// The entries of CSR matrix `grad` at the entries of CSR matrix `pattern` (zeros where grad
// has none), as a CSR matrix of pattern's pattern: Python's _PruneCSRMatrix, which drops those
// entries instead, so that its result can have fewer entries than the operand. Both are
// matched by their row-major linear index (a binary search of pattern's in grad's, which are
// sorted). `p` prefixes the node names. Returns the pruned matrix.
std::string PruneToPattern(grad::GradBuilder& b, DataType t, const std::string& grad,
                           const std::string& pattern, const std::string& p) {
  auto n = [&p](const char* s) { return absl::StrCat(p, "_", s); };
  const grad::NodeAttrs i64 = {{"T", DT_INT64}};
  b.Add({{n("gi"), n("gv"), n("gs")}, "CSRSparseMatrixToSparseTensor", {grad}, {{"type", t}}});
  b.Add({{n("pi"), n("pv"), n("ps")}, "CSRSparseMatrixToSparseTensor", {pattern},
         {{"type", t}}});
  b.Add(FDH::Const<int32>(n("zero"), 0));
  b.Add(FDH::Const<int32>(n("one"), 1));
  // row-major strides of the dense shape
  b.Add({{n("strides")}, "Cumprod", {n("ps"), n("zero")},
         {{"T", DT_INT64}, {"Tidx", DT_INT32}, {"exclusive", true}, {"reverse", true}}});
  const grad::NodeAttrs sum = {{"T", DT_INT64}, {"Tidx", DT_INT32}, {"keep_dims", false}};
  b.Add({{n("g_scaled")}, "Mul", {n("gi"), n("strides")}, i64});
  b.Add({{n("g_lin")}, "Sum", {n("g_scaled"), n("one")}, sum});
  b.Add({{n("p_scaled")}, "Mul", {n("pi"), n("strides")}, i64});
  b.Add({{n("p_lin")}, "Sum", {n("p_scaled"), n("one")}, sum});
  // a sentinel past every index (value 0), so that every search lands on an entry
  b.Add(FDH::Const<int64_t>(n("past"), std::vector<int64_t>{std::numeric_limits<int64_t>::max()}));
  b.Add({{n("g_lin_s")}, "ConcatV2", {n("g_lin"), n("past"), n("zero")},
         {{"N", 2}, {"T", DT_INT64}, {"Tidx", DT_INT32}}});
  b.Add(FDH::Const<float>(n("zero_f"), 0.0f));
  b.Add({{n("zero_t")}, "Cast", {n("zero_f")}, {{"SrcT", DT_FLOAT}, {"DstT", t}}});
  b.Add({{n("one_v")}, "ExpandDims", {n("one"), n("zero")}, {{"T", DT_INT32}, {"Tdim", DT_INT32}}});
  b.Add({{n("zero_v")}, "Fill", {n("one_v"), n("zero_t")}, {{"T", t}, {"index_type", DT_INT32}}});
  b.Add({{n("gv_s")}, "ConcatV2", {n("gv"), n("zero_v"), n("zero")},
         {{"N", 2}, {"T", t}, {"Tidx", DT_INT32}}});
  b.Add({{n("sorted")}, "ExpandDims", {n("g_lin_s"), n("zero")},
         {{"T", DT_INT64}, {"Tdim", DT_INT32}}});
  b.Add({{n("wanted")}, "ExpandDims", {n("p_lin"), n("zero")},
         {{"T", DT_INT64}, {"Tdim", DT_INT32}}});
  b.Add({{n("pos_2d")}, "LowerBound", {n("sorted"), n("wanted")},
         {{"T", DT_INT64}, {"out_type", DT_INT64}}});
  b.Add({{n("pos")}, "Squeeze", {n("pos_2d")}, {{"T", DT_INT64}, {"squeeze_dims",
                                                                  std::vector<int32>{0}}}});
  const grad::NodeAttrs gather = {{"Tparams", DT_INT64}, {"Tindices", DT_INT64},
                                  {"Taxis", DT_INT32}};
  b.Add({{n("at")}, "GatherV2", {n("g_lin_s"), n("pos"), n("zero")}, gather});
  b.Add({{n("found")}, "Equal", {n("at"), n("p_lin")}, i64});  // grad has the entry
  b.Add({{n("vals")}, "GatherV2", {n("gv_s"), n("pos"), n("zero")},
         {{"Tparams", t}, {"Tindices", DT_INT64}, {"Taxis", DT_INT32}}});
  b.Add({{n("none")}, "ZerosLike", {n("vals")}, {{"T", t}}});
  b.Add({{n("pruned")}, "SelectV2", {n("found"), n("vals"), n("none")}, {{"T", t}}});
  return b.Add({{n("csr")}, "SparseTensorToCSRSparseMatrix", {n("pi"), n("pruned"), n("ps")},
                {{"T", t}}});
}

// SparseMatrixSparseMatMul(a, b) = op_a(A) op_b(B), both CSR: with X = op_a(A), Y = op_b(B)
// and G = d(product), d(X) = G Y^H, d(Y) = X^H G (sparse products), and d(A) = op_a^-1(d(X)),
// d(B) = op_b^-1(d(Y)), each pruned to its operand's pattern.
absl::Status CsrSparseMatMulGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseMatrixSparseMatMul", attrs);
  const DataType t = b.GetAttr<DataType>("type");
  const bool cplx = t == DT_COMPLEX64 || t == DT_COMPLEX128;
  const bool t_a = b.GetAttr<bool>("transpose_a"), adj_a = b.GetAttr<bool>("adjoint_a");
  const bool t_b = b.GetAttr<bool>("transpose_b"), adj_b = b.GetAttr<bool>("adjoint_b");
  int counter = 0;
  auto transpose = [&](const std::string& x, bool conjugate) {
    return b.Add({{absl::StrCat("tr_", counter++)}, "SparseMatrixTranspose", {x},
                  {{"type", t}, {"conjugate", conjugate}}});
  };
  // conj(M) of a CSR matrix: (M^H)^T (M itself for real types)
  auto conj = [&](const std::string& x) {
    return cplx ? transpose(transpose(x, true), false) : x;
  };
  auto matmul = [&](const std::string& x, const std::string& y, bool adj_x, bool adj_y) {
    return b.Add({{absl::StrCat("mm_", counter++)}, "SparseMatrixSparseMatMul", {x, y},
                  {{"type", t}, {"adjoint_a", adj_x}, {"adjoint_b", adj_y}}});
  };
  auto undo = [&](const std::string& d, bool tr, bool adj) {
    return adj ? transpose(d, true) : tr ? transpose(d, false) : d;
  };
  const std::string d = GradName("c");
  // d(X) = G Y^H: Y^H = B^H, conj(B) (Y = B^T) or B (Y = B^H)
  const std::string dx = adj_b ? matmul(d, "b", false, false)
                         : t_b ? matmul(d, conj("b"), false, false)
                               : matmul(d, "b", false, true);
  // d(Y) = X^H G
  const std::string dy = adj_a ? matmul("a", d, false, false)
                         : t_a ? matmul(conj("a"), d, false, false)
                               : matmul("a", d, true, false);
  b.Return("a", PruneToPattern(b, t, undo(dx, t_a, adj_a), "a", "prune_a"));
  b.Return("b", PruneToPattern(b, t, undo(dy, t_b, adj_b), "b", "prune_b"));
  return b.Build(g);
}

// SparseMatrixAdd(a, b, alpha, beta) = alpha A + beta B (CSR; c has the union of the
// patterns): d(A) = alpha d(c) and d(B) = beta d(c), each at its operand's entries (a CSR of
// the operand's pattern: PruneToPattern, Python's _PruneCSRMatrix). As Python's rule, nothing
// is conjugated for complex types, and alpha and beta get no gradient (Python: None; zeros).
absl::Status CsrAddGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseMatrixAdd", attrs);
  const DataType t = b.GetAttr<DataType>("T");
  const std::string d = GradName("c");
  // d(A) = alpha * d(c)[entries of A]
  b.Return("a", b.Add({{"da"}, "SparseMatrixMul", {PruneToPattern(b, t, d, "a", "prune_a"),
                                                   "alpha"}, {{"T", t}}}));
  // d(B) = beta * d(c)[entries of B]
  b.Return("b", b.Add({{"db"}, "SparseMatrixMul", {PruneToPattern(b, t, d, "b", "prune_b"),
                                                   "beta"}, {{"T", t}}}));
  b.NotDifferentiable("alpha");
  b.NotDifferentiable("beta");
  return b.Build(g);
}

// SparseMatrixSoftmax(logits) = S, the softmax of each row over its entries:
// d(logits) = (d(S) - rowsum(d(S) * S)) * S at S's entries, TensorFlow's op
// SparseMatrixSoftmaxGrad(S, d(S)), as Python's rule. S is the forward output (passed by
// front ends that have the forward, else recomputed).
absl::Status CsrSoftmaxGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseMatrixSoftmax", attrs);
  // d(logits) = (d(S) - rowsum(d(S) S)) S
  b.Return("logits", b.Add({{"dlogits"}, "SparseMatrixSoftmaxGrad",
                            {"softmax", GradName("softmax")}, b.PassAttrs({"type"})}));
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("DenseToCSRSparseMatrix", DenseToCsrGrad);
TF_EXT_REGISTER_TF_GRADIENT("CSRSparseMatrixToDense", CsrToDenseGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseTensorToCSRSparseMatrix", SparseTensorToCsrGrad);
TF_EXT_REGISTER_TF_GRADIENT("CSRSparseMatrixToSparseTensor", CsrToSparseTensorGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixTranspose", CsrTransposeGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixMatMul", CsrMatMulGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixSparseMatMul", CsrSparseMatMulGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixAdd", CsrAddGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixSoftmax", CsrSoftmaxGrad);
// Front ends that have the forward node pass the softmax (no recomputation).
static const bool csr_reads_outputs [[maybe_unused]] =
    (DeclareReadsForwardOutputs("SparseMatrixSoftmax"), true);
// SparseMatrixMul(A, B) = A .* B: Python's gradient only raises NotImplementedError (Python
// has none); so does C++'s, a registered refusal.
static const bool csr_mul_refused [[maybe_unused]] =
    LookupGradientKind("SparseMatrixMul") != GradientKind::kMissing ||
    RegisterUnimplementedGradient(
        "SparseMatrixMul",
        "Gradient for SparseMatrixMul is not implemented (Python's raises NotImplementedError).");
// Not differentiable, as in Python.
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixNNZ", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixZeros", nullptr);

}  // namespace tensorflow::tf_ext
