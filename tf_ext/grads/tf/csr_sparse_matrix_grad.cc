// Gradients of TensorFlow's CSR sparse-matrix ops (a CSRSparseMatrix in a DT_VARIANT tensor)
// that TensorFlow 2.21 has only in Python (python/ops/linalg/sparse/sparse_csr_matrix_grad.py):
// the conversions to and from dense and COO tensors, the transpose and the product with a
// dense matrix. Written from the maths; registered in both C++ registries when the op library
// loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// The gradient of a CSR matrix is a CSR matrix of the same sparsity pattern (its entries in
// the same row-major order); index and shape inputs get zeros (Python: None).
//
// Not yet here (Python has them): SparseMatrixSparseMatMul (gradients pruned to the operands'
// patterns), and SparseMatrixAdd, SparseMatrixMul and SparseMatrixSoftmax, whose kernels are
// GPU only (nothing here could test them).
//
// Tested against Python's gradients and central differences, through chains of these ops in a
// function (SymbolicGradient of the function: TensorFlow's graph-level builder over this
// registry), in tests/python/test_tf_sparse_grads.py.
#include <string>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/function.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {
namespace {

using grad::FDH;
using grad::GradName;
using grad::Placeholder;

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

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("DenseToCSRSparseMatrix", DenseToCsrGrad);
TF_EXT_REGISTER_TF_GRADIENT("CSRSparseMatrixToDense", CsrToDenseGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseTensorToCSRSparseMatrix", SparseTensorToCsrGrad);
TF_EXT_REGISTER_TF_GRADIENT("CSRSparseMatrixToSparseTensor", CsrToSparseTensorGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixTranspose", CsrTransposeGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixMatMul", CsrMatMulGrad);
// Not differentiable, as in Python.
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixNNZ", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixZeros", nullptr);

}  // namespace tensorflow::tf_ext
