#include "tf_ext/graph/runtime/numeric_check.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/platform/env_time.h"
#include "tf_ext/graph/io/feeds.h"
#include "tf_ext/graph/runtime/session_options.h"
#include "tf_ext/grads/specialize.h"
#include "tf_ext/graph/io/tensor_doubles.h"

namespace tensorflow::tf_ext {
namespace {

double Seconds() { return EnvTime::NowMicros() * 1e-6; }

double Sum(const Tensor& t) {
  double s = 0;
  for (double v : ToDoubles(t)) s += v;
  return s;
}


}  // namespace

absl::Status NumericCheck(const GradientRequest& request, const GradientResult& result,
                          const NumericCheckOptions& options, NumericCheckResult* check) {
  const double start = Seconds();
  *check = NumericCheckResult();
  // One pass finds the surrogate nodes; the forward graph (its weights) is copied only if
  // there are any, and only their nodes are rewritten.
  std::vector<std::pair<int, FunctionDef>> surrogates;
  for (int i = 0; i < request.graph.node_size(); ++i) {
    FunctionDef surrogate;
    if (SpecializedSurrogateForward(request.graph.node(i), &surrogate).ok()) {
      surrogates.emplace_back(i, std::move(surrogate));
    }
  }
  GraphDef numeric;
  if (!surrogates.empty()) numeric = request.graph;
  std::set<std::string> in_library;
  for (auto& [index, surrogate] : surrogates) {
    NodeDef& n = *numeric.mutable_node(index);
    check->surrogates.push_back(absl::StrCat(n.op(), " (node '", n.name(), "')"));
    const std::string fname = surrogate.signature().name();
    if (in_library.insert(fname).second) *numeric.mutable_library()->add_function() = surrogate;
    n.set_op(fname);
    n.clear_attr();
  }
  Session* session = result.session.get();
  std::unique_ptr<Session> numeric_session;
  if (!check->surrogates.empty()) {
    numeric_session.reset(NewSession(BackwardSessionOptions(options.optimize_graph)));
    if (numeric_session == nullptr) return absl::InternalError("could not create a Session");
    TF_RETURN_IF_ERROR(numeric_session->Create(numeric));
    session = numeric_session.get();
  }
  std::mt19937_64 gen(options.seed);
  for (size_t i = 0; i < request.xs.size(); ++i) {
    const Tensor& base = result.xs[i];
    if (!IsFloatingPoint(base.dtype())) continue;
    const double h = options.delta > 0 ? options.delta : (base.dtype() == DT_DOUBLE ? 1e-6 : 1e-3);
    const std::string name = request.xs[i].ToString();
    // Feeding x overrides whatever computed it (placeholder or intermediate tensor).
    auto feeds = SessionFeeds(request, session == result.session.get() ? &result : nullptr);
    feeds.erase(std::remove_if(feeds.begin(), feeds.end(),
                               [&](const auto& f) { return f.first == name; }),
                feeds.end());
    feeds.push_back({name, Tensor()});
    const std::vector<double> base_values = ToDoubles(base);
    const std::vector<double> grad_values = ToDoubles(result.grads[i]);
    const int64_t n = base.NumElements();
    const int projections = options.projections >= 0 ? options.projections : (n <= 256 ? 0 : 16);
    if (projections > 0) check->projections = projections;
    // Elementwise: direction e_k. Projection: direction v in {-1, +1}^n; d sum(y) along v is
    // <grad, v>.
    const int64_t directions = projections > 0 ? projections : n;
    std::vector<double> v(n);
    for (int64_t k = 0; k < directions; ++k) {
      if (projections > 0) {
        for (double& e : v) e = (gen() & 1) ? 1.0 : -1.0;
      }
      double f[2];
      for (int side = 0; side < 2; ++side) {
        std::vector<double> x = base_values;
        const double step = side == 0 ? h : -h;
        if (projections > 0) {
          for (int64_t e = 0; e < n; ++e) x[e] += step * v[e];
        } else {
          x[k] += step;
        }
        auto fed = FromDoubles(base.dtype(), base.shape(), x);
        if (!fed.ok()) return fed.status();
        feeds.back().second = *fed;
        if (name == request.y.ToString()) {  // x is y: a fed tensor cannot be fetched
          f[side] = Sum(*fed);
          continue;
        }
        std::vector<Tensor> y;
        TF_RETURN_IF_ERROR(session->Run(feeds, {request.y.ToString()}, {}, &y));
        f[side] = Sum(y[0]);
      }
      const double num = (f[0] - f[1]) / (2 * h);
      double sym = 0;
      if (projections > 0) {
        for (int64_t e = 0; e < n; ++e) sym += grad_values[e] * v[e];
      } else {
        sym = grad_values[k];
      }
      const double abs_err = std::abs(sym - num);
      const double rel_err = abs_err / std::max(1.0, std::abs(num));
      ++check->elements;
      check->max_abs_error = std::max(check->max_abs_error, abs_err);
      if (rel_err >= check->max_rel_error) {
        check->max_rel_error = rel_err;
        check->worst_x = static_cast<int>(i);
        check->worst_element = k;
        check->worst_symbolic = sym;
        check->worst_numeric = num;
      }
    }
  }
  check->seconds = Seconds() - start;
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext
