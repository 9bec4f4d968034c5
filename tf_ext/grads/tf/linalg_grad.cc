// Gradients of TensorFlow's linear-algebra ops that no C++ registry has in TensorFlow 2.21,
// written from the formulas of Python's python/ops/linalg_grad.py (and, for the diagonal ops,
// python/ops/array_grad.py). Each is registered in both C++ registries when the op library
// loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// Conventions. Matrices are the last two axes; every leading axis is a batch axis. A^H is the
// conjugate transpose (the transpose for real types). Complex gradients follow TensorFlow's
// convention: for a real loss L of a complex Z, d(Z) = dL/dRe(Z) + i dL/dIm(Z).
//
// Where Python branches on a static shape (Qr's wide matrices, Svd's tall ones, MatrixSolveLs's
// two kinds of normal equations), the bodies here decide at run time, because a gradient
// function is built from the forward node's attrs, before any shape is known: one formula that
// holds for every shape (Qr, Svd), or both computed and one selected (MatrixSolveLs). Python's
// restrictions stay: a gradient it
// refuses fails here with an InvalidArgument naming the op, at build time when the attrs decide
// it, else when the gradient runs (a CheckNumerics node, the one stock op that fails with a
// message of our choosing; its message then ends " : Tensor had NaN values").
//
// Where Python's complex gradient is not the derivative (MatrixDeterminant multiplies by det
// where the derivative needs conj(det); LogMatrixDeterminant takes the whole complex incoming
// gradient of the real log|det| and ignores the sign's, which for complex matrices depends on
// A; TridiagonalSolve, MatrixSquareRoot and MatrixSolveLs's first kind transpose where the
// derivative conjugate-transposes), the bodies here give the derivative; for real types they
// are Python's formulas. So do the V2 diagonal ops, whose bands Python's gradients pack as V3's
// default alignment rather than the op's.
//
// Checked against numeric Jacobians (tests/tf_linalg_grads_test.cc) and against Python's
// gradients on the same inputs (tests/python/test_tf_linalg_grads.py).
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

const NodeAttrs kI32 = {{"T", DT_INT32}};

// Matrix expressions over the forward's element type T, each node named uniquely after a hint.
class Linalg {
 public:
  // Nodes are of the forward's type attr `type_attr` (T, or Eig's Tout).
  explicit Linalg(grad::GradBuilder& b, const std::string& type_attr = "T")
      : b_(b),
        attr_(type_attr),
        t_({{"T", Placeholder(type_attr)}}),
        type_(b.GetAttr<DataType>(type_attr)) {}

  grad::GradBuilder& b() { return b_; }
  const NodeAttrs& t() const { return t_; }
  bool complex() const { return DataTypeIsComplex(type_); }
  // T's real counterpart (float for complex64, double for complex128; T itself if real).
  DataType real_type() const {
    return type_ == DT_COMPLEX64 ? DT_FLOAT : type_ == DT_COMPLEX128 ? DT_DOUBLE : type_;
  }

  std::string Name(const std::string& hint) { return absl::StrCat(hint, "_", counter_++); }

  // op(args) with attr T and `extra` attrs; returns its first output.
  std::string Op(const std::string& hint, const std::string& op, std::vector<std::string> args,
                 NodeAttrs extra = {}, std::vector<std::string> deps = {}) {
    NodeAttrs attrs = t_;
    attrs.insert(attrs.end(), extra.begin(), extra.end());
    return b_.Add({{Name(hint)}, op, std::move(args), std::move(attrs), std::move(deps)});
  }
  std::string I32(const std::string& hint, const std::string& op, std::vector<std::string> args) {
    return b_.Add({{Name(hint)}, op, std::move(args), kI32});
  }
  std::string ConstI32(int32 v) { return b_.Add(FDH::Const<int32>(Name("i32"), v)); }
  std::string ConstI32(std::vector<int32> v) { return b_.Add(FDH::Const<int32>(Name("i32v"), v)); }
  // A scalar of type T.
  std::string Scalar(double v) { return b_.TypedConst(Name("scalar"), v, attr_); }

  // x @ y with x, y optionally conjugate-transposed; batch axes broadcast.
  std::string MatMul(const std::string& hint, const std::string& x, const std::string& y,
                     bool adj_x = false, bool adj_y = false) {
    return Op(hint, "BatchMatMulV2", {x, y}, {{"adj_x", adj_x}, {"adj_y", adj_y}});
  }
  // x^H (the last two axes swapped, conjugated for complex T).
  std::string Adjoint(const std::string& hint, const std::string& x) {
    return Transpose(hint, x, complex());
  }
  // x^T (the last two axes swapped), conjugated if `conjugate`.
  std::string Transpose(const std::string& hint, const std::string& x, bool conjugate) {
    const std::string rank = b_.Add({{Name("rank")}, "Rank", {x}, t_});
    const std::string r2 = I32("rank_minus_2", "Sub", {rank, ConstI32(2)});
    const std::string r1 = I32("rank_minus_1", "Sub", {rank, ConstI32(1)});
    const std::string head = b_.Add(
        {{Name("batch_axes")}, "Range", {ConstI32(0), r2, ConstI32(1)}, {{"Tidx", DT_INT32}}});
    const std::string tail =
        b_.Add({{Name("swapped")}, "Pack", {r1, r2}, {{"N", 2}, {"T", DT_INT32}, {"axis", 0}}});
    const std::string perm = b_.Add({{Name("perm")},
                                     "ConcatV2",
                                     {head, tail, ConstI32(0)},
                                     {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
    return Op(hint, conjugate ? "ConjugateTranspose" : "Transpose", {x, perm},
              {{"Tperm", DT_INT32}});
  }
  // The band of x from `lower` diagonals below to `upper` above (-1: all).
  std::string Band(const std::string& hint, const std::string& x, int64_t lower, int64_t upper) {
    const std::string lo = b_.Add(FDH::Const<int64_t>(Name("num_lower"), lower));
    const std::string up = b_.Add(FDH::Const<int64_t>(Name("num_upper"), upper));
    return Op(hint, "MatrixBandPart", {x, lo, up}, {{"Tindex", DT_INT64}});
  }
  std::string Diag(const std::string& hint, const std::string& d) {
    return Op(hint, "MatrixDiag", {d});
  }
  std::string DiagPart(const std::string& hint, const std::string& x) {
    return Op(hint, "MatrixDiagPart", {x});
  }
  std::string SetDiag(const std::string& hint, const std::string& x, const std::string& d) {
    return Op(hint, "MatrixSetDiag", {x, d});
  }
  // Identity matrices of x's (square) shape.
  std::string EyeLike(const std::string& x) {
    return Diag("eye", Op("ones", "OnesLike", {DiagPart("diag_of_x", x)}));
  }
  std::string TriSolve(const std::string& hint, const std::string& a, const std::string& rhs,
                       bool lower, bool adjoint) {
    return Op(hint, "MatrixTriangularSolve", {a, rhs}, {{"lower", lower}, {"adjoint", adjoint}});
  }
  // x / (x^2 + 1e-20): Python's _SafeReciprocal (a Lorentz broadening of 1/x that keeps
  // repeated eigen- or singular values finite).
  std::string SafeReciprocal(const std::string& hint, const std::string& x) {
    const std::string x2 = Op("square", "Mul", {x, x});
    const std::string den = Op("broadened", "AddV2", {x2, Scalar(1e-20)});
    return Op(hint, "Mul", {x, Op("reciprocal", "Reciprocal", {den})});
  }
  // shape(x)[from:to] (int32; to = 0: to the end) / shape(x)[i] (int32 scalar).
  std::string ShapeSlice(const std::string& x, int32 from, int32 to) {
    const std::string shape = b_.Add(
        {{Name("shape")}, "Shape", {x}, {{"T", Placeholder(attr_)}, {"out_type", DT_INT32}}});
    return b_.Add({{Name("shape_slice")},
                   "StridedSlice",
                   {shape, ConstI32(std::vector<int32>{from}), ConstI32(std::vector<int32>{to}),
                    ConstI32(std::vector<int32>{1})},
                   {{"T", DT_INT32}, {"Index", DT_INT32}, {"end_mask", to == 0 ? 1 : 0}}});
  }
  std::string Dim(const std::string& x, int32 i) {
    const std::string shape = b_.Add(
        {{Name("shape")}, "Shape", {x}, {{"T", Placeholder(attr_)}, {"out_type", DT_INT32}}});
    return b_.Add({{Name("dim")},
                   "StridedSlice",
                   {shape, ConstI32(std::vector<int32>{i}), ConstI32(std::vector<int32>{i + 1}),
                    ConstI32(std::vector<int32>{1})},
                   {{"T", DT_INT32}, {"Index", DT_INT32}, {"shrink_axis_mask", 1}}});
  }
  // x[..., :k] (before) or x[..., k:] (!before), k an int32 scalar; clamped as Python's slices.
  std::string Columns(const std::string& hint, const std::string& x, const std::string& k,
                      bool before) {
    const std::string zero = ConstI32(0);
    const std::string bound = b_.Add(
        {{Name("bound")}, "Pack", {zero, k}, {{"N", 2}, {"T", DT_INT32}, {"axis", 0}}});  // [0, k]
    const std::string zeros = ConstI32(std::vector<int32>{0, 0});
    return Op(
        hint, "StridedSlice",
        {x, before ? zeros : bound, before ? bound : zeros, ConstI32(std::vector<int32>{1, 1})},
        {{"Index", DT_INT32},
         {"ellipsis_mask", 1},
         {"begin_mask", before ? 2 : 0},
         {"end_mask", before ? 0 : 2}});
  }
  // x reshaped to [..., 1, 1] (a scalar per matrix, for broadcasting against matrices).
  std::string PerMatrix(const std::string& hint, const std::string& x) {
    const std::string shape = b_.Add(
        {{Name("shape")}, "Shape", {x}, {{"T", Placeholder(attr_)}, {"out_type", DT_INT32}}});
    const std::string to = b_.Add({{Name("shape_11")},
                                   "ConcatV2",
                                   {shape, ConstI32(std::vector<int32>{1, 1}), ConstI32(0)},
                                   {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
    return Op(hint, "Reshape", {x, to}, {{"Tshape", DT_INT32}});
  }
  // Sums d(a), d(b) (shaped like the broadcast result) over the batch axes along which a and b
  // were broadcast, back to a's and b's shapes.
  std::pair<std::string, std::string> UnbroadcastBatch(const std::string& a, const std::string& b,
                                                       const std::string& da,
                                                       const std::string& db) {
    const std::string sa = ShapeSlice(a, 0, 0), sb = ShapeSlice(b, 0, 0);
    const std::string ba = ShapeSlice(a, 0, -2), bb = ShapeSlice(b, 0, -2);
    const std::string ra = Name("ra"), rb = Name("rb");
    b_.Add({{ra, rb}, "BroadcastGradientArgs", {ba, bb}, kI32});
    const NodeAttrs sum = {{"Tidx", DT_INT32}, {"keep_dims", false}};
    const NodeAttrs reshape = {{"Tshape", DT_INT32}};
    return {Op("da", "Reshape", {Op("sum_a", "Sum", {da, ra}, sum), sa}, reshape),
            Op("db", "Reshape", {Op("sum_b", "Sum", {db, rb}, sum), sb}, reshape)};
  }
  // x[..., from:to] along the last axis (axis = -1) or x[..., from:to, :] (axis = -2); to = 0:
  // to the end.
  std::string Slice(const std::string& hint, const std::string& x, int axis, int32 from, int32 to) {
    const int n = axis == -1 ? 2 : 3;  // the spec: ..., [rows,] columns
    std::vector<int32> begin(n, 0), end(n, 0), strides(n, 1);
    begin[n + axis] = from;
    end[n + axis] = to;
    const int other = axis == -1 ? 0 : 1 << 2;  // the untouched last axis of a row slice
    return Op(hint, "StridedSlice", {x, ConstI32(begin), ConstI32(end), ConstI32(strides)},
              {{"Index", DT_INT32},
               {"ellipsis_mask", 1},
               {"begin_mask", other},
               {"end_mask", other | (to == 0 ? 1 << (n + axis) : 0)}});
  }
  // x shifted by one along `axis` (-1 or -2), zero filled: towards index 0 (up) or away.
  std::string Shift(const std::string& hint, const std::string& x, int axis, bool up) {
    const std::string body =
        up ? Slice(hint + "_body", x, axis, 1, 0) : Slice(hint + "_body", x, axis, 0, -1);
    const std::string zero =
        Op(hint + "_zero", "ZerosLike", {Slice(hint + "_edge", x, axis, 0, 1)});
    return Op(hint, "ConcatV2", {up ? body : zero, up ? zero : body, ConstI32(axis)},
              {{"N", 2}, {"Tidx", DT_INT32}});
  }
  std::string Conj(const std::string& x) { return complex() ? Op(x + "_conj", "Conj", {x}) : x; }
  // Kronecker products x (x) y of batches of m x m matrices ([..., m*m, m*m]); `batch` is their
  // shape[:-2], m an int32 scalar.
  std::string Kron(const std::string& hint, const std::string& x, const std::string& y,
                   const std::string& batch, const std::string& m) {
    const std::string one = ConstI32(std::vector<int32>{1});
    const std::string mv =
        b_.Add({{Name("m_v")}, "Pack", {m}, {{"N", 1}, {"T", DT_INT32}, {"axis", 0}}});
    const NodeAttrs cat5 = {{"N", 5}, {"T", DT_INT32}, {"Tidx", DT_INT32}};
    const std::string sx =
        b_.Add({{Name("shape_x")}, "ConcatV2", {batch, mv, one, mv, one, ConstI32(0)}, cat5});
    const std::string sy =
        b_.Add({{Name("shape_y")}, "ConcatV2", {batch, one, mv, one, mv, ConstI32(0)}, cat5});
    const NodeAttrs reshape = {{"Tshape", DT_INT32}};
    // (x (x) y)[(i, k), (j, l)] = x_ij y_kl: [..., i, k, j, l], then flattened pairwise
    const std::string prod = Op(hint + "_prod", "Mul",
                                {Op(hint + "_x", "Reshape", {x, sx}, reshape),
                                 Op(hint + "_y", "Reshape", {y, sy}, reshape)});
    const std::string mm = I32("mm", "Mul", {m, m});
    const std::string sk = b_.Add(
        {{Name("shape_k")},
         "ConcatV2",
         {batch,
          b_.Add({{Name("mm_mm")}, "Pack", {mm, mm}, {{"N", 2}, {"T", DT_INT32}, {"axis", 0}}}),
          ConstI32(0)},
         {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
    return Op(hint, "Reshape", {prod, sk}, reshape);
  }
  // The solution Y of C Y = r, C = L L^H (L lower triangular): cholesky_solve.
  std::string CholeskySolve(const std::string& hint, const std::string& chol,
                            const std::string& rhs) {
    return TriSolve(hint, chol, TriSolve(hint + "_half", chol, rhs, true, false), true, true);
  }
  // A node that fails the gradient with `message` (an InvalidArgument) unless bool scalar `ok`;
  // returns its name, for control dependencies.
  std::string Require(const std::string& ok, const std::string& message) {
    const std::string pass = b_.Add(FDH::Const<float>(Name("pass"), 0.0f));
    const std::string fail =
        b_.Add(FDH::Const<float>(Name("fail"), std::numeric_limits<float>::quiet_NaN()));
    const std::string flag =
        b_.Add({{Name("flag")}, "Select", {ok, pass, fail}, {{"T", DT_FLOAT}}});
    return b_.Add(
        {{Name("check")}, "CheckNumerics", {flag}, {{"T", DT_FLOAT}, {"message", message}}});
  }

 private:
  grad::GradBuilder& b_;
  std::string attr_;
  NodeAttrs t_;
  DataType type_;
  int counter_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Inverses, determinants, solves.

// MatrixInverse(A) = X = op(A)^-1 with op(A) = A^H if adjoint, else A. dX = -X d(op(A)) X, so
// d(op(A)) = -X^H d(X) X^H, i.e. d(A) = -X^H d(X) X^H, or -X d(X)^H X if adjoint.
absl::Status MatrixInverseGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MatrixInverse", attrs);
  Linalg l(b);
  const bool adj = b.GetAttr<bool>("adjoint");
  // d(X) X^H  /  d(X)^H X
  const std::string inner = l.MatMul("dx_xh", GradName("output"), "output", adj, !adj);
  // X^H d(X) X^H  /  X d(X)^H X
  const std::string outer = l.MatMul("xh_dx_xh", "output", inner, !adj, false);
  b.Return("input", l.Op("d_a", "Neg", {outer}));
  return b.Build(g);
}

// MatrixDeterminant(A) = c = det A; dc = c tr(A^-1 dA), so d(A) = d(c) conj(c) A^-H per matrix
// (Python multiplies by c, which is the same for real A).
absl::Status MatrixDeterminantGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MatrixDeterminant", attrs);
  Linalg l(b);
  const std::string c = l.complex() ? l.Op("conj_det", "Conj", {"output"}) : "output";
  const std::string k = l.Op("dc_c", "Mul", {GradName("output"), c});  // d(c) conj(c)
  const std::string inv_h = l.Op("a_inv_h", "MatrixInverse", {"input"}, {{"adjoint", true}});
  b.Return("input", l.Op("d_a", "Mul", {l.PerMatrix("per_matrix", k), inv_h}));  // ... A^-H
  return b.Build(g);
}

// LogMatrixDeterminant(A) = (s, u): det A = s exp(u), u = log|det A| real. du = Re tr(A^-1 dA)
// and, for complex A, ds = i s Im tr(A^-1 dA), so
//   d(A) = (Re d(u) - i Im(conj(d(s)) s)) A^-H;
// for real A (s = +-1, constant almost everywhere) that is Python's d(u) A^-T. Python takes d(u)
// whole and ignores d(s) for complex A too.
absl::Status LogMatrixDeterminantGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("LogMatrixDeterminant", attrs);
  Linalg l(b);
  const std::string du = GradName("log_abs_determinant");
  std::string k = du;
  if (l.complex()) {
    const NodeAttrs to_real = {{"Tout", l.real_type()}};
    const std::string re_du = l.Op("re_du", "Real", {du}, to_real);  // Re d(u)
    const std::string ds_s =
        l.Op("conj_ds_s", "Mul", {l.Op("conj_ds", "Conj", {GradName("sign")}), "sign"});
    const std::string im = l.Op("im_ds_s", "Imag", {ds_s}, to_real);  // Im(conj(ds) s)
    const std::string neg_im = b.Add({{l.Name("neg_im")}, "Neg", {im}, {{"T", l.real_type()}}});
    k = b.Add({{l.Name("multiplier")},
               "Complex",
               {re_du, neg_im},
               {{"T", l.real_type()}, {"Tout", Placeholder("T")}}});
  }
  const std::string inv_h = l.Op("a_inv_h", "MatrixInverse", {"input"}, {{"adjoint", true}});
  b.Return("input", l.Op("d_a", "Mul", {l.PerMatrix("per_matrix", k), inv_h}));
  return b.Build(g);
}

// MatrixSolve(A, B) = C = op(A)^-1 B: d(B) = op(A)^-H d(C), d(A) = -d(B) C^H, or -C d(B)^H if
// adjoint.
absl::Status MatrixSolveGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MatrixSolve", attrs);
  Linalg l(b);
  const bool adj = b.GetAttr<bool>("adjoint");
  const std::string db =
      l.Op("d_b", "MatrixSolve", {"matrix", GradName("output")}, {{"adjoint", !adj}});
  const std::string prod = adj ? l.MatMul("c_dbh", "output", db, false, true)
                               : l.MatMul("db_ch", db, "output", false, true);
  b.Return("matrix", l.Op("d_a", "Neg", {prod}));
  b.Return("rhs", db);
  return b.Build(g);
}

// MatrixTriangularSolve(A, B) = C = op(A)^-1 B, A triangular (lower or upper): as MatrixSolve,
// d(A) kept to A's triangle; A's and B's batch axes broadcast, so both gradients are summed
// over the axes their input was broadcast along.
absl::Status MatrixTriangularSolveGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MatrixTriangularSolve", attrs);
  Linalg l(b);
  const bool adj = b.GetAttr<bool>("adjoint"), lower = b.GetAttr<bool>("lower");
  // d(B) = op(A)^-H d(C)
  const std::string db = l.TriSolve("d_b_full", "matrix", GradName("output"), lower, !adj);
  const std::string prod = adj ? l.MatMul("c_dbh", "output", db, false, true)
                               : l.MatMul("db_ch", db, "output", false, true);
  const std::string neg = l.Op("neg", "Neg", {prod});  // -d(B) C^H / -C d(B)^H
  const std::string da = lower ? l.Band("tril", neg, -1, 0) : l.Band("triu", neg, 0, -1);
  const auto [da_r, db_r] = l.UnbroadcastBatch("matrix", "rhs", da, db);
  b.Return("matrix", da_r);
  b.Return("rhs", db_r);
  return b.Build(g);
}

// Cholesky(A) = L, A = L L^H (only A's lower triangle is read). With
// Phi(M) = the lower triangle of M with its diagonal halved,
// d(A) = sym(L^-H Phi(L^H d(L)) L^-1), sym(X) = (X + X^H) / 2 (Python's symmetric split).
absl::Status CholeskyGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Cholesky", attrs);
  Linalg l(b);
  const std::string L = "output";
  const std::string l_inv = l.TriSolve("l_inv", L, l.EyeLike(L), true, false);    // L^-1
  const std::string mid = l.MatMul("lh_dl", L, GradName("output"), true, false);  // L^H d(L)
  const std::string half_diag =
      l.Op("half_diag", "Mul", {l.DiagPart("mid_diag", mid), l.Scalar(0.5)});
  const std::string phi = l.Band("phi", l.SetDiag("mid_half", mid, half_diag), -1, 0);
  const std::string x =
      l.MatMul("x", l.MatMul("l_inv_h_phi", l_inv, phi, true, false), l_inv);  // L^-H Phi L^-1
  const std::string sum = l.Op("x_plus_xh", "AddV2", {x, l.Adjoint("xh", x)});
  b.Return("input", l.Op("d_a", "Mul", {sum, l.Scalar(0.5)}));
  return b.Build(g);
}

// BandedTriangularSolve(A, B) = C = op(A)^-1 B, A given by num_bands diagonals packed as
// MatrixDiagPartV3's LEFT_RIGHT (lower: the main diagonal first, then the subdiagonals; upper:
// the superdiagonals from the outermost, the main one last): as MatrixTriangularSolve, d(A)
// then packed as A (zero where the packing pads).
absl::Status BandedTriangularSolveGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("BandedTriangularSolve", attrs);
  Linalg l(b);
  const bool adj = b.GetAttr<bool>("adjoint"), lower = b.GetAttr<bool>("lower");
  // d(B) = op(A)^-H d(C)
  const std::string db = l.Op("d_b_full", "BandedTriangularSolve", {"matrix", GradName("output")},
                              {{"lower", lower}, {"adjoint", !adj}});
  const std::string prod = adj ? l.MatMul("c_dbh", "output", db, false, true)
                               : l.MatMul("db_ch", db, "output", false, true);
  const std::string neg = l.Op("neg", "Neg", {prod});  // -d(B) C^H / -C d(B)^H
  // diagonals k = -(num_bands - 1) .. 0 (lower) or 0 .. num_bands - 1 (upper)
  const std::string reach = l.I32("reach", "Sub", {l.Dim("matrix", -2), l.ConstI32(1)});
  const std::string k = lower ? b.Add({{l.Name("k")},
                                       "Pack",
                                       {l.I32("minus_reach", "Neg", {reach}), l.ConstI32(0)},
                                       {{"N", 2}, {"T", DT_INT32}, {"axis", 0}}})
                              : b.Add({{l.Name("k")},
                                       "Pack",
                                       {l.ConstI32(0), reach},
                                       {{"N", 2}, {"T", DT_INT32}, {"axis", 0}}});
  const std::string da =
      l.Op("d_a_bands", "MatrixDiagPartV3", {neg, k, l.Scalar(0)}, {{"align", "LEFT_RIGHT"}});
  const auto [da_r, db_r] = l.UnbroadcastBatch("matrix", "rhs", da, db);
  b.Return("matrix", da_r);
  b.Return("rhs", db_r);
  return b.Build(g);
}

// TridiagonalMatMul(p, d, q, B) = A B with A's superdiagonal p, diagonal d, subdiagonal q (each
// [..., 1, M]): (A B)_i = p_i B_{i+1} + d_i B_i + q_i B_{i-1}. So, with B shifted up / down
// a row (zero filled) and sums over B's columns,
//   d(p)_i = sum conj(B_{i+1}) d(Y)_i,  d(d)_i = sum conj(B_i) d(Y)_i,
//   d(q)_i = sum conj(B_{i-1}) d(Y)_i,
//   d(B) = shift_down(conj(p)^T d(Y)) + conj(d)^T d(Y) + shift_up(conj(q)^T d(Y)).
absl::Status TridiagonalMatMulGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TridiagonalMatMul", attrs);
  Linalg l(b);
  const std::string dy = GradName("output");
  const std::string rhs = l.Conj("rhs");
  const NodeAttrs sum = {{"Tidx", DT_INT32}, {"keep_dims", false}};
  // sum over the columns of x * d(Y), as a [..., 1, M] row
  const auto row_sum = [&](const std::string& hint, const std::string& x) {
    const std::string col =
        l.Op(hint + "_sum", "Sum", {l.Op(hint + "_prod", "Mul", {x, dy}), l.ConstI32(-1)},
             sum);  // [..., M]
    return l.Op(hint, "ExpandDims", {col, l.ConstI32(-2)}, {{"Tdim", DT_INT32}});
  };
  b.Return("superdiag", row_sum("d_superdiag", l.Shift("rhs_up", rhs, -2, true)));
  b.Return("maindiag", row_sum("d_maindiag", rhs));
  b.Return("subdiag", row_sum("d_subdiag", l.Shift("rhs_down", rhs, -2, false)));
  // conj(p)^T etc.: [..., M, 1] columns
  const std::string p = l.Adjoint("p_h", "superdiag"), d = l.Adjoint("d_h", "maindiag"),
                    q = l.Adjoint("q_h", "subdiag");
  const std::string from_p = l.Shift("from_p", l.Op("p_dy", "Mul", {p, dy}), -2, false);
  const std::string from_q = l.Shift("from_q", l.Op("q_dy", "Mul", {q, dy}), -2, true);
  b.Return("rhs", l.Op("d_rhs", "AddV2",
                       {l.Op("from_pd", "AddV2", {from_p, l.Op("d_dy", "Mul", {d, dy})}), from_q}));
  return b.Build(g);
}

// TridiagonalSolve(D, B) = X = A^-1 B, A given by D = [superdiagonal; diagonal; subdiagonal]
// ([..., 3, M]; superdiagonal[M-1] and subdiagonal[0] unused). d(B) = A^-H d(X), solved with A^H's
// diagonals (A^T's, conjugated); d(A) = -d(B) X^H, of which the three diagonals are kept:
//   d(p)_i = -sum d(B)_i conj(X_{i+1}),  d(d)_i = -sum d(B)_i conj(X_i),
//   d(q)_i = -sum d(B)_i conj(X_{i-1})   (zero at the unused ends).
// For real types this is Python's; for complex ones Python conjugates neither A nor X, which is
// not the derivative.
absl::Status TridiagonalSolveGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TridiagonalSolve", attrs);
  Linalg l(b);
  const std::string p = l.Name("p"), d = l.Name("d"), q = l.Name("q");
  b.Add({{p, d, q}, "Unpack", {"diagonals"}, {{"T", Placeholder("T")}, {"num", 3}, {"axis", -2}}});
  // A^T: superdiagonal q shifted left, subdiagonal p shifted right
  const std::string pack = l.Op(
      "diagonals_t", "Pack", {l.Shift("q_left", q, -1, true), d, l.Shift("p_right", p, -1, false)},
      {{"N", 3}, {"axis", -2}});
  const std::string db = l.Op("d_rhs", "TridiagonalSolve", {l.Conj(pack), GradName("output")},
                              {{"partial_pivoting", Placeholder("partial_pivoting")}});
  const std::string x = l.Conj("output");
  const NodeAttrs sum = {{"Tidx", DT_INT32}, {"keep_dims", false}};
  const auto diag = [&](const std::string& hint, const std::string& y) {
    return l.Op(hint, "Sum", {l.Op(hint + "_prod", "Mul", {db, y}), l.ConstI32(-1)}, sum);
  };
  const std::string grads = l.Op("bands", "Pack",
                                 {diag("band_p", l.Shift("x_up", x, -2, true)), diag("band_d", x),
                                  diag("band_q", l.Shift("x_down", x, -2, false))},
                                 {{"N", 3}, {"axis", -2}});
  b.Return("diagonals", l.Op("d_diagonals", "Neg", {grads}));
  b.Return("rhs", db);
  return b.Build(g);
}

// MatrixSolveLs(A, B, l2) (fast): the regularised least-squares solution, through the normal
// equations of the first kind for a square or tall A, X = (A^H A + l2 I)^-1 A^H B, and of the
// second kind for a wide one, X = A^H (A A^H + l2 I)^-1 B. With C the regularised Gramian of the
// kind used and the solves through its Cholesky factor:
//   first kind:  Z = C^-1 d(X); d(A) = -A (X Z^H + Z X^H) + B Z^H, d(B) = A Z;
//   second kind: d(B) = C^-1 A d(X), T = C^-1 B; d(A) = -d(B) T^H A + T (d(X) - A^H d(B))^H.
// Python picks the kind from the static shape; here both are computed (the Gramian of the kind
// not used gets + (1 + |l2|) I, so that its Cholesky factorisation cannot fail) and the shape
// picks at run time. For real types the first kind is Python's; for complex ones Python's X Z^H +
// (X Z^H)^T is not the derivative, X Z^H + Z X^H is. fast = false: refused, as Python. l2: zeros
// (Python's None).
absl::Status MatrixSolveLsGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MatrixSolveLs", attrs);
  if (!b.GetAttr<bool>("fast")) {
    return absl::InvalidArgumentError(
        "MatrixSolveLs: gradient not defined for fast=False (as Python's)");
  }
  Linalg l(b);
  const std::string a = "matrix", rhs = "rhs", dx = GradName("output");
  const std::string l2 = b.Add({{l.Name("l2")},
                                "Cast",
                                {"l2_regularizer"},
                                {{"SrcT", DT_DOUBLE}, {"DstT", Placeholder("T")}}});
  const std::string tall =
      b.Add({{l.Name("tall")}, "GreaterEqual", {l.Dim(a, -2), l.Dim(a, -1)}, kI32});  // m >= n
  const std::string zero = l.Scalar(0);
  // 1 + |l2|: the Gramian of the kind not used + (l2 + 1 + |l2|) I is positive definite
  const NodeAttrs f64 = {{"T", DT_DOUBLE}};
  const std::string one_d = b.Add(FDH::Const<double>(l.Name("one_f64"), 1.0));
  const std::string pad_d =
      b.Add({{l.Name("pad_f64")},
             "AddV2",
             {one_d, b.Add({{l.Name("abs_l2")}, "Abs", {"l2_regularizer"}, f64})},
             f64});
  const std::string pad =
      b.Add({{l.Name("pad")}, "Cast", {pad_d}, {{"SrcT", DT_DOUBLE}, {"DstT", Placeholder("T")}}});
  // C = gram + (l2 + (the kind unused ? 1 + |l2| : 0)) I, factorised
  const auto chol = [&](const std::string& hint, const std::string& gram, bool first_kind) {
    const std::string extra =
        l.Op(hint + "_extra", "SelectV2", {tall, first_kind ? zero : pad, first_kind ? pad : zero});
    const std::string shift = l.Op(hint + "_shift", "AddV2", {l2, extra});
    const std::string c =
        l.Op(hint + "_c", "AddV2", {gram, l.Op(hint + "_ridge", "Mul", {l.EyeLike(gram), shift})});
    return l.Op(hint, "Cholesky", {c});
  };
  // first kind (square or tall A)
  const std::string chol1 = chol("chol_first", l.MatMul("ah_a", a, a, true, false), true);
  const std::string z = l.CholeskySolve("z", chol1, dx);
  const std::string xzh = l.MatMul("x_zh", "output", z, false, true);
  const std::string sym = l.Op("xzh_sym", "AddV2", {xzh, l.Adjoint("xzh_h", xzh)});
  const std::string da1 =
      l.Op("d_a_first", "Sub", {l.MatMul("b_zh", rhs, z, false, true), l.MatMul("a_sym", a, sym)});
  const std::string db1 = l.MatMul("d_b_first", a, z);
  // second kind (wide A)
  const std::string chol2 = chol("chol_second", l.MatMul("a_ah", a, a, false, true), false);
  const std::string db2 = l.CholeskySolve("d_b_second", chol2, l.MatMul("a_dx", a, dx));
  const std::string t = l.CholeskySolve("t", chol2, rhs);
  const std::string a1 = l.MatMul("db_th_a", db2, l.MatMul("th_a", t, a, true, false));
  const std::string a2 = l.MatMul(
      "t_rest", t, l.Op("rest", "Sub", {dx, l.MatMul("ah_db", a, db2, true, false)}), false, true);
  const std::string da2 = l.Op("d_a_second", "Sub", {a2, a1});
  b.Return("matrix", l.Op("d_a", "SelectV2", {tall, da1, da2}));
  b.Return("rhs", l.Op("d_b", "SelectV2", {tall, db1, db2}));
  b.NotDifferentiable("l2_regularizer");
  return b.Build(g);
}

// MatrixSquareRoot(A) = R, R R = A: R dR + dR R = dA, a Sylvester equation. Its adjoint gives
// d(A) = Z solving R^H Z + Z R^H = d(R), solved as Python does, through Kronecker products on
// column-major vec: (I (x) R^H + conj(R) (x) I) vec(Z) = vec(d(R)). For real types this is
// Python's system; for complex ones Python's (R^T, not R^H) is not the derivative.
absl::Status MatrixSquareRootGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MatrixSquareRoot", attrs);
  Linalg l(b);
  const std::string r = "output";
  const std::string batch = l.ShapeSlice(r, 0, -2), m = l.Dim(r, -1);
  const std::string eye = l.EyeLike(r);
  const std::string k = l.Op("sylvester", "AddV2",
                             {l.Kron("k_left", eye, l.Adjoint("r_h", r), batch, m),
                              l.Kron("k_right", l.Conj(r), eye, batch, m)});
  // column-major vec(d(R)) = row-major flattening of d(R)^T, as a [..., m*m, 1] column
  const std::string mm = l.I32("mm", "Mul", {m, m});
  const std::string col_shape = b.Add({{l.Name("col_shape")},
                                       "ConcatV2",
                                       {batch,
                                        b.Add({{l.Name("mm_1")},
                                               "Pack",
                                               {mm, l.ConstI32(1)},
                                               {{"N", 2}, {"T", DT_INT32}, {"axis", 0}}}),
                                        l.ConstI32(0)},
                                       {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
  const NodeAttrs reshape = {{"Tshape", DT_INT32}};
  const std::string vec = l.Op(
      "vec_dr", "Reshape", {l.Transpose("dr_t", GradName("output"), false), col_shape}, reshape);
  const std::string sol = l.Op("vec_z", "MatrixSolve", {k, vec}, {{"adjoint", false}});
  const std::string zt = l.Op("z_t", "Reshape", {sol, l.ShapeSlice(r, 0, 0)}, reshape);
  b.Return("input", l.Transpose("d_a", zt, false));
  return b.Build(g);
}

// ---------------------------------------------------------------------------------------------
// Diagonals (python/ops/array_grad.py). Each is linear: its gradient is its adjoint. The integer
// k / num_rows / num_cols and the padding_value get zeros, as Python's None. (MatrixDiag and
// MatrixBandPart have gradients in TensorFlow's own client registry.)

// MatrixDiagPart(x): x's diagonal. d(x) = zeros with d(output) on the diagonal.
absl::Status MatrixDiagPartGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MatrixDiagPart", attrs);
  Linalg l(b);
  b.Return("input",
           l.SetDiag("d_input", l.Op("zeros", "ZerosLike", {"input"}), GradName("diagonal")));
  return b.Build(g);
}

// MatrixSetDiag(x, d): x with its diagonal replaced by d. d(x) = d(output) with a zero
// diagonal; d(d) = the diagonal of d(output).
absl::Status MatrixSetDiagGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MatrixSetDiag", attrs);
  Linalg l(b);
  const std::string dy = GradName("output");
  b.Return("input", l.SetDiag("d_input", dy, l.Op("zeros", "ZerosLike", {"diagonal"})));
  b.Return("diagonal", l.DiagPart("d_diagonal", dy));
  return b.Build(g);
}

// V2 / V3 forms: diagonals k (a band k = [lo, hi]) of matrices of any shape. V3's `align`
// (where shorter diagonals sit in the packed array) is passed on; V2 packs as V3's LEFT_LEFT.
// MatrixDiagV2/V3(d, k, rows, cols, padding): d(d) = the diagonals k of d(output), packed as d
// (padding positions zero).
absl::Status MatrixDiagVnGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  Linalg l(b);
  const bool v3 = op == "MatrixDiagV3";
  NodeAttrs align;
  if (v3) align.push_back({"align", Placeholder("align")});
  const std::string zero = l.Op("zero", "ZerosLike", {"padding_value"});
  b.Return("diagonal", l.Op("d_diagonal", v3 ? "MatrixDiagPartV3" : "MatrixDiagPartV2",
                            {GradName("output"), "k", zero}, align));
  b.NotDifferentiable("k");
  b.NotDifferentiable("num_rows");
  b.NotDifferentiable("num_cols");
  b.NotDifferentiable("padding_value");
  return b.Build(g);
}

// MatrixDiagPartV2/V3(x, k, padding): d(x) = zeros with d(output)'s diagonals k set (its
// padding positions dropped).
absl::Status MatrixDiagPartVnGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  Linalg l(b);
  const bool v3 = op == "MatrixDiagPartV3";
  NodeAttrs align;
  if (v3) align.push_back({"align", Placeholder("align")});
  b.Return("input",
           l.Op("d_input", v3 ? "MatrixSetDiagV3" : "MatrixSetDiagV2",
                {l.Op("zeros", "ZerosLike", {"input"}), GradName("diagonal"), "k"}, align));
  b.NotDifferentiable("k");
  b.NotDifferentiable("padding_value");
  return b.Build(g);
}

// MatrixSetDiagV2/V3(x, d, k): d(x) = d(output) with diagonals k zeroed; d(d) = d(output)'s
// diagonals k.
absl::Status MatrixSetDiagVnGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  Linalg l(b);
  const bool v3 = op == "MatrixSetDiagV3";
  NodeAttrs align;
  if (v3) align.push_back({"align", Placeholder("align")});
  const std::string dy = GradName("output");
  b.Return("input",
           l.Op("d_input", op, {dy, l.Op("zeros", "ZerosLike", {"diagonal"}), "k"}, align));
  b.Return("diagonal", l.Op("d_diagonal", v3 ? "MatrixDiagPartV3" : "MatrixDiagPartV2",
                            {dy, "k", l.Scalar(0)}, align));
  b.NotDifferentiable("k");
  return b.Build(g);
}

// ---------------------------------------------------------------------------------------------
// Decompositions.

// X r^-H for upper-triangular r: (r^-1 X^H)^H.
std::string RightSolveUpperH(Linalg& l, const std::string& hint, const std::string& x,
                             const std::string& r) {
  return l.Adjoint(hint, l.TriSolve(hint + "_solve", r, l.Adjoint(hint + "_xh", x), false, false));
}

// The QR gradient of a square or tall factorisation A = Q R (Q m x k with orthonormal columns,
// R k x k upper triangular), after arXiv:2009.10071 as Python:
//   M = tril(Q^H dQ - (Q^H dQ)^H + R dR^H - (R dR^H)^H)
//   d(A) = Q (dR + M R^-H) + (dQ - Q Q^H dQ) R^-H
// plus, for complex types, (Q C^H) R^-H with C = i Im(diag(R dR^H - (Q^H dQ)^H)).
std::string QrSquareOrTall(Linalg& l, const std::string& q, const std::string& r,
                           const std::string& dq, const std::string& dr) {
  const std::string qdq = l.MatMul("qh_dq", q, dq, true, false);  // Q^H dQ
  const std::string rdr = l.MatMul("r_drh", r, dr, false, true);  // R dR^H
  const std::string qdq_h = l.Adjoint("qh_dq_h", qdq);
  const std::string skew = l.Op("skew", "AddV2",
                                {l.Op("qdq_skew", "Sub", {qdq, qdq_h}),
                                 l.Op("rdr_skew", "Sub", {rdr, l.Adjoint("r_drh_h", rdr)})});
  const std::string m = l.Band("tril", skew, -1, 0);
  const std::string term_a =
      l.MatMul("q_term", q, l.Op("dr_plus", "AddV2", {dr, RightSolveUpperH(l, "m_rinvh", m, r)}));
  const std::string proj = l.Op("dq_perp", "Sub", {dq, l.MatMul("q_qdq", q, qdq)});
  std::string sum = l.Op("qr_grad", "AddV2", {term_a, RightSolveUpperH(l, "perp_rinvh", proj, r)});
  if (l.complex()) {
    // C = i Im(diag(R dR^H - (Q^H dQ)^H)), as a diagonal matrix
    const std::string diag = l.DiagPart("corr_diag", l.Op("corr_m", "Sub", {rdr, qdq_h}));
    const NodeAttrs to_real = {{"Tout", l.real_type()}};
    const std::string im = l.Op("corr_im", "Imag", {diag}, to_real);
    const std::string zeros =
        l.b().Add({{l.Name("corr_zero")}, "ZerosLike", {im}, {{"T", l.real_type()}}});
    const std::string i_im = l.b().Add({{l.Name("corr_i_im")},
                                        "Complex",
                                        {zeros, im},
                                        {{"T", l.real_type()}, {"Tout", Placeholder("T")}}});
    const std::string corr = l.Diag("corr", i_im);
    const std::string q_ch = l.MatMul("q_corr_h", q, corr, false, true);
    sum = l.Op("qr_grad_c", "AddV2", {sum, RightSolveUpperH(l, "corr_rinvh", q_ch, r)});
  }
  return sum;
}

// Qr(A) = (Q, R). With m = A's rows, A = [X, Y] and R = [U, V] split after column m (Y, V
// empty unless A is wide): d(Y) = Q dV and d(X) = the square/tall gradient of X = Q U with
// dQ + Y dV^H, dU. The slices clamp, so for a square or tall A this is the square/tall
// gradient itself (Python's two branches, chosen at run time). As Python, the gradient of a
// tall A with full_matrices is refused.
absl::Status QrGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Qr", attrs);
  Linalg l(b);
  std::string a = "input", q = "q", r = "r", dq = GradName("q"), dr = GradName("r");
  if (b.GetAttr<bool>("full_matrices")) {
    const std::string ok = b.Add(
        {{l.Name("wide_or_square")}, "LessEqual", {l.Dim("input", -2), l.Dim("input", -1)}, kI32});
    const std::string check =
        l.Require(ok,
                  "Qr: gradient not implemented when the matrix has more rows than columns and "
                  "full_matrices is true (as Python's QrGrad)");
    // every later node waits for the check (a tall R would fail a solve with another message)
    for (std::string* v : {&a, &q, &r, &dq, &dr}) {
      *v = l.Op(*v + "_checked", "Identity", {*v}, {}, {check});
    }
  }
  const std::string m = l.Dim(q, -2);
  const std::string y = l.Columns("y", a, m, false);  // A[..., m:]
  const std::string u = l.Columns("u", r, m, true);   // R[..., :m]
  const std::string dv = l.Columns("dv", dr, m, false);
  const std::string du = l.Columns("du", dr, m, true);
  const std::string dy = l.MatMul("d_y", q, dv);  // Q dV
  const std::string dq_x = l.Op("dq_x", "AddV2", {dq, l.MatMul("y_dvh", y, dv, false, true)});
  const std::string dx = QrSquareOrTall(l, q, u, dq_x, du);
  b.Return("input",
           l.Op("d_a", "ConcatV2", {dx, dy, l.ConstI32(-1)}, {{"N", 2}, {"Tidx", DT_INT32}}));
  return b.Build(g);
}

// SelfAdjointEigV2(A) = (e, V), A = V diag(e) V^H (only A's lower triangle is read). With
// F_ij = 1/(e_j - e_i) off the diagonal (Python's broadened reciprocal), 0 on it:
//   G = V (diag(d(e)) + F * (V^H d(V))) V^H
// (compute_v false: d(V) = 0, V recomputed), then d(A) = the lower triangle of G + G^H with
// its diagonal halved.
absl::Status SelfAdjointEigV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SelfAdjointEigV2", attrs);
  Linalg l(b);
  const bool compute_v = b.GetAttr<bool>("compute_v");
  std::string mid = l.Diag("diag_de", GradName("e"));
  std::string v = "v";
  if (compute_v) {
    const NodeAttrs dim = {{"Tdim", DT_INT32}};
    const std::string row = l.Op("e_row", "ExpandDims", {"e", l.ConstI32(-2)}, dim);  // e_j
    const std::string col = l.Op("e_col", "ExpandDims", {"e", l.ConstI32(-1)}, dim);  // e_i
    const std::string f_full = l.SafeReciprocal("f_full", l.Op("gaps", "Sub", {row, col}));
    const std::string f = l.SetDiag("f", f_full, l.Op("zero_diag", "ZerosLike", {"e"}));
    const std::string vdv = l.MatMul("vh_dv", "v", GradName("v"), true, false);
    mid = l.Op("mid", "AddV2", {mid, l.Op("f_vdv", "Mul", {f, vdv})});
  } else {
    const std::string e2 = l.Name("eig_e"), v2 = l.Name("eig_v");
    b.Add(
        {{e2, v2}, "SelfAdjointEigV2", {"input"}, {{"T", Placeholder("T")}, {"compute_v", true}}});
    v = v2;
  }
  const std::string ga = l.MatMul("v_mid_vh", v, l.MatMul("mid_vh", mid, v, false, true));
  const std::string lower =
      l.Band("sym_lower", l.Op("ga_plus_h", "AddV2", {ga, l.Adjoint("ga_h", ga)}), -1, 0);
  const std::string half =
      l.Op("half_diag", "Mul", {l.DiagPart("lower_diag", lower), l.Scalar(0.5)});
  b.Return("input", l.SetDiag("d_a", lower, half));
  return b.Build(g);
}

// Svd(A) = (s, U, V), A = U diag(s) V^H, k = min(m, n) singular values. Python differentiates
// a tall A through A^H (swapping U and V) and adds each side's projection term only where it
// can be nonzero; here both are always added, which gives the same gradient for every shape:
// with U1 = U[..., :k], U2 = U[..., k:] (empty unless full_matrices), V1, V2 alike,
// F_ij = 1/(s_j^2 - s_i^2) off the diagonal (broadened), S = diag(s), S^-1 broadened:
//   d(A) = U1 (diag(d(s)) + F*(U1^H dU1 - (.)^H) S + S F*(V1^H dV1 - (.)^H)) V1^H
//        + U1 S^-1 (dV1^H - (dV1^H V1) V1^H - (V1^H dV2) V2^H)        (0 unless A is wide)
//        + (dU1 - U1 (U1^H dU1) - U2 (dU2^H U1)) S^-1 V1^H             (0 unless A is tall)
// For complex A, as Python: + S^-1 D / 2 inside the first bracket with D = diag(V1^H dV1)^H -
// diag(V1^H dV1), or diag(U1^H dU1) - diag(U1^H dU1)^H for a tall A, and d(s) conjugated for a
// tall A (Python's transposition). compute_uv false: U, V recomputed, d(A) = U diag(d(s)) V^H.
// As Python, full_matrices with |m - n| > 1 is refused. For complex A the singular values are
// real (s's imaginary parts are 0 whatever A), so only Re d(s) reaches A; Python uses d(s) as
// given, which is not the derivative when d(s) has an imaginary part (a loss Re(c s), c complex).
absl::Status SvdGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Svd", attrs);
  Linalg l(b);
  std::string ds_in = GradName("s");
  if (l.complex()) {  // Re d(s) = (d(s) + conj(d(s))) / 2
    ds_in = l.Op("ds_re", "Mul",
                 {l.Op("ds_2re", "AddV2", {ds_in, l.Op("ds_conj_in", "Conj", {ds_in})}),
                  l.Scalar(0.5)});
  }
  if (!b.GetAttr<bool>("compute_uv")) {
    const std::string s2 = l.Name("svd_s"), u2 = l.Name("svd_u"), v2 = l.Name("svd_v");
    b.Add({{s2, u2, v2},
           "Svd",
           {"input"},
           {{"T", Placeholder("T")}, {"compute_uv", true}, {"full_matrices", false}}});
    const std::string sv = l.MatMul("ds_vh", l.Diag("ds", ds_in), v2, false, true);
    b.Return("input", l.MatMul("d_a", u2, sv));
    return b.Build(g);
  }
  std::string a = "input", s = "s", u = "u", v = "v", ds = ds_in, du = GradName("u"),
              dv = GradName("v");
  if (b.GetAttr<bool>("full_matrices")) {
    const std::string gap = l.I32("m_minus_n", "Sub", {l.Dim(a, -2), l.Dim(a, -1)});
    const std::string ok = b.Add(
        {{l.Name("gap_ok")}, "LessEqual", {l.I32("abs_gap", "Abs", {gap}), l.ConstI32(1)}, kI32});
    const std::string check =
        l.Require(ok,
                  "Svd: gradient not implemented for abs(m - n) > 1 when full_matrices is true (as "
                  "Python's SvdGrad)");
    for (std::string* x : {&a, &s, &u, &v, &ds, &du, &dv}) {
      *x = l.Op(*x + "_checked", "Identity", {*x}, {}, {check});
    }
  }
  const std::string tall =
      b.Add({{l.Name("tall")}, "Greater", {l.Dim(a, -2), l.Dim(a, -1)}, kI32});  // m > n
  const std::string k = l.Dim(s, -1);
  const std::string u1 = l.Columns("u1", u, k, true), u2 = l.Columns("u2", u, k, false);
  const std::string v1 = l.Columns("v1", v, k, true), v2 = l.Columns("v2", v, k, false);
  const std::string du1 = l.Columns("du1", du, k, true), du2 = l.Columns("du2", du, k, false);
  const std::string dv1 = l.Columns("dv1", dv, k, true), dv2 = l.Columns("dv2", dv, k, false);
  const std::string s_mat = l.Diag("s_mat", s);
  const std::string s_inv = l.Diag("s_inv", l.SafeReciprocal("s_recip", s));
  const NodeAttrs dim = {{"Tdim", DT_INT32}};
  const std::string s2 = l.Op("s2", "Mul", {s, s});
  const std::string gaps = l.Op("gaps", "Sub",
                                {l.Op("s2_row", "ExpandDims", {s2, l.ConstI32(-2)}, dim),
                                 l.Op("s2_col", "ExpandDims", {s2, l.ConstI32(-1)}, dim)});
  const std::string f = l.SetDiag("f", l.SafeReciprocal("f_full", gaps),
                                  l.Op("zero_diag", "ZerosLike", {s}));  // 1/(s_j^2 - s_i^2)
  const std::string uhdu = l.MatMul("uh_du", u1, du1, true, false);      // U1^H dU1
  const std::string vhdv = l.MatMul("vh_dv", v1, dv1, true, false);      // V1^H dV1
  const std::string fu =
      l.Op("f_u", "Mul", {f, l.Op("uhdu_skew", "Sub", {uhdu, l.Adjoint("uhdu_h", uhdu)})});
  const std::string fv =
      l.Op("f_v", "Mul", {f, l.Op("vhdv_skew", "Sub", {vhdv, l.Adjoint("vhdv_h", vhdv)})});
  std::string ds_eff = ds;
  if (l.complex()) ds_eff = l.Op("ds_eff", "SelectV2", {tall, l.Op("ds_conj", "Conj", {ds}), ds});
  std::string inner =
      l.Op("inner", "AddV2",
           {l.Op("inner_s", "AddV2", {l.Diag("ds_mat", ds_eff), l.MatMul("fu_s", fu, s_mat)}),
            l.MatMul("s_fv", s_mat, fv)});
  if (l.complex()) {
    const std::string lu = l.Diag("l_u", l.DiagPart("uhdu_diag", uhdu));
    const std::string lv = l.Diag("l_v", l.DiagPart("vhdv_diag", vhdv));
    const std::string d_tall = l.Op("d_tall", "Sub", {lu, l.Adjoint("l_u_h", lu)});
    const std::string d_wide = l.Op("d_wide", "Sub", {l.Adjoint("l_v_h", lv), lv});
    const std::string d = l.Op("d_imag", "SelectV2", {tall, d_tall, d_wide});
    inner =
        l.Op("inner_c", "AddV2",
             {inner, l.Op("half_s_inv_d", "Mul", {l.MatMul("s_inv_d", s_inv, d), l.Scalar(0.5)})});
  }
  const std::string term1 = l.MatMul("term1", u1, l.MatMul("inner_vh", inner, v1, false, true));
  // dV1^H - (dV1^H V1) V1^H - (V1^H dV2) V2^H
  const std::string pv =
      l.Op("perp_v", "Sub",
           {l.Op("perp_v1", "Sub",
                 {l.Adjoint("dv1_h", dv1),
                  l.MatMul("dvhv_vh", l.MatMul("dv1h_v1", dv1, v1, true, false), v1, false, true)}),
            l.MatMul("vhdv2_v2h", l.MatMul("v1h_dv2", v1, dv2, true, false), v2, false, true)});
  const std::string term_v = l.MatMul("term_v", l.MatMul("u_s_inv", u1, s_inv), pv);
  // dU1 - U1 (U1^H dU1) - U2 (dU2^H U1)
  const std::string pu =
      l.Op("perp_u", "Sub",
           {l.Op("perp_u1", "Sub", {du1, l.MatMul("u_uhdu", u1, uhdu)}),
            l.MatMul("u2_du2hu1", u2, l.MatMul("du2h_u1", du2, u1, true, false))});
  const std::string term_u = l.MatMul("term_u", l.MatMul("pu_s_inv", pu, s_inv), v1, false, true);
  b.Return("input", l.Op("d_a", "AddV2", {l.Op("terms_1v", "AddV2", {term1, term_v}), term_u}));
  return b.Build(g);
}

// Eig(A) = (e, V), A V = V diag(e) (complex e, V, unit-norm columns; A real or complex), after
// Boeddeker et al. eq. 4.77, as Python: with F_ij = conj(1/(e_j - e_i)) off the diagonal
// (broadened), 0 on it,
//   d(A) = V^-H (diag(d(e)) + F * (V^H d(V) - V^H V diag(Re diag(V^H d(V))))) V^H
// (compute_v false: d(V) = 0, V recomputed), solved rather than inverted, then cast to A's type
// (the real part for a real A).
absl::Status EigGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Eig", attrs);
  Linalg l(b, "Tout");
  const FDH::AttrValueWrapper tout = Placeholder("Tout");
  std::string v = "v";
  std::string mid = l.Diag("diag_de", GradName("e"));
  if (b.GetAttr<bool>("compute_v")) {
    const NodeAttrs dim = {{"Tdim", DT_INT32}};
    const std::string row = l.Op("e_row", "ExpandDims", {"e", l.ConstI32(-2)}, dim);  // e_j
    const std::string col = l.Op("e_col", "ExpandDims", {"e", l.ConstI32(-1)}, dim);  // e_i
    const std::string f =
        l.Op("f", "Conj",
             {l.SetDiag("f_raw", l.SafeReciprocal("f_full", l.Op("gaps", "Sub", {row, col})),
                        l.Op("zero_diag", "ZerosLike", {"e"}))});
    const std::string vgv = l.MatMul("vh_dv", "v", GradName("v"), true, false);  // V^H d(V)
    const DataType real = l.real_type();
    const std::string re =
        b.Add({{l.Name("re_vgv")}, "Real", {vgv}, {{"T", tout}, {"Tout", real}}});
    const std::string re_c =
        b.Add({{l.Name("re_vgv_c")}, "Cast", {re}, {{"SrcT", real}, {"DstT", tout}}});
    const std::string diag_re = l.Diag("diag_re", l.DiagPart("re_diag", re_c));
    const std::string vhv = l.MatMul("vh_v", "v", "v", true, false);
    const std::string inner = l.Op("inner", "Sub", {vgv, l.MatMul("vhv_diag", vhv, diag_re)});
    mid = l.Op("mid", "AddV2", {mid, l.Op("f_inner", "Mul", {f, inner})});
  } else {
    const std::string e2 = l.Name("eig_e"), v2 = l.Name("eig_v");
    b.Add({{e2, v2},
           "Eig",
           {"input"},
           {{"T", Placeholder("T")}, {"Tout", tout}, {"compute_v", true}}});
    v = v2;
  }
  const std::string vh = l.Adjoint("v_h", v);
  const std::string ga =
      l.Op("d_a_complex", "MatrixSolve", {vh, l.MatMul("mid_vh", mid, vh)}, {{"adjoint", false}});
  b.Return("input",
           b.Add({{l.Name("d_a")}, "Cast", {ga}, {{"SrcT", tout}, {"DstT", Placeholder("T")}}}));
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("MatrixInverse", MatrixInverseGrad);
TF_EXT_REGISTER_TF_GRADIENT("MatrixDeterminant", MatrixDeterminantGrad);
TF_EXT_REGISTER_TF_GRADIENT("LogMatrixDeterminant", LogMatrixDeterminantGrad);
TF_EXT_REGISTER_TF_GRADIENT("MatrixSolve", MatrixSolveGrad);
TF_EXT_REGISTER_TF_GRADIENT("MatrixTriangularSolve", MatrixTriangularSolveGrad);
TF_EXT_REGISTER_TF_GRADIENT("Cholesky", CholeskyGrad);
TF_EXT_REGISTER_TF_GRADIENT("MatrixDiagPart", MatrixDiagPartGrad);
TF_EXT_REGISTER_TF_GRADIENT("MatrixSetDiag", MatrixSetDiagGrad);
TF_EXT_REGISTER_TF_GRADIENT("MatrixDiagV2", [](const AttrSlice& a, FunctionDef* g) {
  return MatrixDiagVnGrad("MatrixDiagV2", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("MatrixDiagV3", [](const AttrSlice& a, FunctionDef* g) {
  return MatrixDiagVnGrad("MatrixDiagV3", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("MatrixDiagPartV2", [](const AttrSlice& a, FunctionDef* g) {
  return MatrixDiagPartVnGrad("MatrixDiagPartV2", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("MatrixDiagPartV3", [](const AttrSlice& a, FunctionDef* g) {
  return MatrixDiagPartVnGrad("MatrixDiagPartV3", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("MatrixSetDiagV2", [](const AttrSlice& a, FunctionDef* g) {
  return MatrixSetDiagVnGrad("MatrixSetDiagV2", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("MatrixSetDiagV3", [](const AttrSlice& a, FunctionDef* g) {
  return MatrixSetDiagVnGrad("MatrixSetDiagV3", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("Qr", QrGrad);
TF_EXT_REGISTER_TF_GRADIENT("SelfAdjointEigV2", SelfAdjointEigV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("Svd", SvdGrad);
TF_EXT_REGISTER_TF_GRADIENT("Eig", EigGrad);
TF_EXT_REGISTER_TF_GRADIENT("MatrixSolveLs", MatrixSolveLsGrad);
TF_EXT_REGISTER_TF_GRADIENT("MatrixSquareRoot", MatrixSquareRootGrad);
TF_EXT_REGISTER_TF_GRADIENT("BandedTriangularSolve", BandedTriangularSolveGrad);
TF_EXT_REGISTER_TF_GRADIENT("TridiagonalMatMul", TridiagonalMatMulGrad);
TF_EXT_REGISTER_TF_GRADIENT("TridiagonalSolve", TridiagonalSolveGrad);

}  // namespace tensorflow::tf_ext
