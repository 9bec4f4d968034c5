// GradBuilder: writes the FunctionDef of an op's gradient with FunctionDefHelper (FDH) nodes.
//
// The gradient function's signature is derived from the forward op's OpDef, so a gradient
// only lists its maths:
//   inputs:  every forward input, by its OpDef name (x, rois, ...), then one incoming
//            gradient per forward output, named GradName(output) = "d_<output>";
//   outputs: one gradient per forward input, named GradName(input) = "d_<input>";
//   attrs:   every attr of the forward op; PassAttrs({"T", ...}) passes them on as "$T".
// This is the calling convention of SymbolicGradient, so the result is directly usable by
// TensorFlow's function runtime, its graph-level gradient builder and tf_ext's bridges.
//
// Forward outputs. A body may read forward outputs by their OpDef names too (RoiPool's
// gradient reads argmax). Front ends that have the forward node's outputs (the Python bridge,
// the C++ client registry) ask for them to be passed in: the forward attrs then carry
// kForwardOutputsAttr = true and the signature becomes
//   inputs, then every forward output by its name, then the incoming gradients;
// otherwise (SymbolicGradient: inputs + incoming gradients only) Build recomputes the outputs
// with one forward node, and only when the body reads one. Either way the body is the same.
//
// Node references use FDH's Define syntax: a node's `ret` names its outputs, "name" is output
// 0 and "name:k" output k of a multi-output node.
#ifndef TF_EXT_GRADS_GRAD_BUILDER_H_
#define TF_EXT_GRADS_GRAD_BUILDER_H_

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/types.pb.h"
#include "tensorflow/core/platform/statusor.h"  // TF_ASSIGN_OR_RETURN, for ValidAttrs
#include "tf_ext/grads/op_facts.h"

namespace tensorflow::tf_ext::grad {

using FDH = FunctionDefHelper;
using NodeAttrs = std::vector<std::pair<std::string, FDH::AttrValueWrapper>>;

// An attr value that stands for forward attr `name` ("$name"). Use this, not a std::string
// "$T": FDH's AttrValueWrapper only parses placeholders from const char* / string_view.
FDH::AttrValueWrapper Placeholder(const std::string& name);

// Name of the incoming gradient of forward output `name` / of the result for input `name`.
inline std::string GradName(const std::string& name) { return "d_" + name; }

// The forward-node attr (internal: "_" attrs are no op attrs) by which a front end asks for
// the gradient function whose signature includes the forward outputs (see above).
inline constexpr char kForwardOutputsAttr[] = "_tf_ext_forward_outputs";
// Whether `attrs` ask for that form.
bool WantsForwardOutputs(const AttrSlice& attrs);

// Edits a built gradient FunctionDef (an override building on TensorFlow's gradient): every
// node input that reads argument `arg` reads node output `ref` instead (control inputs stay).
// Fails when `arg` is not one of g's input arguments.
absl::Status RedirectArgumentReads(FunctionDef* g, const std::string& arg, const std::string& ref);

class GradBuilder {
 public:
  // What the built function computes: the gradient (signature above), or a surrogate forward
  // (signature = the op's own: inputs -> outputs; Return() then names an output). See
  // RegisterSurrogateForward in registry.h.
  enum class Kind { kGradient, kSurrogateForward };

  // `attrs` are the forward node's attrs (what gradient::Creator receives).
  GradBuilder(const std::string& op_type, const AttrSlice& attrs, Kind kind = Kind::kGradient);
  // The same, for a declared op (manifest.h): its facts are applied, not restated. A gradient
  // then requires facts.types (RequireTypes), gives zeros for facts.not_differentiable inputs
  // (defining one of those is an error), and Build checks that the body reads exactly the
  // forward inputs in facts.reads and every incoming gradient except facts.ignored_output_grads.
  GradBuilder(const OpFacts& facts, const AttrSlice& attrs, Kind kind = Kind::kGradient);

  const std::string& op_type() const { return op_type_; }
  const OpDef& op_def() const { return op_def_; }

  // The forward node's attrs as checked by the op's own `validate` (ValidateFooAttrs, the
  // check its kernel and shape function run), so a gradient is built only for a node the
  // forward accepts, and fails with the forward's message.
  template <typename A>
  absl::StatusOr<A> ValidAttrs(
      absl::Status (*validate)(std::string_view, const AttrSlice&, A*)) const {
    A a;
    absl::Status s = validate(op_type_, attrs_, &a);
    if (!s.ok()) return s;
    return a;
  }

  // Fails the build (a clear InvalidArgument) unless type attr `attr` is one of `allowed`;
  // e.g. RequireTypes("T", {DT_FLOAT, DT_DOUBLE}) for ops whose int flavour has no gradient.
  GradBuilder& RequireTypes(const std::string& attr, const std::vector<DataType>& allowed);

  // The value of forward attr `name` (float, int64_t, bool, std::string, DataType, lists...):
  // the node's, else the OpDef's default. For gradients whose maths depends on an attr value
  // (e.g. a Const built from a scale attr). A missing or mistyped attr fails the build
  // (Build returns the error) and yields V().
  template <typename V>
  V GetAttr(const std::string& name);

  // {"T", "$T"}, ... : the forward node's attrs `names`, passed through unchanged to a node.
  NodeAttrs PassAttrs(std::initializer_list<std::string> names) const;
  // The dtype of forward input/output `arg` as a node attr value ("$T" or a fixed type).
  FDH::AttrValueWrapper TypeOf(const std::string& arg) const;

  // Adds a node; returns its first output's name for chaining.
  std::string Add(FDH::Node node);

  // Declares that the gradient for forward input `input` is node output `ref` (for a
  // surrogate forward: that forward output `input` is `ref`).
  GradBuilder& Return(const std::string& input, const std::string& ref);

  // Helpers for the common shapes of a gradient (all add nodes and return their output).
  // d(input) = zeros of input's shape and dtype: `input` is not differentiable.
  GradBuilder& NotDifferentiable(const std::string& input);
  // The gradient is one dedicated op (e.g. TfExt>FooGrad) fed `args`, with `attrs` forwarded
  // by name; its outputs become the gradients of `inputs` in order.
  GradBuilder& DedicatedOp(const std::string& grad_op, std::vector<std::string> args,
                           std::initializer_list<std::string> attrs,
                           std::vector<std::string> inputs);
  // conj(v) for a complex T (a Conj node), v itself for a real one.
  std::string Conj(const std::string& v);
  // A scalar constant of dtype attr `type_attr` ("$T") with value `value`: Const(double) + Cast.
  std::string TypedConst(const std::string& name, double value,
                         const std::string& type_attr = "T");
  // Reduces `grad` (shaped like the broadcast result) back to the shape of `input`:
  // Sum over the axes BroadcastGradientArgs(shape(a), shape(b)) reports, then Reshape.
  // Returns the names of the reduced gradients for a and b.
  //
  // kMergedByShapeFn: for an op whose shape function Merges a and b although its kernel
  // broadcasts them (SoftmaxCrossEntropyWithLogits). Grappler then takes a's and b's
  // unknown dimensions for one symbolic dimension, and its constant folding, which
  // materializes BroadcastGradientArgs of two Shape nodes from their symbolic shapes, would
  // fold "nothing to reduce" into a graph that is fed [1, n] and [b, n]. The shapes are read
  // by one ShapeN node instead, which that rewrite leaves alone (it still folds fully known
  // shapes).
  enum class Shapes { kIndependent, kMergedByShapeFn };
  std::pair<std::string, std::string> ReduceForBroadcast(const std::string& a,
                                                         const std::string& b,
                                                         const std::string& grad_a,
                                                         const std::string& grad_b,
                                                         const std::string& type_attr = "T",
                                                         Shapes shapes = Shapes::kIndependent);

  // Element-wise unary op (one input x, one output y): d(x) = f(x, y, d(y)).
  // `body` may read the forward input and output by their OpDef names and the incoming gradient
  // as GradName(output) (y: see "Forward outputs" above). The last body node's first output is
  // returned as d(x).
  GradBuilder& UnaryCwise(std::vector<FDH::Node> body);

  // Every forward input must have been given a gradient (Return / NotDifferentiable /
  // DedicatedOp); incoming gradients the maths does not read are simply ignored.
  absl::Status Build(FunctionDef* g) const;

  // Whether the function receives the forward outputs (kForwardOutputsAttr).
  bool with_outputs() const { return with_outputs_; }

 private:
  void Fail(absl::Status s);
  // Forward attr `name` as a node attr value (see grad_builder.cc), and whether the node
  // leaves it to its default.
  FDH::AttrValueWrapper AttrFor(const std::string& name) const;
  bool Defaulted(const std::string& name) const;
  const OpDef::ArgDef* FindArg(const std::string& name) const;
  // Whether a node of `nodes` reads a forward output.
  bool ReadsForwardOutput(const std::vector<FDH::Node>& nodes) const;
  // The declared facts' checks of Build (reads, ignored gradients, non-differentiable inputs);
  // appends the zeros of undefined non-differentiable inputs to `nodes` and `returns`.
  absl::Status ApplyFacts(std::vector<FDH::Node>* nodes,
                          std::vector<std::pair<std::string, std::string>>* returns) const;

  std::string op_type_;
  Kind kind_;
  OpDef op_def_;
  AttrSlice attrs_;
  AttrValueMap attrs_with_defaults_;  // attrs_ plus the OpDef's defaults of absent attrs
  absl::Status status_;
  std::vector<FDH::Node> nodes_;
  std::vector<std::pair<std::string, std::string>> returns_;  // input -> node output
  int counter_ = 0;
  bool has_facts_ = false;
  bool with_outputs_ = false;
  OpFacts facts_;
};

template <typename V>
V GradBuilder::GetAttr(const std::string& name) {
  V value{};
  absl::Status s = GetNodeAttr(AttrSlice(&attrs_with_defaults_), name, &value);
  if (!s.ok()) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat(op_type_, ": gradient needs attr '", name, "': ", s.message())));
    return V{};
  }
  return value;
}

}  // namespace tensorflow::tf_ext::grad

#endif  // TF_EXT_GRADS_GRAD_BUILDER_H_
