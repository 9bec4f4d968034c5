// Gradients of TensorFlow's TensorArray ops (version 3, the resource-handle ones), which
// TensorFlow 2.21 has only in Python (python/ops/tensor_array_grad.py). Written from the maths
// of Python's gradients; each is registered in both C++ registries when the op library loads,
// unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// How a TensorArray is differentiated. The array is state (a resource); the float `flow`
// tensors that thread through its ops only order them. The gradient of the array is a second
// array, obtained with TensorArrayGradV3(handle, flow, source): TensorFlow creates it on first
// use (same size and element shape, writes to one index summed) and returns the same array to
// every later call with the same forward handle and `source`. So
//   - a read's gradient writes d(value) into the gradient array at the read's index, and
//     returns the gradient array's flow as d(flow_in);
//   - a write's gradient receives that flow as d(flow_out), and reads d(value) back from the
//     gradient array at its index; d(flow_in) = d(flow_out).
// The flow passed from one gradient to the next orders the gradient array's writes before its
// reads, as the forward flow ordered the forward ops. Python gives each tf.gradients call its
// own `source` (its name scope); a C++ gradient creator sees only the node's attrs, so here the
// source is kGradSource, or the forward node's attr kGradSourceAttr when a front end sets one:
// two gradients of the same TensorArray computed in one run must set different ones, or their
// gradient arrays would be shared (and summed).
//
// The handle (DT_RESOURCE) gets a float zero: TensorFlow's gradient builders
// (core/common_runtime/gradients.cc, tf_ext/graph/backprop.cc) ask for a float gradient of a
// resource input. Indices, lengths and sizes get zeros.
//
// Known limits (TensorFlow 2.21), outside these gradients:
//   - TensorFlow's function-level builder (SymbolicGradient of a *function* that holds a
//     TensorArrayV3) sums the float gradients of the array's handle with an AddN typed
//     DT_RESOURCE (SumGradients takes the forward tensor's dtype): the node is invalid and the
//     process dies. tf_ext's builder (tf_ext/graph/backprop.cc, tf_ext_grad) never sums
//     gradients of a handle (no handle depends on x), and works.
//   - The C++ client registry's SymbolicGradient node (registry.cc) declares the handle's
//     gradient as DT_RESOURCE, not DT_FLOAT as both builders above do: the run fails with
//     "Output 0 of type float does not match declared output type resource".
//
// Tested in tests/python/test_list_grads.py (SymbolicGradient and tf_ext_grad against Python's
// tf.gradients; eager GradientTape cannot differentiate TensorArrayV3 ops).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {
namespace {

using grad::FDH;
using grad::Placeholder;

// The `source` of the gradient arrays (see above).
constexpr char kGradSource[] = "tf_ext_gradients";
constexpr char kGradSourceAttr[] = "_tf_ext_grad_source";

std::string GradSource(const AttrSlice& attrs) {
  std::string source;
  if (GetNodeAttr(attrs, kGradSourceAttr, &source).ok() && !source.empty()) return source;
  return kGradSource;
}

// One result of a gradient function: its name, type (a dtype name or a type attr of the op)
// and the node output it returns.
struct Result {
  std::string name;
  std::string type;
  std::string ref;
};

// One gradient function: the forward inputs and incoming gradients as SymbolicGradient passes
// them (`args`, "name: type"), the op's attrs it uses (`attrs`, "name: type") and its nodes.
struct TaGrad {
  std::vector<std::string> args;
  std::vector<std::string> attrs;
  std::vector<FDH::Node> nodes;

  // The function returning `results`, one per forward input in order, d(handle) first.
  absl::Status Build(const std::vector<Result>& results, FunctionDef* g) {
    // d(handle) = 0, a float (see above).
    nodes.push_back(FDH::Const<float>("zero_handle_grad", 0.0f));
    std::vector<std::string> rets;
    for (const Result& r : results) {
      rets.push_back(absl::StrCat(r.name, ": ", r.type));
      DataType dtype = DT_INVALID;
      const FDH::AttrValueWrapper t = DataTypeFromString(r.type, &dtype)
                                          ? FDH::AttrValueWrapper(dtype)
                                          : Placeholder(r.type);
      // FDH::Define names each result after the node of that name.
      nodes.push_back({{r.name}, "Identity", {r.ref}, {{"T", t}}});
    }
    *g = FDH::Define(args, rets, attrs, nodes);
    return absl::OkStatus();
  }
};

// The gradient array of `handle`, created after (or ordered by) `flow`: outputs "ga" (handle)
// and "ga_flow".
FDH::Node GradArray(const AttrSlice& attrs, const std::string& flow) {
  return {{"ga", "ga_flow"}, "TensorArrayGradV3", {"handle", flow}, {{"source", GradSource(attrs)}}};
}

// TensorArrayReadV3(handle, index, flow_in) -> value = array[index].
absl::Status ReadGrad(const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f;
  f.args = {"handle: resource", "index: int32", "flow_in: float", "d_value: dtype"};
  f.attrs = {"dtype: type"};
  f.nodes = {
      // The gradient array, created once the forward writes before this read are done.
      GradArray(attrs, "flow_in"),
      // grad_array[index] += d(value)
      {{"written"}, "TensorArrayWriteV3", {"ga", "index", "d_value", "ga_flow"},
       {{"T", Placeholder("dtype")}}},
      {{"zero_index"}, "ZerosLike", {"index"}, {{"T", DT_INT32}}},
  };
  return f.Build({{"d_handle", "float", "zero_handle_grad"},
                  {"d_index", "int32", "zero_index"},
                  {"d_flow_in", "float", "written"}},
                 g);
}

// TensorArrayWriteV3(handle, index, value, flow_in) -> flow_out; array[index] = value.
absl::Status WriteGrad(const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f;
  f.args = {"handle: resource", "index: int32", "value: T", "flow_in: float",
            "d_flow_out: float"};
  f.attrs = {"T: type"};
  f.nodes = {
      // The gradient array, after every gradient written to it downstream (d_flow_out).
      GradArray(attrs, "d_flow_out"),
      // d(value) = grad_array[index] (zeros if no read of it was differentiated and the
      // element shape is known; TensorFlow's error otherwise, as in Python)
      {{"read"}, "TensorArrayReadV3", {"ga", "index", "ga_flow"}, {{"dtype", Placeholder("T")}}},
      {{"zero_index"}, "ZerosLike", {"index"}, {{"T", DT_INT32}}},
  };
  // d(flow_in) = d(flow_out): the gradient array's flow, for the writes before this one.
  return f.Build({{"d_handle", "float", "zero_handle_grad"},
                  {"d_index", "int32", "zero_index"},
                  {"d_value", "T", "read"},
                  {"d_flow_in", "float", "d_flow_out"}},
                 g);
}

// TensorArrayGatherV3(handle, indices, flow_in) -> value; value[j] = array[indices[j]].
absl::Status GatherGrad(const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f;
  f.args = {"handle: resource", "indices: int32", "flow_in: float", "d_value: dtype"};
  f.attrs = {"dtype: type", "element_shape: shape"};
  f.nodes = {
      GradArray(attrs, "flow_in"),
      // grad_array[indices[j]] += d(value)[j]
      {{"scattered"}, "TensorArrayScatterV3", {"ga", "indices", "d_value", "ga_flow"},
       {{"T", Placeholder("dtype")}}},
      {{"zero_indices"}, "ZerosLike", {"indices"}, {{"T", DT_INT32}}},
  };
  return f.Build({{"d_handle", "float", "zero_handle_grad"},
                  {"d_indices", "int32", "zero_indices"},
                  {"d_flow_in", "float", "scattered"}},
                 g);
}

// TensorArrayScatterV3(handle, indices, value, flow_in) -> flow_out;
// array[indices[j]] = value[j].
absl::Status ScatterGrad(const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f;
  f.args = {"handle: resource", "indices: int32", "value: T", "flow_in: float",
            "d_flow_out: float"};
  f.attrs = {"T: type"};
  f.nodes = {
      GradArray(attrs, "d_flow_out"),
      // d(value)[j] = grad_array[indices[j]]
      {{"gathered"}, "TensorArrayGatherV3", {"ga", "indices", "ga_flow"},
       {{"dtype", Placeholder("T")}}},
      {{"zero_indices"}, "ZerosLike", {"indices"}, {{"T", DT_INT32}}},
  };
  return f.Build({{"d_handle", "float", "zero_handle_grad"},
                  {"d_indices", "int32", "zero_indices"},
                  {"d_value", "T", "gathered"},
                  {"d_flow_in", "float", "d_flow_out"}},
                 g);
}

// TensorArrayConcatV3(handle, flow_in) -> (value = concat(array[0], ..., array[n-1]) along
// axis 0, lengths[i] = array[i].shape[0]).
//
// The split of d(value) back into elements needs `lengths`, a forward output. A front end that
// passes forward outputs (grad_builder.h, kForwardOutputsAttr) gives the exact lengths.
// SymbolicGradient passes only inputs, and the concat cannot be recomputed (it clears the
// elements it read when the array has clear_after_read, Python's default, and a second concat
// would then fail, possibly the forward one); so there the lengths are size equal pieces of
// d(value)'s rows, which is exact for an array whose elements have one shape (Python's
// default infer_shape=True enforces it); rows not divisible by the size fail with
// InvalidArgument naming the op.
absl::Status ConcatGrad(const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f;
  const bool with_outputs = grad::WantsForwardOutputs(attrs);
  f.args = {"handle: resource", "flow_in: float"};
  if (with_outputs) {
    f.args.push_back("value: dtype");
    f.args.push_back("lengths: int64");
  }
  f.args.push_back("d_value: dtype");
  f.args.push_back("d_lengths: int64");
  f.attrs = {"dtype: type", "element_shape_except0: shape"};
  f.nodes = {GradArray(attrs, "flow_in")};
  std::string lengths = "lengths";
  if (!with_outputs) {
    // rows = d(value).shape[0], n = size(array); lengths = [rows / n] * n, with n | rows.
    f.nodes.push_back({{"size"}, "TensorArraySizeV3", {"handle", "flow_in"}, {}});
    f.nodes.push_back({{"size64"}, "Cast", {"size"}, {{"SrcT", DT_INT32}, {"DstT", DT_INT64}}});
    f.nodes.push_back({{"dshape"}, "Shape", {"d_value"},
                       {{"T", Placeholder("dtype")}, {"out_type", DT_INT64}}});
    f.nodes.push_back(FDH::Const<int32>("begin0", std::vector<int32>{0}));
    f.nodes.push_back(FDH::Const<int32>("end1", std::vector<int32>{1}));
    f.nodes.push_back({{"rows"}, "StridedSlice", {"dshape", "begin0", "end1", "end1"},
                       {{"T", DT_INT64}, {"Index", DT_INT32}, {"shrink_axis_mask", 1}}});
    f.nodes.push_back(FDH::Const<int64_t>("one64", 1));
    f.nodes.push_back({{"divisor"}, "Maximum", {"size64", "one64"}, {{"T", DT_INT64}}});
    f.nodes.push_back({{"piece"}, "FloorDiv", {"rows", "divisor"}, {{"T", DT_INT64}}});
    f.nodes.push_back({{"covered"}, "Mul", {"piece", "size64"}, {{"T", DT_INT64}}});
    f.nodes.push_back({{"divisible"}, "Equal", {"covered", "rows"}, {{"T", DT_INT64}}});
    f.nodes.push_back(FDH::Const<tstring>(
        "message", tstring("TensorArrayConcatV3: without the forward output lengths, its "
                           "gradient assumes elements of one shape, but the rows of the "
                           "concatenation do not divide into the size of the array (rows, "
                           "size):")));
    FDH::Node check = {{"check"}, "Assert", {"divisible", "message", "rows", "size64"},
                       {{"T", std::vector<DataType>{DT_STRING, DT_INT64, DT_INT64}},
                        {"summarize", 3}}};
    f.nodes.push_back(std::move(check));
    f.nodes.push_back({{"size_v"}, "Pack", {"size"}, {{"N", 1}, {"T", DT_INT32}}});
    FDH::Node fill = {{"even_lengths"}, "Fill", {"size_v", "piece"},
                      {{"T", DT_INT64}, {"index_type", DT_INT32}}};
    fill.dep = {"check"};
    f.nodes.push_back(std::move(fill));
    lengths = "even_lengths";
  }
  // grad_array[i] = d(value)[offset_i : offset_i + lengths[i]]
  f.nodes.push_back({{"split"}, "TensorArraySplitV3", {"ga", "d_value", lengths, "ga_flow"},
                     {{"T", Placeholder("dtype")}}});
  return f.Build({{"d_handle", "float", "zero_handle_grad"}, {"d_flow_in", "float", "split"}}, g);
}

// TensorArraySplitV3(handle, value, lengths, flow_in) -> flow_out;
// array[i] = value[offset_i : offset_i + lengths[i]].
absl::Status SplitGrad(const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f;
  f.args = {"handle: resource", "value: T", "lengths: int64", "flow_in: float",
            "d_flow_out: float"};
  f.attrs = {"T: type"};
  f.nodes = {
      GradArray(attrs, "d_flow_out"),
      // d(value) = concat(grad_array[0], ..., grad_array[n-1]) along axis 0
      {{"concat", "concat_lengths"}, "TensorArrayConcatV3", {"ga", "ga_flow"},
       {{"dtype", Placeholder("T")}}},
      {{"zero_lengths"}, "ZerosLike", {"lengths"}, {{"T", DT_INT64}}},
  };
  return f.Build({{"d_handle", "float", "zero_handle_grad"},
                  {"d_value", "T", "concat"},
                  {"d_lengths", "int64", "zero_lengths"},
                  {"d_flow_in", "float", "d_flow_out"}},
                 g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("TensorArrayReadV3", ReadGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayWriteV3", WriteGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayGatherV3", GatherGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayScatterV3", ScatterGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayConcatV3", ConcatGrad);
// Front ends that have the forward node pass ConcatV3's outputs (its exact lengths).
static const bool concat_reads_outputs [[maybe_unused]] =
    (DeclareReadsForwardOutputs("TensorArrayConcatV3"), true);
TF_EXT_REGISTER_TF_GRADIENT("TensorArraySplitV3", SplitGrad);
// Not differentiable, as in Python (tensor_array_grad.py): creating, sizing, closing an array
// and creating its gradient array.
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayV3", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayGradV3", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayGradWithShape", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArraySizeV3", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayCloseV3", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayV2", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayGradV2", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArraySizeV2", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayCloseV2", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArray", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayGrad", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArraySize", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayClose", nullptr);

}  // namespace tensorflow::tf_ext
