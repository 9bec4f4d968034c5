// Gradients of TensorFlow's ops on complex numbers that TensorFlow 2.21's own C++ gradients get
// wrong (core/ops/math_grad.cc, cc/gradients/math_grad.cc), replaced in every registry
// (OpDeclaration::Overrides; listed in docs/registries.md).
//
// The convention is Python's (python/ops/math_grad.py): for an element-wise op y = f(x) that is
// holomorphic, d(x) = d(y) * conj(f'(x)). TensorFlow's function gradients compute d(y) * f'(x)
// (their attr lists say {half, float, double}, but nothing enforces it), so every complex
// gradient of Exp, Log, Tanh, ... is the conjugate-less one. Each function here has a Taylor
// series with real coefficients, so conj(f'(x)) = f'(conj(x)): the override runs TensorFlow's
// own gradient with its forward inputs read through Conj, and leaves real types untouched
// (the same nodes as before). Asinh and Acosh, whose TensorFlow gradients are wrong for every
// type, and Real/Imag/Angle/Complex, whose TensorFlow gradients mix up the real and the complex
// type and fail, are written anew, and Atan2's is reduced under broadcasting.
//
// Checked against Python's gradients, complex and real: tests/python/test_registries.py.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

struct ConjugatedOp {
  const char* op;
  // TensorFlow's gradient is taken at the conjugates of the op's first `conjugated_inputs`
  // inputs (the gradient function's arguments at the same positions, whatever their names:
  // x, y in TensorFlow's function gradients, x_0, x_1 in converted client ones, unify.h); 0 for
  // BatchMatMul, whose adjoints already conjugate.
  int conjugated_inputs;
  // TensorFlow's gradient refuses a complex T outright ("MatMul gradient for complex is not
  // supported yet") although its nodes are type-generic: built for float, instantiated for T.
  bool refuses_complex;
};

// Python's gradient of each conjugates exactly these inputs (math_grad.py). Python's gradients
// of Xlogy, Xdivy and Xlog1py do not conjugate; TensorFlow's C++ ones agree with them and stay.
constexpr ConjugatedOp kConjugatedOps[] = {
    {"Acos", 1, false},    {"Asin", 1, false},       {"Atan", 1, false},  {"Atanh", 1, false},
    {"Cos", 1, false},     {"Cosh", 1, false},       {"Exp", 1, false},   {"Expm1", 1, false},
    {"Inv", 1, false},     {"Log", 1, false},        {"Log1p", 1, false}, {"Reciprocal", 1, false},
    {"Rsqrt", 1, false},   {"Sigmoid", 1, false},    {"Sin", 1, false},   {"Sinh", 1, false},
    {"Sqrt", 1, false},    {"Square", 1, false},     {"Tan", 1, false},   {"Tanh", 1, false},
    {"Div", 2, false},     {"DivNoNan", 2, false},   {"Pow", 2, false},   {"RealDiv", 2, false},
    {"MatMul", 2, true},   {"BatchMatMul", 0, true}, {"BatchMatMulV2", 0, true},
    {"Prod", 1, false},  // its input, not the axes; found by the audit (scripts/audit_gradients.py)
};
constexpr int kNumConjugatedOps = sizeof(kConjugatedOps) / sizeof(kConjugatedOps[0]);

// TensorFlow's replaced gradient of `c.op`, for a complex T taken at conj(inputs).
absl::Status ConjugatedTfGradient(const ConjugatedOp& c, const AttrSlice& attrs,
                                  FunctionDef* g) {
  gradient::Creator tensorflows;
  if (!FindReplacedTfGradient(c.op, &tensorflows)) {
    return absl::NotFoundError(
        absl::StrCat(c.op, ": TensorFlow's gradient, which tf_ext's builds on, is missing"));
  }
  DataType t;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "T", &t));
  if (!DataTypeIsComplex(t)) return tensorflows(attrs, g);
  if (!c.refuses_complex) {
    TF_RETURN_IF_ERROR(tensorflows(attrs, g));
  } else {
    // Its nodes read T as "$T": built for float, the function still runs for complex T.
    AttrValueMap as_float(attrs.begin(), attrs.end());
    as_float["T"].set_type(DT_FLOAT);
    TF_RETURN_IF_ERROR(tensorflows(AttrSlice(&as_float), g));
  }
  std::vector<std::string> conjugated;  // the gradient function's arguments
  for (int i = 0; i < c.conjugated_inputs; ++i) {
    if (i >= g->signature().input_arg_size()) {
      return absl::InternalError(absl::StrCat(c.op, ": TensorFlow's gradient has ",
                                              g->signature().input_arg_size(), " arguments"));
    }
    conjugated.push_back(g->signature().input_arg(i).name());
  }
  for (const std::string& arg : conjugated) {
    const std::string node = "conj_" + arg;
    TF_RETURN_IF_ERROR(grad::RedirectArgumentReads(g, arg, node + ":output:0"));
    NodeDef* n = g->add_node_def();
    n->set_name(node);
    n->set_op("Conj");
    n->add_input(arg);
    AddNodeAttr("T", t, n);
  }
  return absl::OkStatus();
}

template <int kIndex>
absl::Status ConjugatedGrad(const AttrSlice& attrs, FunctionDef* g) {
  return ConjugatedTfGradient(kConjugatedOps[kIndex], attrs, g);
}

template <int... kIndex>
bool DeclareConjugatedOps(std::integer_sequence<int, kIndex...>) {
  constexpr GradientFn kGradients[] = {&ConjugatedGrad<kIndex>...};
  for (int i = 0; i < kNumConjugatedOps; ++i) {
    const ConjugatedOp& c = kConjugatedOps[i];
    const char* rule =
        c.conjugated_inputs == 0
            ? "TensorFlow's gradient, also for a complex T"
        : c.conjugated_inputs == 1
            ? "TensorFlow's gradient; for a complex T taken at the conjugate of its first input "
              "(element-wise: d(x) = d(y) * conj(f'(x)))"
            : "TensorFlow's gradient; for a complex T taken at conj(x), conj(y)";
    const char* defect =
        c.refuses_complex
            ? "TensorFlow 2.21's function gradient refuses a complex T ('MatMul gradient for "
              "complex is not supported yet'), where Python's gradient runs"
            : "TensorFlow 2.21's function gradient does not conjugate: for a complex input it "
              "is d(y) * f'(x), not Python's d(y) * conj(f'(x))";
    OpDeclaration(c.op)
        .Doc("An element-wise or matrix op on real or complex numbers (TensorFlow's op).")
        .Gradient(kGradients[i], rule)
        .Overrides(defect)
        .Register();
  }
  return true;
}

// Asinh(x): d(x) = d(y) / cosh(conj(y)); Acosh(x): d(x) = d(y) / sinh(conj(y)) (Python's
// _AsinhGrad, _AcoshGrad). `derivative` is cosh or sinh.
absl::Status InverseHyperbolicGrad(const char* op, const char* derivative, const AttrSlice& attrs,
                                   FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  b.Add({{"f_y"}, derivative, {b.Conj("y")}, t});
  b.Return("x", b.Add({{"dx"}, "RealDiv", {grad::GradName("y"), "f_y"}, t}));
  return b.Build(g);
}

absl::Status AsinhGrad(const AttrSlice& attrs, FunctionDef* g) {
  return InverseHyperbolicGrad("Asinh", "Cosh", attrs, g);
}

absl::Status AcoshGrad(const AttrSlice& attrs, FunctionDef* g) {
  return InverseHyperbolicGrad("Acosh", "Sinh", attrs, g);
}

// Real(input) = Re(input): d(input) = d(output) + 0i; Imag(input) = Im(input): d(input) =
// 0 + d(output) i (Python's _RealGrad, _ImagGrad).
absl::Status PartGrad(const char* op, bool real_part, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const std::string dy = grad::GradName("output");
  b.Add({{"zeros"}, "ZerosLike", {dy}, {{"T", grad::Placeholder("Tout")}}});
  const std::string re = real_part ? dy : "zeros", im = real_part ? "zeros" : dy;
  b.Return("input", b.Add({{"d_in"}, "Complex", {re, im},
                           {{"T", grad::Placeholder("Tout")}, {"Tout", grad::Placeholder("T")}}}));
  return b.Build(g);
}

absl::Status RealGrad(const AttrSlice& attrs, FunctionDef* g) {
  return PartGrad("Real", /*real_part=*/true, attrs, g);
}

absl::Status ImagGrad(const AttrSlice& attrs, FunctionDef* g) {
  return PartGrad("Imag", /*real_part=*/false, attrs, g);
}

// Angle(input) = atan2(Im, Re): d(input) = -(d(output) + 0i) / (Im + Re i) (Python's
// _AngleGrad).
absl::Status AngleGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Angle", attrs);
  const grad::NodeAttrs to_real = {{"T", grad::Placeholder("T")},
                                   {"Tout", grad::Placeholder("Tout")}};
  const grad::NodeAttrs to_complex = {{"T", grad::Placeholder("Tout")},
                                      {"Tout", grad::Placeholder("T")}};
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dy = grad::GradName("output");
  b.Add({{"re"}, "Real", {"input"}, to_real});
  b.Add({{"im"}, "Imag", {"input"}, to_real});
  b.Add({{"im_re"}, "Complex", {"im", "re"}, to_complex});         // Im + Re i
  b.Add({{"inv"}, "Reciprocal", {"im_re"}, t});
  b.Add({{"zeros"}, "ZerosLike", {dy}, {{"T", grad::Placeholder("Tout")}}});
  b.Add({{"dy_c"}, "Complex", {dy, "zeros"}, to_complex});         // d(output) + 0i
  b.Add({{"neg_dy_c"}, "Neg", {"dy_c"}, t});
  b.Return("input", b.Add({{"d_in"}, "Mul", {"neg_dy_c", "inv"}, t}));
  return b.Build(g);
}

// Complex(real, imag) = real + imag i, broadcasting: d(real) = Re(d(out)), d(imag) =
// Im(d(out)), each summed back to its input's shape (Python's _ComplexGrad).
absl::Status ComplexGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Complex", attrs);
  const grad::NodeAttrs to_real = {{"T", grad::Placeholder("Tout")},
                                   {"Tout", grad::Placeholder("T")}};
  const std::string dz = grad::GradName("out");
  b.Add({{"re"}, "Real", {dz}, to_real});
  b.Add({{"im"}, "Imag", {dz}, to_real});
  const auto [d_real, d_imag] = b.ReduceForBroadcast("real", "imag", "re", "im");
  b.Return("real", d_real);
  b.Return("imag", d_imag);
  return b.Build(g);
}

// Atan2(y, x) = angle of (x, y): d(y) = d(z) x / (x^2 + y^2), d(x) = -d(z) y / (x^2 + y^2),
// each summed back to its input's shape (Python's _Atan2Grad).
absl::Status Atan2Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Atan2", attrs);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dz = grad::GradName("z");
  b.Add({{"x2"}, "Square", {"x"}, t});
  b.Add({{"y2"}, "Square", {"y"}, t});
  b.Add({{"r2"}, "AddV2", {"x2", "y2"}, t});
  b.Add({{"dz_r2"}, "RealDiv", {dz, "r2"}, t});     // d(z) / (x^2 + y^2)
  b.Add({{"gy"}, "Mul", {"x", "dz_r2"}, t});
  b.Add({{"y_dz_r2"}, "Mul", {"y", "dz_r2"}, t});
  b.Add({{"gx"}, "Neg", {"y_dz_r2"}, t});
  const auto [dy, dx] = b.ReduceForBroadcast("y", "x", "gy", "gx");
  b.Return("y", dy);
  b.Return("x", dx);
  return b.Build(g);
}

}  // namespace

static const bool conjugated_ops_declared [[maybe_unused]] =
    DeclareConjugatedOps(std::make_integer_sequence<int, kNumConjugatedOps>());

TF_EXT_DECLARE_OP("Asinh")
    .Doc("The inverse hyperbolic sine, element-wise (TensorFlow's op).")
    .Gradient(&AsinhGrad, "d(x) = d(y) / cosh(conj(y))")
    .Overrides("TensorFlow 2.21's function gradient multiplies d(y) by cosh(y) instead of "
               "dividing by it: wrong for every dtype, real ones included")
    .Register();
TF_EXT_DECLARE_OP("Acosh")
    .Doc("The inverse hyperbolic cosine, element-wise (TensorFlow's op).")
    .Gradient(&AcoshGrad, "d(x) = d(y) / sinh(conj(y))")
    .Overrides("TensorFlow 2.21's function gradient multiplies d(y) by sinh(y) instead of "
               "dividing by it: wrong for every dtype, real ones included")
    .Register();

constexpr char kComplexPairDefect[] =
    "TensorFlow 2.21's function gradient types d(output) as the complex input and builds a "
    "float32 zero: it fails to instantiate for every dtype ('expected type complex128 != "
    "float')";
TF_EXT_DECLARE_OP("Real")
    .Doc("The real part of a complex tensor (TensorFlow's op).")
    .Gradient(&RealGrad, "d(input) = d(output) + 0i")
    .Overrides(kComplexPairDefect)
    .Register();
TF_EXT_DECLARE_OP("Imag")
    .Doc("The imaginary part of a complex tensor (TensorFlow's op).")
    .Gradient(&ImagGrad, "d(input) = 0 + d(output) i")
    .Overrides(kComplexPairDefect)
    .Register();
TF_EXT_DECLARE_OP("Angle")
    .Doc("The argument of a complex tensor (TensorFlow's op).")
    .Gradient(&AngleGrad, "d(input) = -(d(output) + 0i) / (Im(input) + Re(input) i)")
    .Overrides(kComplexPairDefect)
    .Register();
TF_EXT_DECLARE_OP("Complex")
    .Doc("A complex tensor from its real and imaginary parts (TensorFlow's op).")
    .Gradient(&ComplexGrad, "d(real) = Re(d(out)), d(imag) = Im(d(out)), each reduced to its "
                            "input's shape")
    .Overrides("TensorFlow 2.21's function gradient types d(out) as the real parts: it fails "
               "to instantiate for every dtype ('expected type double != float')")
    .Register();
// SquaredDifference computes conj(x - y) (x - y), real-valued for a complex T: TensorFlow's
// function gradient (as Python's) is 2 d(z) (x - y), the derivative for a real d(z); its client
// one conjugates x - y as for a holomorphic op, so TF_AddGradients disagreed with every other
// door (found by the audit's doors, scripts/audit_gradients.py). tf_ext's entry is TensorFlow's
// function gradient, now in both registries.
absl::Status SquaredDifferenceGrad(const AttrSlice& attrs, FunctionDef* g) {
  gradient::Creator tensorflows;
  if (!FindReplacedTfGradient("SquaredDifference", &tensorflows)) {
    return absl::NotFoundError(
        "SquaredDifference: TensorFlow's gradient, which tf_ext's builds on, is missing");
  }
  return tensorflows(attrs, g);
}

TF_EXT_DECLARE_OP("SquaredDifference")
    .Doc("conj(x - y) (x - y), element-wise with broadcasting (TensorFlow's op).")
    .Gradient(&SquaredDifferenceGrad, "TensorFlow's function gradient: d(x) = 2 d(z) (x - y), "
                                      "d(y) = -d(x), each reduced to its input's shape")
    .Overrides("TensorFlow 2.21's client gradient (cc/gradients/math_grad.cc, TF_AddGradients) "
               "conjugates x - y: for a complex T it is 2 d(z) conj(x - y), not its function "
               "gradient's (and Python's) 2 d(z) (x - y)")
    .Register();
TF_EXT_DECLARE_OP("Atan2")
    .Doc("The angle of (x, y), element-wise with broadcasting (TensorFlow's op).")
    .Gradient(&Atan2Grad, "d(y) = d(z) x / (x^2 + y^2), d(x) = -d(z) y / (x^2 + y^2), each "
                          "reduced to its input's shape")
    .Overrides("TensorFlow 2.21's gradient (cc/gradients/math_grad.cc) does not sum over "
               "broadcast dimensions: under broadcasting the gradient has the output's shape")
    .Register();

}  // namespace tensorflow::tf_ext
