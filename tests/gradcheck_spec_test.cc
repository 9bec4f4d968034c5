// The spec format of tf_ext_gradcheck (tf_ext/tools/gradcheck_spec.h): configurations, shaped
// values, symmetric positive definite matrices, complex inputs, shape attrs, paired precisions,
// and the errors that name a bad token.
#include "tf_ext/tools/gradcheck_spec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <complex>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ext/graph/io/tensor_doubles.h"

namespace tensorflow::tf_ext::tools {
namespace {

TEST(GradcheckSpec, EachLineOfAnOpIsAConfiguration) {
  auto configs = ParseSpecConfigs(
      "# comment\n"
      "Foo x=2x3@-1:1 attr.k=1   # first\n"
      "Bar y=scalar:2\n"
      "Foo x=4 attr.k=2 nondiff=w symmetric=x ignore_outputs=s,t delta=1e-3 tol=2e-3 "
      "dtypes=complex64\n");
  ASSERT_TRUE(configs.ok()) << configs.status();
  ASSERT_EQ(configs->at("Foo").size(), 2u);
  EXPECT_EQ(configs->at("Foo")[0].attrs.at("k"), "1");
  EXPECT_EQ(configs->at("Foo")[1].attrs.at("k"), "2");
  EXPECT_EQ(configs->at("Foo")[1].inputs.at("x").shape, std::vector<int64_t>({4}));
  EXPECT_EQ(configs->at("Foo")[1].symmetric, std::vector<std::string>({"x"}));
  EXPECT_EQ(configs->at("Foo")[1].ignore_outputs, std::vector<std::string>({"s", "t"}));
  EXPECT_EQ(configs->at("Foo")[1].dtypes, std::vector<std::string>({"complex64"}));
  EXPECT_EQ(configs->at("Foo")[1].delta, 1e-3);
  EXPECT_EQ(configs->at("Foo")[1].tol, 2e-3);
  EXPECT_EQ(configs->at("Foo")[0].delta, 0);
  EXPECT_FALSE(ParseSpecs("Foo tol=-1").ok());
  EXPECT_FALSE(ParseSpecs("Foo delta=x").ok());
  EXPECT_EQ(configs->at("Bar").size(), 1u);
  // ParseSpecs: the first configuration of each op.
  auto first = ParseSpecs("Foo attr.k=1\nFoo attr.k=2\n");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->at("Foo").attrs.at("k"), "1");
}

TEST(GradcheckSpec, ShapedValues) {
  auto specs = ParseSpecs("Op a=values[3x2]:0,1,1,0,2,1 b=values:5,6");
  ASSERT_TRUE(specs.ok()) << specs.status();
  const InputSpec& a = specs->at("Op").inputs.at("a");
  EXPECT_EQ(a.kind, InputSpec::kValues);
  EXPECT_EQ(a.shape, std::vector<int64_t>({3, 2}));
  auto t = MakeInput(a, DT_INT64, {}, 1);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape(), TensorShape({3, 2}));
  EXPECT_EQ(t->flat<int64_t>()(4), 2);
  EXPECT_EQ(specs->at("Op").inputs.at("b").shape, std::vector<int64_t>({2}));
  // The count must fit the shape; the shape must parse.
  for (const char* bad : {"Op a=values[3x2]:1,2", "Op a=values[3x]:1,2,3", "Op a=values[2:1,2",
                          "Op a=valuesx:1"}) {
    auto s = ParseSpecs(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto s = ParseSpecs("Op a=values[3x2]:1,2");
  EXPECT_NE(s.status().message().find("values[3x2]:1,2"), std::string::npos) << s.status();
}

// M M^T / n + I: symmetric, eigenvalues >= 1, so a Cholesky factorisation has pivots >= 1.
void ExpectSpd(const std::vector<std::complex<double>>& a, int n) {
  std::vector<std::complex<double>> l(n * n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) {
      EXPECT_NEAR(std::abs(a[i * n + j] - std::conj(a[j * n + i])), 0, 1e-12) << i << "," << j;
    }
    double d = a[j * n + j].real();
    for (int k = 0; k < j; ++k) d -= std::norm(l[j * n + k]);
    EXPECT_GE(d, 1 - 1e-9) << "pivot " << j;
    l[j * n + j] = std::sqrt(d);
    for (int i = j + 1; i < n; ++i) {
      std::complex<double> s = a[i * n + j];
      for (int k = 0; k < j; ++k) s -= l[i * n + k] * std::conj(l[j * n + k]);
      l[i * n + j] = s / l[j * n + j];
    }
  }
}

TEST(GradcheckSpec, SymmetricPositiveDefiniteMatrices) {
  auto specs = ParseSpecs("Op a=spd:3 b=spd:2x4x4");
  ASSERT_TRUE(specs.ok()) << specs.status();
  const InputSpec& a = specs->at("Op").inputs.at("a");
  EXPECT_EQ(a.kind, InputSpec::kSpd);
  EXPECT_EQ(a.shape, std::vector<int64_t>({3, 3}));
  auto t = MakeInput(a, DT_DOUBLE, {}, 7);
  ASSERT_TRUE(t.ok());
  std::vector<std::complex<double>> m;
  for (double v : ToDoubles(*t)) m.push_back(v);
  ExpectSpd(m, 3);
  // Hermitian positive definite for complex dtypes, every matrix of a batch.
  auto b = MakeInput(specs->at("Op").inputs.at("b"), DT_COMPLEX128, {}, 8);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->shape(), TensorShape({2, 4, 4}));
  bool has_imaginary = false;
  for (int batch = 0; batch < 2; ++batch) {
    std::vector<std::complex<double>> c;
    for (int i = 0; i < 16; ++i) c.push_back(b->flat<complex128>()(batch * 16 + i));
    for (const auto& v : c) has_imaginary = has_imaginary || v.imag() != 0;
    ExpectSpd(c, 4);
  }
  EXPECT_TRUE(has_imaginary);
  EXPECT_FALSE(ParseSpecs("Op a=spd:2x3").ok());  // not square
}

TEST(GradcheckSpec, ComplexInputsHaveRandomRealAndImaginaryParts) {
  auto specs = ParseSpecs("Op x=2x3@-1:1 v=values:1,2");
  ASSERT_TRUE(specs.ok());
  auto t = MakeInput(specs->at("Op").inputs.at("x"), DT_COMPLEX64, {}, 3);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->dtype(), DT_COMPLEX64);
  std::vector<double> reals = ToReals(*t);
  ASSERT_EQ(reals.size(), 12u);
  std::sort(reals.begin(), reals.end());
  EXPECT_TRUE(std::adjacent_find(reals.begin(), reals.end()) == reals.end());  // distinct
  EXPECT_GE(reals.front(), -1);
  EXPECT_LE(reals.back(), 1);
  auto v = MakeInput(specs->at("Op").inputs.at("v"), DT_COMPLEX128, {}, 3);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->flat<complex128>()(1), complex128(2, 0));  // values: real parts
}

TEST(GradcheckSpec, ShapeAttrs) {
  OpDef::AttrDef def;
  def.set_name("shape");
  def.set_type("shape");
  auto v = ParseAttrValue(def, "[2,-1,3]");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->shape().dim_size(), 3);
  EXPECT_EQ(v->shape().dim(1).size(), -1);
  EXPECT_FALSE(ParseAttrValue(def, "2,3").ok());
}

// A second type attr the spec leaves follows the checked dtype's precision (RFFT's Tcomplex,
// Eig's Tout); one the spec sets stays.
TEST(GradcheckSpec, PairedTypeAttrsFollowThePrecision) {
  const OpDef* rfft = nullptr;
  const OpDef* eig = nullptr;
  ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef("RFFT", &rfft).ok());
  ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef("Eig", &eig).ok());
  auto attr = [](const OpInstance& in, const std::string& name) {
    for (const auto& [n, v] : in.attrs) {
      if (n == name) return v.type();
    }
    return DT_INVALID;
  };
  auto specs = ParseSpecConfigs("RFFT input=6 fft_length=values:6\n"
                                "RFFT input=6 fft_length=values:6 attr.Tcomplex=complex64\n");
  ASSERT_TRUE(specs.ok());
  const auto& rf = specs->at("RFFT");
  OpInstance d = BuildOpInstance(*rfft, &rf[0], "Treal", DT_DOUBLE, 1);
  ASSERT_EQ(d.problem, "");
  EXPECT_EQ(attr(d, "Tcomplex"), DT_COMPLEX128);
  EXPECT_EQ(attr(BuildOpInstance(*rfft, &rf[0], "Treal", DT_FLOAT, 1), "Tcomplex"), DT_COMPLEX64);
  EXPECT_EQ(attr(BuildOpInstance(*rfft, &rf[1], "Treal", DT_DOUBLE, 1), "Tcomplex"),
            DT_COMPLEX64);
  EXPECT_EQ(attr(BuildOpInstance(*eig, nullptr, "T", DT_COMPLEX128, 1), "Tout"), DT_COMPLEX128);
  EXPECT_EQ(attr(BuildOpInstance(*eig, nullptr, "T", DT_FLOAT, 1), "Tout"), DT_COMPLEX64);
}

}  // namespace
}  // namespace tensorflow::tf_ext::tools
