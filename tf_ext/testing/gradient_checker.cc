#include "tf_ext/testing/gradient_checker.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/public/session.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/grads/specialize.h"
#include "tf_ext/graph/io/tensor_doubles.h"

namespace tensorflow::tf_ext::test {
namespace {

// Values the checker built itself: dtype and size are right by construction. Complex
// elements are two reals each (tensor_doubles.h, FromReals).
Tensor MakeTensor(DataType dtype, const TensorShape& shape, const std::vector<double>& v) {
  return *FromReals(dtype, shape, v);
}

NodeDef Placeholder(const std::string& name, DataType dt) {
  NodeDef n;
  n.set_name(name);
  n.set_op("Placeholder");
  (*n.mutable_attr())["dtype"].set_type(dt);
  return n;
}

// The 64-bit type of a differentiable dtype's kind: double, or complex128 for complex.
DataType Wide(DataType t) { return IsComplexType(t) ? DT_COMPLEX128 : DT_DOUBLE; }

bool Allows(const OpDef::AttrDef& attr, DataType t) {
  if (!attr.has_allowed_values()) return true;
  const auto& types = attr.allowed_values().list().type();
  return std::find(types.begin(), types.end(), t) != types.end();
}

bool IsSupported(DataType t) { return IsNumeric(t) || IsComplexType(t); }

// An all-zero tensor (numeric, complex or bool): the incoming gradient of an output that is
// not compared.
Tensor Zeros(DataType dtype, const TensorShape& shape) {
  if (IsSupported(dtype)) {
    const int64_t reals = shape.num_elements() * RealsPerElement(dtype);
    return MakeTensor(dtype, shape, std::vector<double>(reals, 0.0));
  }
  Tensor t(dtype, shape);
  t.flat<bool>().setZero();
  return t;
}

// Whether output j of `node` (an op of `def`) belongs to an output arg named in `names`.
bool OutputNamed(const OpDef& def, const NodeDef& node, size_t j,
                 const std::vector<std::string>& names) {
  NameRangeMap ranges;
  if (!NameRangesForNode(node, def, nullptr, &ranges).ok()) return false;
  for (const std::string& name : names) {
    auto it = ranges.find(name);
    if (it != ranges.end() && static_cast<int>(j) >= it->second.first &&
        static_cast<int>(j) < it->second.second) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string GradientCheckResult::ToString() const {
  std::string s = absl::StrCat(op_type, ": ", rows, " rows x ", columns, " columns, max abs ",
                               max_abs_error, ", max rel ", max_rel_error);
  if (worst_element >= 0) {
    absl::StrAppend(&s, " at input '", worst_input, "'[", worst_element, "] (", worst_row,
                    ": symbolic ", worst_symbolic, ", numeric ", worst_numeric, ")");
  }
  if (nondiff_max_abs != 0) {
    absl::StrAppend(&s, "; non-differentiable inputs got gradient up to ", nondiff_max_abs);
  }
  absl::StrAppend(&s, numeric_float64 ? " [numeric in float64" : " [numeric in input dtype",
                  numeric_reference.empty() ? "" : ", of the ", numeric_reference, "]");
  return s;
}

namespace {

// The forward node "op": given attrs, type attrs inferred from the inputs, then defaults; its
// input and output types, which the checker supports.
absl::Status ForwardNode(const std::string& op_type, const OpAttrs& attrs,
                         const std::vector<Tensor>& inputs, const OpDef& op_def, NodeDef* op,
                         DataTypeVector* in_types, DataTypeVector* out_types) {
  const int n_in = op_def.input_arg_size();
  op->set_name("op");
  op->set_op(op_type);
  for (const auto& [name, value] : attrs) (*op->mutable_attr())[name] = value.proto;
  for (int i = 0; i < n_in; ++i) {
    op->add_input(absl::StrCat("x", i));
    const OpDef::ArgDef& arg = op_def.input_arg(i);
    if (!arg.number_attr().empty() || !arg.type_list_attr().empty()) {
      return absl::UnimplementedError(
          absl::StrCat("CheckGradient(", op_type, "): list input '", arg.name(), "'"));
    }
    if (!arg.type_attr().empty() && !op->attr().contains(arg.type_attr())) {
      (*op->mutable_attr())[arg.type_attr()].set_type(inputs[i].dtype());
    }
  }
  AddDefaultsToNodeDef(op_def, op);
  TF_RETURN_IF_ERROR(InOutTypesForNode(*op, op_def, in_types, out_types));
  for (DataType t : *out_types) {
    if (!IsSupported(t) && t != DT_BOOL) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CheckGradient(", op_type, "): outputs of type ", DataTypeString(t), " are not supported"));
    }
  }
  for (int i = 0; i < n_in; ++i) {
    if (!IsSupported((*in_types)[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("CheckGradient(", op_type, "): input '", op_def.input_arg(i).name(),
                       "' has unsupported type ", DataTypeString((*in_types)[i])));
    }
    if ((*in_types)[i] != inputs[i].dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CheckGradient(", op_type, "): input '", op_def.input_arg(i).name(), "' must be ",
          DataTypeString((*in_types)[i]), ", got ", DataTypeString(inputs[i].dtype())));
    }
  }
  return absl::OkStatus();
}

// The numeric twin "nop" of `op`: every floating type attr switched to double (complex ones to
// complex128) when *f64 and the op allows it (*f64 cleared where it does not).
NodeDef NumericTwin(const NodeDef& op, const OpDef& op_def, bool* f64) {
  NodeDef nop = op;
  nop.set_name("nop");
  for (const OpDef::AttrDef& a : op_def.attr()) {
    if (a.type() != "type") continue;
    const DataType t = op.attr().at(a.name()).type();
    if (IsDifferencedType(t) && !Allows(a, Wide(t))) *f64 = false;
  }
  if (*f64) {
    for (const OpDef::AttrDef& a : op_def.attr()) {
      if (a.type() != "type") continue;
      const DataType t = op.attr().at(a.name()).type();
      if (IsDifferencedType(t)) (*nop.mutable_attr())[a.name()].set_type(Wide(t));
    }
    // Allowed by the OpDef but without a CPU kernel (AvgPool3DGrad): the inputs' dtype.
    if (!KernelDefAvailable(DEVICE_CPU, nop)) {
      *f64 = false;
      nop = op;
      nop.set_name("nop");
    }
  }
  return nop;
}

// The graph the check runs: placeholders x<i> (the inputs), nx<i> (the numeric twin's) and
// dy<j> (incoming gradients), the op, its numeric twin (or the twin's surrogate forward, a
// function call) and their SymbolicGradient node "grad".
GraphDef CheckGraph(const NodeDef& op, const DataTypeVector& in_types,
                    const DataTypeVector& out_types, const GradientCheckOptions& options,
                    NodeDef* nop, const DataTypeVector& nin_types, GradientCheckResult* result) {
  const int n_in = static_cast<int>(in_types.size());
  GraphDef graph;
  NameAttrList f;
  f.set_name(op.op());
  for (const auto& kv : op.attr()) (*f.mutable_attr())[kv.first] = kv.second;
  NodeDef grad;
  grad.set_name("grad");
  grad.set_op("SymbolicGradient");
  AttrValue tin, tout;
  for (int i = 0; i < n_in; ++i) {
    *graph.add_node() = Placeholder(absl::StrCat("x", i), in_types[i]);
    *graph.add_node() = Placeholder(absl::StrCat("nx", i), nin_types[i]);
    nop->set_input(i, absl::StrCat("nx", i));
    grad.add_input(absl::StrCat("x", i));
    tin.mutable_list()->add_type(in_types[i]);
    tout.mutable_list()->add_type(in_types[i]);
  }
  for (size_t j = 0; j < out_types.size(); ++j) {
    *graph.add_node() = Placeholder(absl::StrCat("dy", j), out_types[j]);
    grad.add_input(absl::StrCat("dy", j));
    tin.mutable_list()->add_type(out_types[j]);
  }
  (*grad.mutable_attr())["Tin"] = tin;
  (*grad.mutable_attr())["Tout"] = tout;
  *(*grad.mutable_attr())["f"].mutable_func() = f;
  result->numeric_reference = "op";
  if (options.use_surrogate_forward) {
    FunctionDef surrogate;
    if (SpecializedSurrogateForward(*nop, &surrogate).ok()) {
      // Difference the surrogate (a function call node) instead of the op itself.
      result->numeric_reference = "surrogate forward " + surrogate.signature().name();
      nop->set_op(surrogate.signature().name());
      nop->clear_attr();
      *graph.mutable_library()->add_function() = surrogate;
    }
  }
  *graph.add_node() = op;
  *graph.add_node() = *nop;
  *graph.add_node() = grad;
  return graph;
}

// Row space: the concatenation of every compared floating-point output, a complex element
// being two rows (its real and imaginary parts: incoming gradients 1 and i); the rows are its
// unit vectors, or random projections when there are more than options.max_rows.
struct RowSpace {
  std::vector<bool> compared;      // per output
  std::vector<int64_t> out_offset;  // per output, its first row
  int64_t total_out = 0;
  bool one_hot = true;
  std::vector<std::vector<double>> rows;

  std::string Name(int64_t r) const {
    if (!one_hot) return absl::StrCat("projection ", r);
    for (size_t j = compared.size(); j-- > 0;) {
      if (compared[j] && r >= out_offset[j]) {
        return absl::StrCat("output[", j, "][", r - out_offset[j], "]");
      }
    }
    return absl::StrCat("row ", r);
  }
};

RowSpace MakeRowSpace(const OpDef& op_def, const NodeDef& op, const DataTypeVector& out_types,
                      const std::vector<Tensor>& outs, const GradientCheckOptions& options) {
  RowSpace space;
  space.compared.resize(out_types.size());
  for (size_t j = 0; j < out_types.size(); ++j) {
    space.compared[j] = IsDifferencedType(out_types[j]) &&
                        !OutputNamed(op_def, op, j, options.ignored_outputs);
  }
  space.out_offset.assign(out_types.size(), 0);
  for (size_t j = 0; j < out_types.size(); ++j) {
    space.out_offset[j] = space.total_out;
    if (space.compared[j]) {
      space.total_out += outs[j].NumElements() * RealsPerElement(out_types[j]);
    }
  }
  space.one_hot = space.total_out <= options.max_rows;
  const int64_t n_rows = space.one_hot ? space.total_out : options.num_projections;
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<double> normal;
  space.rows.assign(n_rows, std::vector<double>(space.total_out, 0.0));
  for (int64_t r = 0; r < n_rows; ++r) {
    if (space.one_hot) {
      space.rows[r][r] = 1.0;
    } else {
      for (double& v : space.rows[r]) v = normal(rng);
    }
  }
  return space;
}

// The symbolic gradient's rows: (*sym)[r][i] = (v_r^T J) restricted to input i, v_r the
// space's row r fed as the incoming gradients.
absl::Status SymbolicRows(Session* session, const std::string& op_type, const OpDef& op_def,
                          const std::vector<Tensor>& inputs,
                          const std::vector<std::pair<std::string, Tensor>>& feeds,
                          const DataTypeVector& out_types, const std::vector<Tensor>& outs,
                          const RowSpace& space, const std::function<bool(int)>& is_nondiff,
                          std::vector<std::vector<std::vector<double>>>* sym,
                          GradientCheckResult* result) {
  const int n_in = static_cast<int>(inputs.size());
  const int64_t n_rows = static_cast<int64_t>(space.rows.size());
  sym->assign(n_rows, {});
  std::vector<std::string> grad_names;
  for (int i = 0; i < n_in; ++i) grad_names.push_back(absl::StrCat("grad:", i));
  for (int64_t r = 0; r < n_rows; ++r) {
    auto row_feeds = feeds;
    for (size_t j = 0; j < out_types.size(); ++j) {
      if (!space.compared[j]) {
        row_feeds.push_back({absl::StrCat("dy", j), Zeros(out_types[j], outs[j].shape())});
        continue;
      }
      std::vector<double> dy(outs[j].NumElements() * RealsPerElement(out_types[j]), 0.0);
      std::copy_n(space.rows[r].begin() + space.out_offset[j], dy.size(), dy.begin());
      row_feeds.push_back({absl::StrCat("dy", j), MakeTensor(out_types[j], outs[j].shape(), dy)});
    }
    std::vector<Tensor> grads;
    TF_RETURN_IF_ERROR(session->Run(row_feeds, grad_names, {}, &grads));
    for (int i = 0; i < n_in; ++i) {
      if (grads[i].shape() != inputs[i].shape()) {
        return absl::InternalError(absl::StrCat(
            "CheckGradient(", op_type, "): gradient of input '", op_def.input_arg(i).name(),
            "' has shape ", grads[i].shape().DebugString(), ", expected ",
            inputs[i].shape().DebugString()));
      }
      (*sym)[r].push_back(ToReals(grads[i]));
      if (is_nondiff(i)) {
        for (double g : (*sym)[r][i]) {
          result->nondiff_max_abs = std::max(result->nondiff_max_abs, std::abs(g));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckGradient(const std::string& op_type, const OpAttrs& attrs,
                           const std::vector<Tensor>& inputs,
                           const GradientCheckOptions& options, GradientCheckResult* result) {
  *result = GradientCheckResult();
  result->op_type = op_type;
  const OpDef* op_def = nullptr;
  TF_RETURN_IF_ERROR(OpRegistry::Global()->LookUpOpDef(op_type, &op_def));
  const int n_in = op_def->input_arg_size();
  if (static_cast<int>(inputs.size()) != n_in) {
    return absl::InvalidArgumentError(absl::StrCat("CheckGradient(", op_type, "): op has ", n_in,
                                                   " inputs, got ", inputs.size()));
  }

  NodeDef op;
  DataTypeVector in_types, out_types;
  TF_RETURN_IF_ERROR(ForwardNode(op_type, attrs, inputs, *op_def, &op, &in_types, &out_types));

  bool f64 = options.numeric_in_float64;
  NodeDef nop = NumericTwin(op, *op_def, &f64);
  DataTypeVector nin_types, nout_types;
  TF_RETURN_IF_ERROR(InOutTypesForNode(nop, *op_def, &nin_types, &nout_types));
  result->numeric_float64 = f64;

  const GraphDef graph = CheckGraph(op, in_types, out_types, options, &nop, nin_types, result);

  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  if (session == nullptr) return absl::InternalError("CheckGradient: could not create a Session");
  TF_RETURN_IF_ERROR(session->Create(graph));

  std::vector<std::pair<std::string, Tensor>> feeds;
  for (int i = 0; i < n_in; ++i) feeds.push_back({absl::StrCat("x", i), inputs[i]});
  std::vector<std::string> out_names;
  for (size_t j = 0; j < out_types.size(); ++j) out_names.push_back(absl::StrCat("op:", j));
  std::vector<Tensor> outs;
  TF_RETURN_IF_ERROR(session->Run(feeds, out_names, {}, &outs));

  const RowSpace space = MakeRowSpace(*op_def, op, out_types, outs, options);
  const std::vector<bool>& compared = space.compared;
  const std::vector<int64_t>& out_offset = space.out_offset;
  const int64_t total_out = space.total_out;
  const std::vector<std::vector<double>>& rows = space.rows;
  const int64_t n_rows = static_cast<int64_t>(rows.size());
  auto row_name = [&](int64_t r) { return space.Name(r); };

  auto is_nondiff = [&](int i) {
    const auto& nd = options.non_differentiable_inputs;
    return std::find(nd.begin(), nd.end(), op_def->input_arg(i).name()) != nd.end();
  };

  // Symbolic rows: sym[r][i] = (v_r^T J) restricted to input i.
  std::vector<std::vector<std::vector<double>>> sym;
  TF_RETURN_IF_ERROR(SymbolicRows(session.get(), op_type, *op_def, inputs, feeds, out_types, outs,
                                  space, is_nondiff, &sym, result));
  result->rows = n_rows;

  // Numeric columns by central differences, projected onto the same rows.
  std::vector<std::pair<std::string, Tensor>> nfeeds;
  std::vector<std::vector<double>> base(n_in);
  for (int i = 0; i < n_in; ++i) {
    base[i] = ToReals(inputs[i]);
    nfeeds.push_back({absl::StrCat("nx", i), MakeTensor(nin_types[i], inputs[i].shape(), base[i])});
  }
  std::vector<std::string> nout_names;
  for (size_t j = 0; j < out_types.size(); ++j) nout_names.push_back(absl::StrCat("nop:", j));
  double delta = options.delta > 0 ? options.delta : (f64 ? 1e-6 : 1e-3);
  auto eval = [&](std::vector<double>* flat_out) -> absl::Status {
    std::vector<Tensor> y;
    TF_RETURN_IF_ERROR(session->Run(nfeeds, nout_names, {}, &y));
    flat_out->assign(total_out, 0.0);
    for (size_t j = 0; j < out_types.size(); ++j) {
      if (!compared[j]) continue;
      std::vector<double> v = ToReals(y[j]);
      std::copy(v.begin(), v.end(), flat_out->begin() + out_offset[j]);
    }
    return absl::OkStatus();
  };
  auto is_symmetric = [&](int i) {
    const auto& si = options.symmetric_inputs;
    return std::find(si.begin(), si.end(), op_def->input_arg(i).name()) != si.end();
  };
  std::vector<double> plus, minus;
  for (int i = 0; i < n_in; ++i) {
    if (!IsDifferencedType(in_types[i]) || is_nondiff(i)) continue;
    const int reals = RealsPerElement(in_types[i]);
    const bool symmetric = is_symmetric(i);
    const int64_t dims = inputs[i].dims();
    if (symmetric && (dims < 2 || inputs[i].dim_size(dims - 1) != inputs[i].dim_size(dims - 2))) {
      return absl::InvalidArgumentError(
          absl::StrCat("CheckGradient(", op_type, "): symmetric input '",
                       op_def->input_arg(i).name(), "' is not a batch of square matrices: ",
                       inputs[i].shape().DebugString()));
    }
    const int64_t n = symmetric ? inputs[i].dim_size(dims - 1) : 0;
    for (int64_t k = 0; k < static_cast<int64_t>(base[i].size()); ++k) {
      // The column's partner (a symmetric input's mirrored entry) and its sign.
      int64_t partner = k;
      double sign = 1;
      if (symmetric) {
        const int64_t element = k / reals, part = k % reals, in_matrix = element % (n * n);
        const int64_t row = in_matrix / n, col = in_matrix % n;
        if (row < col || (row == col && part == 1)) continue;  // the upper triangle; Im(diag)
        partner = (element - in_matrix + col * n + row) * reals + part;
        sign = part == 1 ? -1 : 1;
      }
      std::vector<double> x = base[i];
      x[k] = base[i][k] + delta;
      if (partner != k) x[partner] = base[i][partner] + sign * delta;
      nfeeds[i].second = MakeTensor(nin_types[i], inputs[i].shape(), x);
      TF_RETURN_IF_ERROR(eval(&plus));
      x[k] = base[i][k] - delta;
      if (partner != k) x[partner] = base[i][partner] - sign * delta;
      nfeeds[i].second = MakeTensor(nin_types[i], inputs[i].shape(), x);
      TF_RETURN_IF_ERROR(eval(&minus));
      ++result->columns;
      for (int64_t r = 0; r < n_rows; ++r) {
        double num = 0;
        for (int64_t e = 0; e < total_out; ++e) {
          if (rows[r][e] != 0) num += rows[r][e] * (plus[e] - minus[e]) / (2 * delta);
        }
        const double s =
            sym[r][i][k] + (partner != k ? sign * sym[r][i][partner] : 0.0);
        const double abs_err = std::abs(s - num);
        const double rel_err = abs_err / std::max(1.0, std::abs(num));
        result->max_abs_error = std::max(result->max_abs_error, abs_err);
        if (rel_err > result->max_rel_error || result->worst_element < 0) {
          result->max_rel_error = std::max(result->max_rel_error, rel_err);
          result->worst_input = op_def->input_arg(i).name();
          result->worst_element = k;
          result->worst_row = row_name(r);
          result->worst_symbolic = s;
          result->worst_numeric = num;
        }
      }
    }
    nfeeds[i].second = MakeTensor(nin_types[i], inputs[i].shape(), base[i]);
  }
  return session->Close();
}

}  // namespace tensorflow::tf_ext::test
