// Gradients of TensorFlow's array ops that no C++ registry has in TensorFlow 2.21 (Python's
// python/ops/array_grad.py has them). Each is registered in both C++ registries when the op
// library loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// Checked against numeric Jacobians: tf_ext/tools/tf_core_gradcheck_spec.txt (`make gradcheck`);
// the gathers, scatters and Print also in tests/tf_array_misc_grads_test.cc and against
// Python's gradients in tests/python/test_tf_array_misc_grads.py.
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

// Frozen Keras graphs hold IdentityN (tf.custom_gradient, e.g. in swish and gelu).
absl::Status IdentityNGrad(const AttrSlice& attrs, FunctionDef* g) {
  // IdentityN(input: T) -> output: T, T a list of types. The gradient is concrete for the
  // node's T (one argument per list element, the flattened convention SymbolicGradient uses):
  // d(input_i) = d(output_i).
  std::vector<DataType> types;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "T", &types));
  std::vector<std::string> in_def, out_def;
  std::vector<FunctionDefHelper::Node> nodes;
  std::vector<std::pair<std::string, std::string>> ret;
  for (int i = 0; i < static_cast<int>(types.size()); ++i) {
    in_def.push_back(absl::StrCat("input_", i, ": ", DataTypeString(types[i])));
  }
  for (int i = 0; i < static_cast<int>(types.size()); ++i) {
    const std::string t = DataTypeString(types[i]);
    in_def.push_back(absl::StrCat("d_output_", i, ": ", t));
    out_def.push_back(absl::StrCat("d_input_", i, ": ", t));
    // d(input_i) = d(output_i)
    nodes.push_back({{absl::StrCat("dx_", i)}, "Identity", {absl::StrCat("d_output_", i)},
                     {{"T", types[i]}}});
    ret.push_back({absl::StrCat("d_input_", i), absl::StrCat("dx_", i, ":output:0")});
  }
  *g = FunctionDefHelper::Create("IdentityNGrad", in_def, out_def, {}, nodes, ret);
  return absl::OkStatus();
}

// Ops that pass their input through (Python's _IdGrad): d(input) = d(output). `in` and `out`
// are the OpDef's argument names.
absl::Status PassThroughGrad(const std::string& op, const char* in, const char* out,
                             const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  b.Return(in, b.Add({{"dx"}, "Identity", {grad::GradName(out)}, {{"T", b.TypeOf(in)}}}));
  return b.Build(g);
}

// CheckNumericsV2(tensor, message) = tensor, failing on NaN or Inf: its gradient is checked
// too, d(tensor) = CheckNumericsV2(d(output)), with Python's message.
absl::Status CheckNumericsV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("CheckNumericsV2", attrs);
  const std::string message = b.GetAttr<std::string>("message");
  b.Return("tensor",
           b.Add({{"dx"},
                  "CheckNumericsV2",
                  {grad::GradName("output")},
                  {{"T", b.TypeOf("tensor")},
                   {"message", absl::StrCat("Not a number (NaN) or infinity (Inf) values "
                                            "detected in gradient. ",
                                            message)}}}));
  return b.Build(g);
}

// PreventGradient: as in Python, asking for its gradient is an error, with the op's message.
absl::Status PreventGradientGrad(const AttrSlice& attrs, FunctionDef*) {
  std::string message;
  (void)GetNodeAttr(attrs, "message", &message);
  return absl::InvalidArgumentError(
      absl::StrCat("PreventGradient: gradient explicitly disabled. Reason: ", message));
}

// Print(input, data...) = input (printing data): d(input) = d(output), the data get zeros
// (Python: None). Concrete for the node's U, one argument per data element (as IdentityN).
absl::Status PrintGrad(const AttrSlice& attrs, FunctionDef* g) {
  DataType t;
  std::vector<DataType> u;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "T", &t));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "U", &u));
  std::vector<std::string> in_def = {absl::StrCat("input: ", DataTypeString(t))};
  std::vector<std::string> out_def = {absl::StrCat("d_input: ", DataTypeString(t))};
  // d(input) = d(output)
  std::vector<FunctionDefHelper::Node> nodes = {{{"dx"}, "Identity", {"d_output"}, {{"T", t}}}};
  std::vector<std::pair<std::string, std::string>> ret = {{"d_input", "dx:output:0"}};
  for (int i = 0; i < static_cast<int>(u.size()); ++i) {
    in_def.push_back(absl::StrCat("data_", i, ": ", DataTypeString(u[i])));
    out_def.push_back(absl::StrCat("d_data_", i, ": ", DataTypeString(u[i])));
    // d(data_i) = 0
    nodes.push_back({{absl::StrCat("ddata_", i)}, "ZerosLike", {absl::StrCat("data_", i)},
                     {{"T", u[i]}}});
    ret.push_back({absl::StrCat("d_data_", i), absl::StrCat("ddata_", i, ":y:0")});
  }
  in_def.push_back(absl::StrCat("d_output: ", DataTypeString(t)));
  *g = FunctionDefHelper::Create("PrintGrad", in_def, out_def, {}, nodes, ret);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Gathers and scatters. Their gradients gather or scatter with the forward's indices; an
// index out of range fails the gradient with InvalidArgument "<op>: ..." (a CheckNumerics
// node, the one stock op that fails with a message of our choosing, which then ends
// " : Tensor had NaN values"), where the gradient's own gathers would fail with a message
// that does not name the op, or (negative ids of a segment sum) silently drop the index.

// A node that fails unless 0 <= indices < bound (bound broadcast against indices: a scalar,
// or the [K] leading dimensions an index of the last axis addresses); `type` is indices'.
// Returns its name, for control dependencies.
std::string CheckIndices(grad::GradBuilder& b, const std::string& op, const std::string& indices,
                         const std::string& bound, const grad::FDH::AttrValueWrapper& type) {
  b.Add({{"check_zeros"}, "ZerosLike", {indices}, {{"T", type}}});
  b.Add({{"check_ge"}, "GreaterEqual", {indices, "check_zeros"}, {{"T", type}}});  // i >= 0
  b.Add({{"check_lt"}, "Less", {indices, bound}, {{"T", type}}});                 // i < bound
  b.Add({{"check_ok"}, "LogicalAnd", {"check_ge", "check_lt"}, {}});
  b.Add({{"check_rank"}, "Rank", {"check_ok"}, {{"T", DT_BOOL}}});
  b.Add(grad::FDH::Const<int32>("check_zero", 0));
  b.Add(grad::FDH::Const<int32>("check_one", 1));
  b.Add({{"check_axes"}, "Range", {"check_zero", "check_rank", "check_one"}, {{"Tidx", DT_INT32}}});
  b.Add({{"check_all"}, "All", {"check_ok", "check_axes"}, {{"Tidx", DT_INT32}}});
  b.Add(grad::FDH::Const<float>("check_pass", 0.0f));
  b.Add(grad::FDH::Const<float>("check_fail", std::numeric_limits<float>::quiet_NaN()));
  // NaN (fails the check below) unless every index is in range
  b.Add({{"check_flag"}, "Select", {"check_all", "check_pass", "check_fail"}, {{"T", DT_FLOAT}}});
  return b.Add({{"index_check"}, "CheckNumerics", {"check_flag"},
                {{"T", DT_FLOAT},
                 {"message", absl::StrCat(op, ": an index is out of range of the shape it "
                                              "indexes (in the gradient)")}}});
}

// Gather(params, indices) = params[indices] along axis 0 (v1): d(params) = the rows of
// d(output) summed onto the rows they were gathered from (dense, where Python builds
// IndexedSlices with the same values); indices: zeros.
absl::Status GatherGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Gather", attrs);
  const grad::FDH::AttrValueWrapper tp = grad::Placeholder("Tparams"),
                                    ti = grad::Placeholder("Tindices");
  b.Add(grad::FDH::Const<int32>("axis0", 0));
  b.Add(grad::FDH::Const<int32>("rest_begin", std::vector<int32>{1}));
  b.Add(grad::FDH::Const<int32>("rest_end", std::vector<int32>{0}));
  b.Add(grad::FDH::Const<int32>("stride1", std::vector<int32>{1}));
  b.Add(grad::FDH::Const<int32>("minus_one", std::vector<int32>{-1}));
  b.Add({{"params_shape"}, "Shape", {"params"}, {{"T", tp}, {"out_type", DT_INT32}}});
  b.Add({{"rows"}, "GatherV2", {"params_shape", "axis0", "axis0"},
         {{"Tparams", DT_INT32}, {"Tindices", DT_INT32}, {"Taxis", DT_INT32}}});  // params rows
  b.Add({{"row_shape"}, "StridedSlice", {"params_shape", "rest_begin", "rest_end", "stride1"},
         {{"T", DT_INT32}, {"Index", DT_INT32}, {"end_mask", 1}}});              // shape[1:]
  b.Add({{"count"}, "Size", {"indices"}, {{"T", ti}, {"out_type", DT_INT32}}});
  b.Add({{"count_v"}, "Reshape", {"count", "minus_one"}, {{"T", DT_INT32}, {"Tshape", DT_INT32}}});
  b.Add({{"values_shape"}, "ConcatV2", {"count_v", "row_shape", "axis0"},
         {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});                       // [n, ...]
  b.Add({{"values"}, "Reshape", {grad::GradName("output"), "values_shape"},
         {{"T", tp}, {"Tshape", DT_INT32}}});
  b.Add({{"ids"}, "Reshape", {"indices", "count_v"}, {{"T", ti}, {"Tshape", DT_INT32}}});
  b.Add({{"rows_t"}, "Cast", {"rows"}, {{"SrcT", DT_INT32}, {"DstT", ti}}});
  const std::string check = CheckIndices(b, "Gather", "ids", "rows_t", ti);
  // d(params)[r] = sum of the rows of d(output) gathered from row r
  b.Return("params", b.Add({{"dparams"}, "UnsortedSegmentSum", {"values", "ids", "rows"},
                            {{"T", tp}, {"Tindices", ti}, {"Tnumsegments", DT_INT32}},
                            {check}}));
  b.NotDifferentiable("indices");
  return b.Build(g);
}

// TensorScatter{Update,Add,Sub,Max,Min}(tensor, indices, updates): `output` = tensor with the
// slices at indices replaced / added / subtracted / maxed / mined with updates.
absl::Status TensorScatterGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const grad::FDH::AttrValueWrapper ti = grad::Placeholder("Tindices");
  const std::string policy = b.GetAttr<std::string>("bad_indices_policy");
  const std::string d = grad::GradName("output");
  std::vector<std::string> dep;
  if (policy != "IGNORE") {  // IGNORE: the forward skips bad indices, their updates get zeros
    b.Add(grad::FDH::Const<int32>("k_begin", std::vector<int32>{-1}));
    b.Add(grad::FDH::Const<int32>("k_end", std::vector<int32>{0}));
    b.Add(grad::FDH::Const<int32>("k_stride", std::vector<int32>{1}));
    b.Add(grad::FDH::Const<int32>("k_zero", std::vector<int32>{0}));
    b.Add({{"indices_shape"}, "Shape", {"indices"}, {{"T", ti}, {"out_type", DT_INT32}}});
    b.Add({{"k"}, "StridedSlice", {"indices_shape", "k_begin", "k_end", "k_stride"},
           {{"T", DT_INT32}, {"Index", DT_INT32}, {"end_mask", 1}}});  // [K]
    b.Add({{"tensor_shape"}, "Shape", {"tensor"}, {{"T", grad::Placeholder("T")},
                                                   {"out_type", ti}}});
    b.Add({{"bound"}, "Slice", {"tensor_shape", "k_zero", "k"}, {{"T", ti}, {"Index", DT_INT32}}});
    dep.push_back(CheckIndices(b, op, "indices", "bound", ti));  // shape[:K]
  }
  const grad::NodeAttrs gather_nd = {{"Tparams", grad::Placeholder("T")},
                                     {"Tindices", ti},
                                     {"bad_indices_policy", policy}};
  const std::string d_tensor = grad::GradName("tensor"), d_updates = grad::GradName("updates");
  if (op == "TensorScatterUpdate" || op == "TensorScatterAdd" || op == "TensorScatterSub") {
    // d(updates) = +-d(output)[indices]
    b.Add({{"gathered"}, "GatherNd", {d, "indices"}, gather_nd, dep});
    if (op == "TensorScatterSub") {
      b.Return("updates", b.Add({{"dupdates"}, "Neg", {"gathered"}, t}));
    } else {
      b.Return("updates", b.Add({{"dupdates"}, "Identity", {"gathered"}, t}));
    }
    if (op == "TensorScatterUpdate") {
      // d(tensor) = d(output) with the overwritten slices zeroed
      b.Add({{"zero_updates"}, "ZerosLike", {"updates"}, t});
      b.Return("tensor", b.Add({{"dtensor"}, "TensorScatterUpdate", {d, "indices", "zero_updates"},
                                b.PassAttrs({"T", "Tindices", "bad_indices_policy"}), dep}));
    } else {
      // d(tensor) = d(output)
      b.Return("tensor", b.Add({{"dtensor"}, "Identity", {d}, t, dep}));
    }
  } else {
    // Max / Min: d(output) shared equally among the inputs equal to the result (ties), as
    // Python: tensor's entries where tensor == output, updates' where update == output[index].
    const grad::FDH::AttrValueWrapper tt = grad::Placeholder("T");
    // the forward output: given by front ends that have it, else recomputed after the index
    // check (the recomputation would otherwise fail first, with its own message)
    std::string out = "output";
    if (!b.with_outputs()) {
      out = b.Add({{"forward"}, op, {"tensor", "indices", "updates"},
                   b.PassAttrs({"T", "Tindices", "bad_indices_policy"}), dep});
    }
    b.Add({{"x_hit"}, "Equal", {"tensor", out}, t});
    b.Add({{"x_ind"}, "Cast", {"x_hit"}, {{"SrcT", DT_BOOL}, {"DstT", tt}}});
    b.Add({{"y_output"}, "GatherNd", {out, "indices"}, gather_nd, dep});
    b.Add({{"y_hit"}, "Equal", {"updates", "y_output"}, t});
    b.Add({{"y_ind"}, "Cast", {"y_hit"}, {{"SrcT", DT_BOOL}, {"DstT", tt}}});
    b.Add({{"shape"}, "Shape", {"tensor"}, {{"T", tt}, {"out_type", ti}}});
    b.Add({{"y_ind_scattered"}, "ScatterNd", {"indices", "y_ind", "shape"},
           {{"T", tt}, {"Tindices", ti}, {"bad_indices_policy", policy}}, dep});
    b.Add({{"count"}, "AddV2", {"x_ind", "y_ind_scattered"}, t});  // >= 1 everywhere
    b.Add({{"shared"}, "RealDiv", {d, "count"}, t});                // d(output) / ties
    // d(tensor) = d(output) [tensor == output] / ties
    b.Return("tensor", b.Add({{"dtensor"}, "Mul", {"shared", "x_ind"}, t}));
    b.Add({{"shared_y"}, "GatherNd", {"shared", "indices"}, gather_nd, dep});
    // d(updates) = (d(output) / ties)[indices] [update == output[index]]
    b.Return("updates", b.Add({{"dupdates"}, "Mul", {"shared_y", "y_ind"}, t}));
  }
  b.NotDifferentiable("indices");
  return b.Build(g);
}

// TensorStridedSliceUpdate(input, begin, end, strides, value) = input with the strided slice
// set to value (broadcast): d(input) = d(output) with the slice zeroed, d(value) = the slice of
// d(output), summed over the axes value was broadcast along.
absl::Status TensorStridedSliceUpdateGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TensorStridedSliceUpdate", attrs);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const grad::FDH::AttrValueWrapper index = grad::Placeholder("Index");
  const grad::NodeAttrs slice_attrs = b.PassAttrs({"T", "Index", "begin_mask", "end_mask",
                                                   "ellipsis_mask", "new_axis_mask",
                                                   "shrink_axis_mask"});
  const std::string d = grad::GradName("output");
  b.Add({{"slice_grad"}, "StridedSlice", {d, "begin", "end", "strides"}, slice_attrs});
  b.Add({{"zeros"}, "ZerosLike", {"slice_grad"}, t});
  // d(input) = d(output) with the updated slice set to 0
  b.Return("input", b.Add({{"dinput"}, "TensorStridedSliceUpdate",
                           {d, "begin", "end", "strides", "zeros"}, slice_attrs}));
  b.Add({{"slice_shape"}, "Shape", {"slice_grad"}, {{"T", grad::Placeholder("T")},
                                                    {"out_type", index}}});
  b.Add({{"value_shape"}, "Shape", {"value"}, {{"T", grad::Placeholder("T")}, {"out_type", index}}});
  b.Add({{"slice_axes", "value_axes"}, "BroadcastGradientArgs", {"slice_shape", "value_shape"},
         {{"T", index}}});
  b.Add({{"summed"}, "Sum", {"slice_grad", "value_axes"},
         {{"T", grad::Placeholder("T")}, {"Tidx", index}, {"keep_dims", true}}});
  // d(value) = the slice of d(output), summed over value's broadcast axes
  b.Return("value", b.Add({{"dvalue"}, "Reshape", {"summed", "value_shape"},
                           {{"T", grad::Placeholder("T")}, {"Tshape", index}}}));
  b.NotDifferentiable("begin");
  b.NotDifferentiable("end");
  b.NotDifferentiable("strides");
  return b.Build(g);
}

// CompositeTensorVariantFromComponents(components: Tcomponents; metadata) encodes a composite
// tensor (a TypeSpec in metadata, its component tensors) as one variant, and
// CompositeTensorVariantToComponents decodes it; each one's gradient is the other, as Python:
//   d(components) = ToComponents(d(encoded))
//   d(encoded) = FromComponents(components'), component i of components' being d(component i)
//                for a floating or complex component and the forward's component otherwise
// (Python puts the forward's component where no gradient flows, None: its integer row splits,
// shapes, ...; a SymbolicGradient's incoming gradients are zeros there, which would encode a
// different structure).
absl::Status CompositeTensorFromComponentsGrad(const AttrSlice& attrs, FunctionDef* g) {
  std::string metadata;
  DataTypeVector types;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "metadata", &metadata));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tcomponents", &types));
  std::vector<std::string> in, out, rets;
  for (size_t i = 0; i < types.size(); ++i) {
    in.push_back(absl::StrCat("component_", i, ": ", DataTypeString(types[i])));
    out.push_back(absl::StrCat("d_component_", i, ": ", DataTypeString(types[i])));
    rets.push_back(absl::StrCat("d_component_", i));
  }
  in.push_back("d_encoded: variant");
  // d(components) = the components d(encoded) holds
  std::vector<FunctionDefHelper::Node> nodes = {
      {rets, "CompositeTensorVariantToComponents", {"d_encoded"},
       {{"metadata", metadata}, {"Tcomponents", types}}}};
  *g = FunctionDefHelper::Define(in, out, {}, nodes);
  return absl::OkStatus();
}

absl::Status CompositeTensorToComponentsGrad(const AttrSlice& attrs, FunctionDef* g) {
  std::string metadata;
  DataTypeVector types;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "metadata", &metadata));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tcomponents", &types));
  std::vector<std::string> in = {"encoded: variant"}, fwd, components;
  for (size_t i = 0; i < types.size(); ++i) {
    in.push_back(absl::StrCat("d_component_", i, ": ", DataTypeString(types[i])));
    fwd.push_back(absl::StrCat("fwd_", i));
    const bool differentiable = DataTypeIsFloating(types[i]) || DataTypeIsComplex(types[i]);
    components.push_back(differentiable ? absl::StrCat("d_component_", i) : fwd.back());
  }
  std::vector<FunctionDefHelper::Node> nodes = {
      // the forward's components (those no gradient flows through are encoded as they are)
      {fwd, "CompositeTensorVariantToComponents", {"encoded"},
       {{"metadata", metadata}, {"Tcomponents", types}}},
      // d(encoded) = the gradients encoded in the forward's structure
      {{"d_encoded"}, "CompositeTensorVariantFromComponents", components,
       {{"metadata", metadata}, {"Tcomponents", types}}}};
  *g = FunctionDefHelper::Define(in, {"d_encoded: variant"}, {}, nodes);
  return absl::OkStatus();
}

// Split(split_dim, value) = num_split slices: d(value) = concat(d(output), split_dim), as
// TensorFlow's; a single slice (num_split 1, which Concat's N >= 2 refuses) passes d(output)
// through, as Python's concat of one tensor does.
absl::Status SplitGrad(const AttrSlice& attrs, FunctionDef* g) {
  int64_t num_split = 0;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "num_split", &num_split));
  if (num_split != 1) {
    gradient::Creator tensorflows;
    if (!FindReplacedTfGradient("Split", &tensorflows)) {
      return absl::NotFoundError("Split: TensorFlow's gradient, which tf_ext's builds on, is missing");
    }
    return tensorflows(attrs, g);
  }
  // One slice: arguments split_dim, value, d(output) (a list of one; GradBuilder takes single
  // tensors only, so the function is written out).
  *g = FunctionDefHelper::Define(
      {"split_dim: int32", "value: T", "d_output: T"}, {"d_split_dim: int32", "d_value: T"},
      {"T: type"},
      {{{"d_value"}, "Identity", {"d_output"}, {{"T", "$T"}}},  // d(value) = d(output)[0]
       {{"d_split_dim"}, "ZerosLike", {"split_dim"}, {{"T", DT_INT32}}}});
  return absl::OkStatus();
}

// GatherV2(params, indices, axis): TensorFlow's gradient (its C++ client gradient, converted;
// Python's _GatherV2Grad: the axis moved up, an unsorted segment sum, moved back) with the axis
// made non-negative first, axis mod rank(params), as the kernel takes it. Overrides TensorFlow's
// (declared below).
absl::Status GatherV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  gradient::Creator tensorflows;
  if (!FindReplacedTfGradient("GatherV2", &tensorflows)) {
    return absl::NotFoundError("GatherV2: TensorFlow's gradient, which tf_ext's builds on, is missing");
  }
  DataType params_type, axis_type;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tparams", &params_type));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Taxis", &axis_type));
  // TensorFlow's gradient is built for an int32 axis (it slices the int32 params shape at the
  // axis, and fails to build for an int64 one); the axis argument keeps its own type.
  AttrValueMap int32_axis(attrs.begin(), attrs.end());
  int32_axis["Taxis"].set_type(DT_INT32);
  TF_RETURN_IF_ERROR(tensorflows(AttrSlice(&int32_axis), g));
  // The converted function's arguments are x_0 (params), x_1 (indices), x_2 (axis), then dy_0,
  // its results one per input (unify.h): every read of x_2 reads int32(axis mod rank(params)).
  const std::string params = "x_0", axis = "x_2";
  OpDef::ArgDef* axis_arg = g->mutable_signature()->mutable_input_arg(2);
  if (g->signature().input_arg_size() != 4 || g->signature().output_arg_size() != 3 ||
      axis_arg->name() != axis || g->signature().input_arg(0).name() != params) {
    return absl::InternalError("GatherV2: TensorFlow's converted gradient has another signature");
  }
  TF_RETURN_IF_ERROR(grad::RedirectArgumentReads(g, axis, "axis_nonneg:y:0"));
  axis_arg->set_type(axis_type);
  auto add = [g](const std::string& name, const std::string& op,
                 std::initializer_list<std::string> inputs) {
    NodeDef* n = g->add_node_def();
    n->set_name(name);
    n->set_op(op);
    for (const std::string& in : inputs) n->add_input(in);
    return n;
  };
  AddNodeAttr("T", params_type, add("axis_rank", "Rank", {params}));
  NodeDef* rank = add("axis_rank_cast", "Cast", {"axis_rank:output:0"});
  AddNodeAttr("SrcT", DT_INT32, rank);
  AddNodeAttr("DstT", axis_type, rank);
  // axis mod rank(params): the same axis for -rank <= axis < rank
  AddNodeAttr("T", axis_type, add("axis_mod", "FloorMod", {axis, "axis_rank_cast:y:0"}));
  NodeDef* nonneg = add("axis_nonneg", "Cast", {"axis_mod:z:0"});
  AddNodeAttr("SrcT", axis_type, nonneg);
  AddNodeAttr("DstT", DT_INT32, nonneg);
  // d(axis) = 0, of the axis's own type.
  AddNodeAttr("T", axis_type, add("axis_zeros", "ZerosLike", {axis}));
  OpDef::ArgDef* axis_grad = g->mutable_signature()->mutable_output_arg(2);
  axis_grad->set_type(axis_type);
  (*g->mutable_ret())[axis_grad->name()] = "axis_zeros:y:0";
  return absl::OkStatus();
}

// Slice(input, begin, size): d(input) = d(output) padded back to the input's shape, the padding
// after each axis computed from the output's shape (a size of -1 means "to the end").
// Overrides TensorFlow's function gradient (declared below).
absl::Status SliceGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Slice", attrs);
  const grad::FDH::AttrValueWrapper index = b.TypeOf("begin");
  const grad::NodeAttrs ix = {{"T", index}};
  b.Add({{"input_shape"}, "Shape", {"input"}, {{"T", b.TypeOf("input")}, {"out_type", index}}});
  b.Add({{"output_shape"}, "Shape", {grad::GradName("output")},
         {{"T", b.TypeOf("output")}, {"out_type", index}}});
  b.Add({{"rest"}, "Sub", {"input_shape", "begin"}, ix});
  b.Add({{"after"}, "Sub", {"rest", "output_shape"}, ix});  // shape(input) - begin - shape(output)
  b.Add(grad::FDH::Const<int32>("one", 1));
  b.Add({{"before_column"}, "ExpandDims", {"begin", "one"}, {{"T", index}, {"Tdim", DT_INT32}}});
  b.Add({{"after_column"}, "ExpandDims", {"after", "one"}, {{"T", index}, {"Tdim", DT_INT32}}});
  b.Add({{"paddings"}, "ConcatV2", {"before_column", "after_column", "one"},
         {{"N", 2}, {"T", index}, {"Tidx", DT_INT32}}});
  // d(input) = pad(d(output), [begin, shape(input) - begin - shape(output)])
  b.Return("input", b.Add({{"dinput"}, "Pad", {grad::GradName("output"), "paddings"},
                           {{"T", b.TypeOf("input")}, {"Tpaddings", index}}}));
  b.NotDifferentiable("begin");  // integer offsets
  b.NotDifferentiable("size");   // integer sizes
  return b.Build(g);
}

// Reshape(tensor, shape): d(tensor) = d(output) reshaped to the tensor's shape, in the op's
// own index type (Tshape: int32 or int64). Overrides TensorFlow's function gradient (declared
// below).
absl::Status ReshapeGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Reshape", attrs);
  const grad::FDH::AttrValueWrapper index = b.TypeOf("shape");
  const grad::FDH::AttrValueWrapper type = b.TypeOf("tensor");
  b.Add({{"tensor_shape"}, "Shape", {"tensor"}, {{"T", type}, {"out_type", index}}});
  b.Return("tensor", b.Add({{"dtensor"}, "Reshape", {grad::GradName("output"), "tensor_shape"},
                            {{"T", type}, {"Tshape", index}}}));
  b.NotDifferentiable("shape");  // integer sizes
  return b.Build(g);
}

// BroadcastTo(input, shape): d(input) = d(output) summed over the broadcast axes (kept), reshaped
// to the input's shape, the axes from BroadcastGradientArgs(shape, shape(input)); every index
// in the type of `shape`, int32 or int64 (Python's _BroadcastToGrad). Overrides TensorFlow's
// (declared below).
absl::Status BroadcastToGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("BroadcastTo", attrs);
  const grad::FDH::AttrValueWrapper index = b.TypeOf("shape");
  const grad::FDH::AttrValueWrapper type = b.TypeOf("input");
  b.Add({{"input_shape"}, "Shape", {"input"}, {{"T", type}, {"out_type", index}}});
  b.Add({{"output_axes", "input_axes"}, "BroadcastGradientArgs", {"shape", "input_shape"},
         {{"T", index}}});
  b.Add({{"summed"}, "Sum", {grad::GradName("output"), "input_axes"},
         {{"T", type}, {"Tidx", index}, {"keep_dims", true}}});
  b.Return("input", b.Add({{"dinput"}, "Reshape", {"summed", "input_shape"},
                           {{"T", type}, {"Tshape", index}}}));
  b.NotDifferentiable("shape");  // integer sizes
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("CompositeTensorVariantFromComponents",
                            CompositeTensorFromComponentsGrad);
TF_EXT_REGISTER_TF_GRADIENT("CompositeTensorVariantToComponents",
                            CompositeTensorToComponentsGrad);
TF_EXT_REGISTER_TF_GRADIENT("IdentityN", IdentityNGrad);

// Gradients of TensorFlow's that are wrong: replaced in every registry (docs/registries.md).
TF_EXT_DECLARE_OP("Split")
    .Doc("Splits a tensor into num_split slices along an axis (TensorFlow's op).")
    .Gradient(&SplitGrad, "d(value) = concat(d(output), split_dim); num_split 1: d(output)")
    .Overrides("TensorFlow 2.21's function gradient concatenates the slices' gradients with "
               "Concat, whose N must be at least 2: a Split into one slice had no gradient")
    .Register();
TF_EXT_DECLARE_OP("GatherV2")
    .Doc("Gathers slices along an axis (TensorFlow's op).")
    .Gradient(&GatherV2Grad, "d(params) = TensorFlow's gradient with axis mod rank(params)")
    .Overrides("TensorFlow 2.21's gradient (cc/gradients/array_grad.cc, the only one: a client "
               "gradient) slices the params' shape at the axis as given: a negative axis fails "
               "('Expected begin[0] in [0, 2], but got -1'), and an int64 axis fails to build")
    .Register();
TF_EXT_DECLARE_OP("Slice")
    .Doc("A slice of a tensor (TensorFlow's op).")
    .Gradient(&SliceGrad, "d(input) = pad(d(output), [begin, shape(input) - begin - "
                          "shape(output)])")
    .Overrides("TensorFlow 2.21's function gradient pads by shape(input) - begin - size: a size "
               "of -1 (to the end) gives a gradient of the wrong shape; int64 indices are "
               "refused")
    .Register();
TF_EXT_DECLARE_OP("Reshape")
    .Doc("Reshapes a tensor (TensorFlow's op).")
    .Gradient(&ReshapeGrad, "d(tensor) = reshape(d(output), shape(tensor))")
    .Overrides("TensorFlow 2.21's function gradient declares the shape int32 whatever Tshape "
               "is: with an int64 shape its function's arguments are not the op's (a graph "
               "gradient fails to bind them)")
    .Register();
TF_EXT_DECLARE_OP("BroadcastTo")
    .Doc("Broadcasts a tensor to a shape (TensorFlow's op).")
    .Gradient(&BroadcastToGrad, "d(input) = reshape(sum(d(output), broadcast axes), shape(input))")
    .Overrides("TensorFlow 2.21's gradient (cc/gradients/array_grad.cc, a client gradient) "
               "refuses an int64 shape ('BroadcastToGrad for int64 index are not supported')")
    .Register();
TF_EXT_REGISTER_TF_GRADIENT("PlaceholderWithDefault", [](const AttrSlice& a, FunctionDef* g) {
  return PassThroughGrad("PlaceholderWithDefault", "input", "output", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("EnsureShape", [](const AttrSlice& a, FunctionDef* g) {
  return PassThroughGrad("EnsureShape", "input", "output", a, g);
});
// The debugger's identities (Python: debug/lib/debug_gradients.py, dumping_callback.py) pass
// the gradient through, d(input) = d(output); Python's DebugGradientIdentity gradient also
// hands d(output) to its GradientsDebugger, which a C++ process does not have.
TF_EXT_REGISTER_TF_GRADIENT("DebugGradientIdentity", [](const AttrSlice& a, FunctionDef* g) {
  return PassThroughGrad("DebugGradientIdentity", "input", "output", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("DebugGradientRefIdentity", [](const AttrSlice& a, FunctionDef* g) {
  return PassThroughGrad("DebugGradientRefIdentity", "input", "output", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("DebugIdentityV2", [](const AttrSlice& a, FunctionDef* g) {
  return PassThroughGrad("DebugIdentityV2", "input", "output", a, g);
});
// _EagerConst (eager constants placed on a device) is never differentiated: Python's gradient
// only raises, and so does C++'s, with Python's message.
static const bool eager_const_refused [[maybe_unused]] =
    LookupGradientKind("_EagerConst") != GradientKind::kMissing ||
    RegisterUnimplementedGradient(
        "_EagerConst", "This op should never interact with gradient APIs. Please file a bug.");
TF_EXT_REGISTER_TF_GRADIENT("CheckNumericsV2", CheckNumericsV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("PreventGradient", PreventGradientGrad);
TF_EXT_REGISTER_TF_GRADIENT("Print", PrintGrad);
TF_EXT_REGISTER_TF_GRADIENT("Gather", GatherGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorStridedSliceUpdate", TensorStridedSliceUpdateGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorScatterUpdate", [](const AttrSlice& a, FunctionDef* g) {
  return TensorScatterGrad("TensorScatterUpdate", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("TensorScatterAdd", [](const AttrSlice& a, FunctionDef* g) {
  return TensorScatterGrad("TensorScatterAdd", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("TensorScatterSub", [](const AttrSlice& a, FunctionDef* g) {
  return TensorScatterGrad("TensorScatterSub", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("TensorScatterMax", [](const AttrSlice& a, FunctionDef* g) {
  return TensorScatterGrad("TensorScatterMax", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("TensorScatterMin", [](const AttrSlice& a, FunctionDef* g) {
  return TensorScatterGrad("TensorScatterMin", a, g);
});

}  // namespace tensorflow::tf_ext
