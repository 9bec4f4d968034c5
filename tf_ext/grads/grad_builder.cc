#include "tf_ext/grads/grad_builder.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/types.h"

namespace tensorflow::tf_ext::grad {

FDH::AttrValueWrapper Placeholder(const std::string& name) {
  FDH::AttrValueWrapper w;
  w.proto.set_placeholder(name);
  return w;
}

bool WantsForwardOutputs(const AttrSlice& attrs) {
  const AttrValue* v = attrs.Find(kForwardOutputsAttr);
  return v != nullptr && v->value_case() == AttrValue::kB && v->b();
}

absl::Status RedirectArgumentReads(FunctionDef* g, const std::string& arg, const std::string& ref) {
  bool found = false;
  for (const OpDef::ArgDef& a : g->signature().input_arg()) found = found || a.name() == arg;
  if (!found) {
    return absl::InternalError(absl::StrCat("gradient function ", g->signature().name(),
                                            " has no argument '", arg, "' to redirect"));
  }
  for (NodeDef& n : *g->mutable_node_def()) {
    for (std::string& in : *n.mutable_input()) {
      if (in == arg) in = ref;
    }
  }
  return absl::OkStatus();
}

GradBuilder::GradBuilder(const std::string& op_type, const AttrSlice& attrs, Kind kind)
    : op_type_(op_type), kind_(kind), attrs_(attrs) {
  with_outputs_ = kind == Kind::kGradient && WantsForwardOutputs(attrs);
  for (const auto& kv : attrs) attrs_with_defaults_[kv.first] = kv.second;
  const OpDef* def = nullptr;
  absl::Status s = OpRegistry::Global()->LookUpOpDef(op_type, &def);
  if (!s.ok()) {
    Fail(s);
    return;
  }
  op_def_ = *def;
  for (const OpDef::AttrDef& a : op_def_.attr()) {
    if (a.has_default_value() && attrs_with_defaults_.count(a.name()) == 0) {
      attrs_with_defaults_[a.name()] = a.default_value();
    }
  }
  for (const auto* args : {&op_def_.input_arg(), &op_def_.output_arg()}) {
    for (const OpDef::ArgDef& arg : *args) {
      if (!arg.number_attr().empty() || !arg.type_list_attr().empty()) {
        Fail(absl::UnimplementedError(absl::StrCat(
            op_type, ": GradBuilder supports single-tensor arguments only; '", arg.name(),
            "' is a list")));
      }
    }
  }
}

GradBuilder::GradBuilder(const OpFacts& facts, const AttrSlice& attrs, Kind kind)
    : GradBuilder(facts.op, attrs, kind) {
  has_facts_ = true;
  facts_ = facts;
  if (kind == Kind::kGradient) {
    if (facts.differentiability != Differentiability::kGradient) {
      Fail(absl::InternalError(absl::StrCat(op_type_, " is declared ",
                                            DifferentiabilityName(facts.differentiability),
                                            ", not with a gradient")));
    } else if (!facts.types.empty()) {
      RequireTypes(facts.type_attr, facts.types);
    }
  }
}

void GradBuilder::Fail(absl::Status s) {
  if (status_.ok()) status_ = std::move(s);
}

const OpDef::ArgDef* GradBuilder::FindArg(const std::string& name) const {
  for (const auto* args : {&op_def_.input_arg(), &op_def_.output_arg()}) {
    for (const OpDef::ArgDef& arg : *args) {
      if (arg.name() == name) return &arg;
    }
  }
  return nullptr;
}

GradBuilder& GradBuilder::RequireTypes(const std::string& attr,
                                       const std::vector<DataType>& allowed) {
  DataType t = DT_INVALID;
  absl::Status s = GetNodeAttr(attrs_, attr, &t);
  if (!s.ok()) {
    Fail(absl::InvalidArgumentError(absl::StrCat(op_type_, ": ", s.message())));
  } else if (std::find(allowed.begin(), allowed.end(), t) == allowed.end()) {
    std::vector<std::string> names;
    for (DataType a : allowed) names.push_back(DataTypeString(a));
    Fail(absl::InvalidArgumentError(absl::StrCat(
        op_type_, " is not differentiable for ", attr, "=", DataTypeString(t),
        "; its gradient is defined for ", absl::StrJoin(names, ", "))));
  }
  return *this;
}

// A forward attr as a node attr value: "$name", or, for an attr the node leaves to its default
// (a SymbolicGradient's `f` built by hand, a front end that keeps only the attrs set), that
// default: the function's signature then lists only the attrs given (FunctionDef instantiation
// needs a value for each), and a placeholder of an absent one would fail it.
FDH::AttrValueWrapper GradBuilder::AttrFor(const std::string& name) const {
  if (!Defaulted(name)) return Placeholder(name);
  FDH::AttrValueWrapper value;
  value.proto = attrs_with_defaults_.at(name);
  return value;
}

bool GradBuilder::Defaulted(const std::string& name) const {
  return attrs_.Find(name) == nullptr && attrs_with_defaults_.count(name) > 0;
}

NodeAttrs GradBuilder::PassAttrs(std::initializer_list<std::string> names) const {
  NodeAttrs out;
  for (const std::string& n : names) out.push_back({n, AttrFor(n)});
  return out;
}

FDH::AttrValueWrapper GradBuilder::TypeOf(const std::string& arg_name) const {
  const OpDef::ArgDef* arg = FindArg(arg_name);
  if (arg == nullptr) return FDH::AttrValueWrapper(DT_INVALID);
  if (!arg->type_attr().empty()) return AttrFor(arg->type_attr());
  return FDH::AttrValueWrapper(arg->type());
}

std::string GradBuilder::Add(FDH::Node node) {
  std::string name = node.ret.empty() ? node.name : node.ret[0];
  nodes_.push_back(std::move(node));
  return name;
}

GradBuilder& GradBuilder::Return(const std::string& input, const std::string& ref) {
  returns_.push_back({input, ref});
  return *this;
}

GradBuilder& GradBuilder::NotDifferentiable(const std::string& input) {
  // d(input) = 0: the output does not depend on `input` smoothly (indices, boxes, ...).
  std::string z = Add({{"zeros_" + input}, "ZerosLike", {input}, {{"T", TypeOf(input)}}});
  return Return(input, z);
}

GradBuilder& GradBuilder::DedicatedOp(const std::string& grad_op, std::vector<std::string> args,
                                      std::initializer_list<std::string> attrs,
                                      std::vector<std::string> inputs) {
  std::vector<std::string> rets;
  for (const std::string& in : inputs) rets.push_back("grad_op_" + in);
  Add({rets, grad_op, std::move(args), PassAttrs(attrs)});
  for (size_t i = 0; i < inputs.size(); ++i) Return(inputs[i], rets[i]);
  return *this;
}

std::string GradBuilder::TypedConst(const std::string& name, double value,
                                    const std::string& type_attr) {
  Add(FDH::Const<double>(name + "_f64", value));
  return Add({{name}, "Cast", {name + "_f64"}, {{"SrcT", DT_DOUBLE}, {"DstT", AttrFor(type_attr)}}});
}

std::pair<std::string, std::string> GradBuilder::ReduceForBroadcast(
    const std::string& a, const std::string& b, const std::string& grad_a,
    const std::string& grad_b, const std::string& type_attr, Shapes shapes) {
  const std::string p = absl::StrCat("bcast", counter_++, "_");
  const NodeAttrs t = {{"T", AttrFor(type_attr)}};
  const std::string sa = p + "sa", sb = p + "sb";
  if (shapes == Shapes::kMergedByShapeFn) {
    Add({{sa, sb}, "ShapeN", {a, b}, {{"T", AttrFor(type_attr)}, {"N", 2}}});
  } else {
    Add({{sa}, "Shape", {a}, t});
    Add({{sb}, "Shape", {b}, t});
  }
  // ra, rb: the axes along which a and b were broadcast to the result's shape.
  Add({{p + "ra", p + "rb"}, "BroadcastGradientArgs", {sa, sb}});
  // d(a) = reshape(sum(grad_a, ra), shape(a)); same for b.
  Add({{p + "suma"}, "Sum", {grad_a, p + "ra"}, t});
  Add({{p + "sumb"}, "Sum", {grad_b, p + "rb"}, t});
  std::string da = Add({{p + "da"}, "Reshape", {p + "suma", sa}, t});
  std::string db = Add({{p + "db"}, "Reshape", {p + "sumb", sb}, t});
  return {da, db};
}

std::string GradBuilder::Conj(const std::string& v) {
  if (!DataTypeIsComplex(GetAttr<DataType>("T"))) return v;
  return Add({{"conj_" + v}, "Conj", {v}, PassAttrs({"T"})});
}

GradBuilder& GradBuilder::UnaryCwise(std::vector<FDH::Node> body) {
  if (kind_ != Kind::kGradient || op_def_.input_arg_size() != 1 ||
      op_def_.output_arg_size() != 1 || body.empty()) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat(op_type_, ": UnaryCwise builds gradients of one-input, one-output ops from a "
                     "non-empty body")));
    return *this;
  }
  const std::string& x = op_def_.input_arg(0).name();
  std::string last;
  for (FDH::Node& n : body) last = Add(std::move(n));
  return Return(x, last);
}

absl::Status GradBuilder::Build(FunctionDef* g) const {
  TF_RETURN_IF_ERROR(status_);
  auto type_string = [this](const OpDef::ArgDef& arg) {
    if (arg.type_attr().empty()) return DataTypeString(arg.type());
    if (Defaulted(arg.type_attr())) {  // not in the signature's attrs: its default type
      return DataTypeString(attrs_with_defaults_.at(arg.type_attr()).type());
    }
    return arg.type_attr();
  };
  const bool gradient = kind_ == Kind::kGradient;
  std::vector<std::string> arg_def, ret_def, attr_def;
  for (const OpDef::ArgDef& in : op_def_.input_arg()) {
    arg_def.push_back(absl::StrCat(in.name(), ": ", type_string(in)));
  }
  if (gradient && with_outputs_) {
    for (const OpDef::ArgDef& out : op_def_.output_arg()) {
      arg_def.push_back(absl::StrCat(out.name(), ": ", type_string(out)));
    }
  }
  if (gradient) {
    for (const OpDef::ArgDef& out : op_def_.output_arg()) {
      arg_def.push_back(absl::StrCat(GradName(out.name()), ": ", type_string(out)));
    }
  }
  for (const OpDef::AttrDef& attr : op_def_.attr()) {
    if (Defaulted(attr.name())) continue;  // passed as its value (AttrFor)
    attr_def.push_back(absl::StrCat(attr.name(), ": ", attr.type()));
  }
  // FDH::Define names results after node outputs, so each result gets an Identity node named
  // after it (GradName(input), or the output's own name) reading the node output Return() chose.
  std::vector<FDH::Node> nodes = nodes_;
  std::vector<std::pair<std::string, std::string>> returns = returns_;
  if (has_facts_ && gradient) TF_RETURN_IF_ERROR(ApplyFacts(&nodes, &returns));
  if (gradient && !with_outputs_ && ReadsForwardOutput(nodes)) {
    // The outputs = op(inputs), recomputed: SymbolicGradient passes only inputs and d(outputs)
    // (the runtime's common-subexpression elimination can merge this node with the forward).
    FDH::Node fwd;
    for (const OpDef::ArgDef& out : op_def_.output_arg()) fwd.ret.push_back(out.name());
    fwd.op = op_type_;
    for (const OpDef::ArgDef& in : op_def_.input_arg()) fwd.arg.push_back(in.name());
    for (const auto& attr : op_def_.attr()) fwd.attr.push_back({attr.name(), AttrFor(attr.name())});
    nodes.insert(nodes.begin(), std::move(fwd));
  }
  const auto& results = gradient ? op_def_.input_arg() : op_def_.output_arg();
  for (const OpDef::ArgDef& r : results) {
    auto it = std::find_if(returns.begin(), returns.end(),
                           [&](const auto& ret) { return ret.first == r.name(); });
    if (it == returns.end()) {
      return absl::InternalError(absl::StrCat(op_type_, ": the ",
                                              gradient ? "gradient for input '" : "output '",
                                              r.name(), "' was never defined"));
    }
    const std::string name = gradient ? GradName(r.name()) : r.name();
    ret_def.push_back(absl::StrCat(name, ": ", type_string(r)));
    nodes.push_back({{name}, "Identity", {it->second}, {{"T", TypeOf(r.name())}}});
  }
  *g = FDH::Define(arg_def, ret_def, attr_def, nodes);
  return absl::OkStatus();
}

bool GradBuilder::ReadsForwardOutput(const std::vector<FDH::Node>& nodes) const {
  for (const FDH::Node& n : nodes) {
    for (const std::string& a : n.arg) {
      const std::string name = a.substr(a[0] == '^', a.find(':') - (a[0] == '^'));
      for (const OpDef::ArgDef& out : op_def_.output_arg()) {
        if (out.name() == name) return true;
      }
    }
  }
  return false;
}

absl::Status GradBuilder::ApplyFacts(
    std::vector<FDH::Node>* nodes, std::vector<std::pair<std::string, std::string>>* returns) const {
  auto contains = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  // What the body reads: every node argument's node name ("x", "d_y", "n:1" -> "n").
  std::set<std::string> read;
  for (const FDH::Node& n : *nodes) {
    for (const std::string& a : n.arg) read.insert(a.substr(a[0] == '^', a.find(':') - (a[0] == '^')));
  }
  for (const OpDef::ArgDef& in : op_def_.input_arg()) {
    if (read.count(in.name()) != contains(facts_.reads, in.name())) {
      return absl::InternalError(absl::StrCat(
          op_type_, ": the gradient ", read.count(in.name()) ? "reads" : "does not read",
          " forward input '", in.name(), "', but its declaration's Reads(...) says otherwise"));
    }
  }
  for (const OpDef::ArgDef& out : op_def_.output_arg()) {
    if (read.count(out.name()) != contains(facts_.reads, out.name())) {
      return absl::InternalError(absl::StrCat(
          op_type_, ": the gradient ", read.count(out.name()) ? "reads" : "does not read",
          " forward output '", out.name(), "', but its declaration's Reads(...) says otherwise"));
    }
    const bool ignored = contains(facts_.ignored_output_grads, out.name());
    if (read.count(GradName(out.name())) == ignored) {
      return absl::InternalError(absl::StrCat(
          op_type_, ": the gradient ", ignored ? "reads" : "does not read", " the incoming ",
          GradName(out.name()), ", but its declaration ", ignored ? "ignores" : "does not ignore",
          " it (IgnoresGradientOf)"));
    }
  }
  for (const std::string& in : facts_.not_differentiable) {
    if (FindArg(in) == nullptr) {
      return absl::InternalError(
          absl::StrCat(op_type_, ": declared non-differentiable input '", in, "' is no input"));
    }
    if (std::any_of(returns->begin(), returns->end(), [&](const auto& r) { return r.first == in; })) {
      return absl::InternalError(absl::StrCat(
          op_type_, ": the gradient defines ", GradName(in), ", but '", in,
          "' is declared not differentiable"));
    }
    // d(in) = 0: the output does not depend on `in` smoothly (indices, boxes, ...).
    const std::string zeros = "zeros_" + in;
    nodes->push_back({{zeros}, "ZerosLike", {in}, {{"T", TypeOf(in)}}});
    returns->push_back({in, zeros});
  }
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext::grad
