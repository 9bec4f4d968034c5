// Gradients of TensorFlow's TensorArray ops, which TensorFlow 2.21 has only in Python
// (python/ops/tensor_array_grad.py): version 3 (resource handles), and versions 1 and 2 (string
// handles, a reference in version 1). Written from the maths of Python's gradients; each is
// registered in both C++ registries when the op library loads, unless TensorFlow has one
// already (TF_EXT_REGISTER_TF_GRADIENT).
//
// Versions 1 and 2. TensorFlow 2.21 builds and runs their ops only in graphs whose GraphDef
// producer version is below the version that removed them (op deprecation: 16 for version 1,
// 19 for TensorArrayScatter, 26 for version 2; TensorArrayConcatV2 was never removed, but its
// handle comes from TensorArrayV2); Python's graph builder refuses them otherwise ("Op
// TensorArrayV2 is not available in GraphDef version 2474. It has been removed in version
// 26"). Python registers its version 3 functions for them, which cannot build in TensorFlow
// 2.21: with control flow v2 (the default) its TensorArray wrapper refuses a given handle (an
// assert), with control flow v1 it builds TensorArrayGradV3 on the string handle (a
// TypeError). The gradients here are the same maths on the version 2 ops: a function's
// arguments are never references, so a version 1 handle reaches the body as its value (the two
// strings naming the array), which the version 2 ops take; those exist wherever version 1 ops
// do (producer < 16). The string handle gets zeros (empty strings), as Python's None.
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
// (core/common_runtime/gradients.cc, tf_ext/graph/engine/backprop.cc) ask for a float gradient of a
// resource input. Indices, lengths and sizes get zeros.
//
// Known limits (TensorFlow 2.21), outside these gradients:
//   - TensorFlow's function-level builder (SymbolicGradient of a *function* that holds a
//     TensorArrayV3) sums the float gradients of the array's handle with an AddN typed
//     DT_RESOURCE (SumGradients takes the forward tensor's dtype): the node is invalid and the
//     process dies. tf_ext's builder (tf_ext/graph/engine/backprop.cc, tf_ext_grad) never sums
//     gradients of a handle (no handle depends on x), and works.
//   - The C++ client registry's SymbolicGradient node (registry.cc) declares the handle's
//     gradient as DT_RESOURCE, not DT_FLOAT as both builders above do: the run fails with
//     "Output 0 of type float does not match declared output type resource".
//
// Tested in tests/python/test_list_grads.py (SymbolicGradient and tf_ext_grad against Python's
// tf.gradients; eager GradientTape cannot differentiate TensorArrayV3 ops); versions 1 and 2 in
// tests/python/test_tensor_array_v1v2_grads.py (in graphs of producer version 15, against
// Python's gradients of the same graph in version 3 ops, and against central differences).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

// The `source` of the gradient arrays (see above).
constexpr char kGradSource[] = "tf_ext_gradients";
constexpr char kGradSourceAttr[] = "_tf_ext_grad_source";

std::string GradSource(const AttrSlice& attrs) {
  std::string source;
  if (GetNodeAttr(attrs, kGradSourceAttr, &source).ok() && !source.empty()) return source;
  return kGradSource;
}

// The ops of TensorArray version `version` (1, 2 or 3) that a gradient body uses: version 3's,
// or version 2's for versions 1 and 2 (see above).
struct Ops {
  explicit Ops(int version) : version(version), v3(version == 3) {}
  // "TensorArrayWrite" -> "TensorArrayWriteV3" / "TensorArrayWriteV2".
  std::string operator()(const std::string& base) const {
    return absl::StrCat(base, v3 ? "V3" : "V2");
  }
  // The forward op of this version: "TensorArrayConcat" -> "TensorArrayConcatV2".
  std::string forward(const std::string& base) const {
    return version == 1 ? base : absl::StrCat(base, "V", version);
  }
  // The type of the forward handle argument.
  std::string handle_arg() const { return v3 ? "handle: resource" : "handle: string"; }
  // The type of d(handle).
  std::string handle_grad_type() const { return v3 ? "float" : "string"; }
  int version;
  bool v3;
};

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
  explicit TaGrad(int version) : ops(version) {}
  Ops ops;
  std::vector<std::string> args;
  std::vector<std::string> attrs;
  std::vector<FDH::Node> nodes;

  // The function returning `results`, one per forward input in order, d(handle) first.
  absl::Status Build(const std::vector<Result>& results, FunctionDef* g) {
    if (ops.v3) {
      // d(handle) = 0, a float (see above).
      nodes.push_back(FDH::Const<float>("zero_handle_grad", 0.0f));
    } else {
      // d(handle) = empty strings, the handle's zeros.
      nodes.push_back({{"zero_handle_grad"}, "ZerosLike", {"handle"}, {{"T", DT_STRING}}});
    }
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
// and "ga_flow". TensorArrayGradV2 has no flow output: its flow is `flow` itself.
void AddGradArray(TaGrad* f, const AttrSlice& attrs, const std::string& flow) {
  if (f->ops.v3) {
    f->nodes.push_back({{"ga", "ga_flow"}, "TensorArrayGradV3", {"handle", flow},
                        {{"source", GradSource(attrs)}}});
  } else {
    f->nodes.push_back({{"ga"}, "TensorArrayGradV2", {"handle", flow},
                        {{"source", GradSource(attrs)}}});
    f->nodes.push_back({{"ga_flow"}, "Identity", {flow}, {{"T", DT_FLOAT}}});
  }
}

// TensorArrayRead[V2|V3](handle, index, flow_in) -> value = array[index].
absl::Status ReadGrad(int version, const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f(version);
  f.args = {f.ops.handle_arg(), "index: int32", "flow_in: float", "d_value: dtype"};
  f.attrs = {"dtype: type"};
  // The gradient array, created once the forward ops before this one are done.
  AddGradArray(&f, attrs, "flow_in");
  f.nodes.insert(f.nodes.end(), {
      // grad_array[index] += d(value)
      {{"written"}, f.ops("TensorArrayWrite"), {"ga", "index", "d_value", "ga_flow"},
       {{"T", Placeholder("dtype")}}},
      {{"zero_index"}, "ZerosLike", {"index"}, {{"T", DT_INT32}}},
  });
  return f.Build({{"d_handle", f.ops.handle_grad_type(), "zero_handle_grad"},
                  {"d_index", "int32", "zero_index"},
                  {"d_flow_in", "float", "written"}},
                 g);
}

// TensorArrayWrite[V2|V3](handle, index, value, flow_in) -> flow_out; array[index] = value.
absl::Status WriteGrad(int version, const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f(version);
  f.args = {f.ops.handle_arg(), "index: int32", "value: T", "flow_in: float",
            "d_flow_out: float"};
  f.attrs = {"T: type"};
  // The gradient array, after every gradient written to it downstream (d_flow_out).
  AddGradArray(&f, attrs, "d_flow_out");
  f.nodes.insert(f.nodes.end(), {
      // d(value) = grad_array[index] (zeros if no read of it was differentiated and the
      // element shape is known; TensorFlow's error otherwise, as in Python)
      {{"read"}, f.ops("TensorArrayRead"), {"ga", "index", "ga_flow"},
       {{"dtype", Placeholder("T")}}},
      {{"zero_index"}, "ZerosLike", {"index"}, {{"T", DT_INT32}}},
  });
  // d(flow_in) = d(flow_out): the gradient array's flow, for the writes before this one.
  return f.Build({{"d_handle", f.ops.handle_grad_type(), "zero_handle_grad"},
                  {"d_index", "int32", "zero_index"},
                  {"d_value", "T", "read"},
                  {"d_flow_in", "float", "d_flow_out"}},
                 g);
}

// TensorArrayGather[V2|V3](handle, indices, flow_in) -> value; value[j] = array[indices[j]].
absl::Status GatherGrad(int version, const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f(version);
  f.args = {f.ops.handle_arg(), "indices: int32", "flow_in: float", "d_value: dtype"};
  f.attrs = {"dtype: type", "element_shape: shape"};
  // The gradient array, created once the forward ops before this one are done.
  AddGradArray(&f, attrs, "flow_in");
  f.nodes.insert(f.nodes.end(), {
      // grad_array[indices[j]] += d(value)[j]
      {{"scattered"}, f.ops("TensorArrayScatter"), {"ga", "indices", "d_value", "ga_flow"},
       {{"T", Placeholder("dtype")}}},
      {{"zero_indices"}, "ZerosLike", {"indices"}, {{"T", DT_INT32}}},
  });
  return f.Build({{"d_handle", f.ops.handle_grad_type(), "zero_handle_grad"},
                  {"d_indices", "int32", "zero_indices"},
                  {"d_flow_in", "float", "scattered"}},
                 g);
}

// TensorArrayScatter[V2|V3](handle, indices, value, flow_in) -> flow_out;
// array[indices[j]] = value[j].
absl::Status ScatterGrad(int version, const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f(version);
  f.args = {f.ops.handle_arg(), "indices: int32", "value: T", "flow_in: float",
            "d_flow_out: float"};
  f.attrs = {"T: type"};
  // The gradient array, after every gradient written to it downstream (d_flow_out).
  AddGradArray(&f, attrs, "d_flow_out");
  f.nodes.insert(f.nodes.end(), {
      // d(value)[j] = grad_array[indices[j]]
      {{"gathered"}, f.ops("TensorArrayGather"), {"ga", "indices", "ga_flow"},
       {{"dtype", Placeholder("T")}}},
      {{"zero_indices"}, "ZerosLike", {"indices"}, {{"T", DT_INT32}}},
  });
  return f.Build({{"d_handle", f.ops.handle_grad_type(), "zero_handle_grad"},
                  {"d_indices", "int32", "zero_indices"},
                  {"d_value", "T", "gathered"},
                  {"d_flow_in", "float", "d_flow_out"}},
                 g);
}

// TensorArrayConcat[V2|V3](handle, flow_in) -> (value = concat(array[0], ..., array[n-1]) along
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
absl::Status ConcatGrad(int version, const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f(version);
  const bool with_outputs = grad::WantsForwardOutputs(attrs);
  f.args = {f.ops.handle_arg(), "flow_in: float"};
  if (with_outputs) {
    f.args.push_back("value: dtype");
    f.args.push_back("lengths: int64");
  }
  f.args.push_back("d_value: dtype");
  f.args.push_back("d_lengths: int64");
  f.attrs = {"dtype: type", "element_shape_except0: shape"};
  AddGradArray(&f, attrs, "flow_in");
  std::string lengths = "lengths";
  if (!with_outputs) {
    // rows = d(value).shape[0], n = size(array); lengths = [rows / n] * n, with n | rows.
    f.nodes.push_back({{"size"}, f.ops("TensorArraySize"), {"handle", "flow_in"}, {}});
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
        "message",
        tstring(absl::StrCat(f.ops.forward("TensorArrayConcat"),
                             ": without the forward output lengths, its gradient assumes "
                             "elements of one shape, but the rows of the concatenation do not "
                             "divide into the size of the array (rows, size):"))));
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
  f.nodes.push_back({{"split"}, f.ops("TensorArraySplit"), {"ga", "d_value", lengths, "ga_flow"},
                     {{"T", Placeholder("dtype")}}});
  return f.Build({{"d_handle", f.ops.handle_grad_type(), "zero_handle_grad"},
                  {"d_flow_in", "float", "split"}},
                 g);
}

// TensorArraySplit[V2|V3](handle, value, lengths, flow_in) -> flow_out;
// array[i] = value[offset_i : offset_i + lengths[i]].
absl::Status SplitGrad(int version, const AttrSlice& attrs, FunctionDef* g) {
  TaGrad f(version);
  f.args = {f.ops.handle_arg(), "value: T", "lengths: int64", "flow_in: float",
            "d_flow_out: float"};
  f.attrs = {"T: type"};
  // The gradient array, after every gradient written to it downstream (d_flow_out).
  AddGradArray(&f, attrs, "d_flow_out");
  f.nodes.insert(f.nodes.end(), {
      // d(value) = concat(grad_array[0], ..., grad_array[n-1]) along axis 0
      {{"concat", "concat_lengths"}, f.ops("TensorArrayConcat"), {"ga", "ga_flow"},
       {{"dtype", Placeholder("T")}}},
      {{"zero_lengths"}, "ZerosLike", {"lengths"}, {{"T", DT_INT64}}},
  });
  return f.Build({{"d_handle", f.ops.handle_grad_type(), "zero_handle_grad"},
                  {"d_value", "T", "concat"},
                  {"d_lengths", "int64", "zero_lengths"},
                  {"d_flow_in", "float", "d_flow_out"}},
                 g);
}

// A gradient of version `version`'s op, as a gradient creator.
template <absl::Status (*Grad)(int, const AttrSlice&, FunctionDef*), int version>
absl::Status Versioned(const AttrSlice& attrs, FunctionDef* g) {
  return Grad(version, attrs, g);
}

// Front ends that have the forward node pass the concats' outputs (their exact lengths).
bool DeclareConcatsReadOutputs() {
  for (const char* op : {"TensorArrayConcat", "TensorArrayConcatV2", "TensorArrayConcatV3"}) {
    DeclareReadsForwardOutputs(op);
  }
  return true;
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("TensorArrayReadV3", (Versioned<ReadGrad, 3>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayWriteV3", (Versioned<WriteGrad, 3>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayGatherV3", (Versioned<GatherGrad, 3>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayScatterV3", (Versioned<ScatterGrad, 3>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayConcatV3", (Versioned<ConcatGrad, 3>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArraySplitV3", (Versioned<SplitGrad, 3>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayReadV2", (Versioned<ReadGrad, 2>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayWriteV2", (Versioned<WriteGrad, 2>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayGatherV2", (Versioned<GatherGrad, 2>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayScatterV2", (Versioned<ScatterGrad, 2>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayConcatV2", (Versioned<ConcatGrad, 2>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArraySplitV2", (Versioned<SplitGrad, 2>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayRead", (Versioned<ReadGrad, 1>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayWrite", (Versioned<WriteGrad, 1>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayGather", (Versioned<GatherGrad, 1>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayScatter", (Versioned<ScatterGrad, 1>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArrayConcat", (Versioned<ConcatGrad, 1>));
TF_EXT_REGISTER_TF_GRADIENT("TensorArraySplit", (Versioned<SplitGrad, 1>));
static const bool concats_read_outputs [[maybe_unused]] = DeclareConcatsReadOutputs();
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
