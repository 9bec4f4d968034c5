// Gradients of TensorFlow's CSR sparse-matrix ops (a CSRSparseMatrix in a DT_VARIANT tensor)
// that TensorFlow 2.21 has only in Python (python/ops/linalg/sparse/sparse_csr_matrix_grad.py):
// the conversions to and from dense and COO tensors and the transpose. Written
// from the maths; registered in both C++ registries when the op library loads, unless
// TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// The gradient of a CSR matrix is a CSR matrix of the same sparsity pattern (its entries in
// the same row-major order); index and shape inputs get zeros (Python: None).
//
// Not yet here (Python has them): SparseMatrixAdd, SparseMatrixMul, SparseMatrixMatMul,
// SparseMatrixSparseMatMul (gradients pruned to the operands' patterns) and SparseMatrixSoftmax
// (whose kernel is GPU only: nothing here could test it).
//
// Tested against Python's gradients and central differences, through chains of these ops in a
// function (SymbolicGradient of the function: TensorFlow's graph-level builder over this
// registry), in tests/python/test_tf_sparse_grads.py.
#include <string>

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

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("DenseToCSRSparseMatrix", DenseToCsrGrad);
TF_EXT_REGISTER_TF_GRADIENT("CSRSparseMatrixToDense", CsrToDenseGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseTensorToCSRSparseMatrix", SparseTensorToCsrGrad);
TF_EXT_REGISTER_TF_GRADIENT("CSRSparseMatrixToSparseTensor", CsrToSparseTensorGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixTranspose", CsrTransposeGrad);
// Not differentiable, as in Python.
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixNNZ", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatrixZeros", nullptr);

}  // namespace tensorflow::tf_ext
