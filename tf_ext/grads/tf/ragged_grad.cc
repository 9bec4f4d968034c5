// Gradients of TensorFlow's ragged-tensor ops, which TensorFlow 2.21 has only in Python
// (python/ops/ragged/ragged_gather_ops.py, ragged_tensor.py, ragged_array_ops.py).
// Registered in both C++ registries when the op library loads, unless TensorFlow has them
// (TF_EXT_REGISTER_TF_GRADIENT). A ragged tensor is its row splits (integers: zeros, Python
// None) and its flat values, the only differentiable part.
//
// The ops with list arguments (one row-splits tensor per ragged dimension) have gradients
// concrete for the node's list lengths and types: one argument per list element, the
// flattened convention SymbolicGradient uses (as IdentityN's, array_grad.cc).
//
// Tested by tests/tf_misc_parity_grads_test.cc (numeric Jacobians) and
// tests/python/test_tf_misc_parity_grads.py (against Python's tf.gradients).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

using FDH = FunctionDefHelper;

std::string Arg(const std::string& name, DataType type) {
  return absl::StrCat(name, ": ", DataTypeString(type));
}

// RaggedFillEmptyRows(value_rowids, values, nrows, default_value) adds default_value to each
// empty row; reverse_index_map[k] is the output position of values[k]. As Python, the
// dedicated op: d(values) = d(output_values)[reverse_index_map], d(default_value) = the sum
// of d(output_values) at the added positions; the row ids and nrows get zeros.
absl::Status RaggedFillEmptyRowsGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("RaggedFillEmptyRows", attrs);
  b.DedicatedOp("RaggedFillEmptyRowsGrad", {"reverse_index_map", GradName("output_values")},
                {"T"}, {"values", "default_value"});
  b.NotDifferentiable("value_rowids");
  b.NotDifferentiable("nrows");
  return b.Build(g);
}

// RaggedTensorToSparse(rt_nested_splits[RAGGED_RANK], rt_dense_values) = (indices, values,
// dense_shape), values the dense values in their order, one row per value:
//   d(rt_dense_values) = Reshape(d(sparse_values), Shape(rt_dense_values)).
absl::Status RaggedTensorToSparseGrad(const AttrSlice& attrs, FunctionDef* g) {
  int rank;
  DataType t, tsplits;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "RAGGED_RANK", &rank));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "T", &t));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tsplits", &tsplits));
  std::vector<std::string> in, out;
  std::vector<FDH::Node> nodes;
  for (int i = 0; i < rank; ++i) in.push_back(Arg(absl::StrCat("splits_", i), tsplits));
  in.push_back(Arg("values", t));
  in.push_back(Arg("d_sparse_indices", DT_INT64));
  in.push_back(Arg("d_sparse_values", t));
  in.push_back(Arg("d_sparse_dense_shape", DT_INT64));
  for (int i = 0; i < rank; ++i) {
    out.push_back(Arg(absl::StrCat("d_splits_", i), tsplits));
    // d(splits_i) = 0
    nodes.push_back({{absl::StrCat("d_splits_", i)}, "ZerosLike", {absl::StrCat("splits_", i)},
                     {{"T", tsplits}}});
  }
  out.push_back(Arg("d_values", t));
  nodes.push_back({{"values_shape"}, "Shape", {"values"}, {{"T", t}, {"out_type", DT_INT32}}});
  // d(values) = reshape(d(sparse_values), shape(values))
  nodes.push_back({{"d_values"}, "Reshape", {"d_sparse_values", "values_shape"},
                   {{"T", t}, {"Tshape", DT_INT32}}});
  *g = FDH::Define(in, out, {}, nodes);
  return absl::OkStatus();
}

// RaggedGather(params_nested_splits[P], params_dense_values, indices) gathers rows of a
// ragged tensor: the output's dense values are, for each index in indices' order, the dense
// values of row `index` of params, rows [c[index], c[index + 1]) of params_dense_values, c
// the outer splits composed through the inner ones (c = s_{P-1}[...s_1[s_0]]). So
//   d(params_dense_values) = UnsortedSegmentSum(d(output_dense_values), ids, rows)
//   ids = concat over the flat indices k of range(c[k], c[k + 1]) (RaggedRange's values),
// Python's IndexedSlices densified (rows gathered twice get both gradients); the splits and
// indices get zeros.
absl::Status RaggedGatherGrad(const AttrSlice& attrs, FunctionDef* g) {
  int params_rank, output_rank;
  DataType tvalues, tindices, tsplits;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "PARAMS_RAGGED_RANK", &params_rank));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "OUTPUT_RAGGED_RANK", &output_rank));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tvalues", &tvalues));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tindices", &tindices));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tsplits", &tsplits));
  if (params_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("RaggedGather: PARAMS_RAGGED_RANK must be at least 1, not ", params_rank));
  }
  std::vector<std::string> in, out;
  std::vector<FDH::Node> nodes;
  for (int i = 0; i < params_rank; ++i) in.push_back(Arg(absl::StrCat("splits_", i), tsplits));
  in.push_back(Arg("values", tvalues));
  in.push_back(Arg("indices", tindices));
  for (int i = 0; i < output_rank; ++i) {
    in.push_back(Arg(absl::StrCat("d_output_splits_", i), tsplits));
  }
  in.push_back(Arg("d_output_values", tvalues));
  for (int i = 0; i < params_rank; ++i) {
    out.push_back(Arg(absl::StrCat("d_splits_", i), tsplits));
    // d(splits_i) = 0
    nodes.push_back({{absl::StrCat("d_splits_", i)}, "ZerosLike", {absl::StrCat("splits_", i)},
                     {{"T", tsplits}}});
  }
  out.push_back(Arg("d_values", tvalues));
  out.push_back(Arg("d_indices", tindices));
  nodes.push_back(FDH::Const<int32>("axis0", 0));
  nodes.push_back(FDH::Const<int32>("minus_one", std::vector<int32>{-1}));
  nodes.push_back(FDH::Const<int32>("one", std::vector<int32>{1}));
  nodes.push_back(FDH::Const<int32>("zero", std::vector<int32>{0}));
  auto gather = [&](const std::string& name, const std::string& params,
                    const std::string& ids, DataType ids_type) {
    nodes.push_back({{name}, "GatherV2", {params, ids, "axis0"},
                     {{"Tparams", tsplits}, {"Tindices", ids_type}, {"Taxis", DT_INT32}}});
  };
  // c = s_{P-1}[...s_1[s_0]]: the outer rows' bounds in the dense values
  std::string combined = "splits_0";
  for (int i = 1; i < params_rank; ++i) {
    const std::string next = absl::StrCat("combined_", i);
    gather(next, absl::StrCat("splits_", i), combined, tsplits);
    combined = next;
  }
  // starts = c[flat indices], limits = c[1:][flat indices]
  nodes.push_back({{"flat_indices"}, "Reshape", {"indices", "minus_one"},
                   {{"T", tindices}, {"Tshape", DT_INT32}}});
  gather("starts", combined, "flat_indices", tindices);
  nodes.push_back({{"combined_tail"}, "StridedSlice", {combined, "one", "zero", "one"},
                   {{"T", tsplits}, {"Index", DT_INT32}, {"end_mask", 1}}});
  gather("limits", "combined_tail", "flat_indices", tindices);
  nodes.push_back({{"deltas"}, "OnesLike", {"starts"}, {{"T", tsplits}}});
  // ids = the values of RaggedRange(starts, limits, 1): one per output dense row
  nodes.push_back({{"range_splits", "ids"}, "RaggedRange", {"starts", "limits", "deltas"},
                   {{"T", tsplits}, {"Tsplits", DT_INT64}}});
  // rows = shape(values)[0]
  nodes.push_back(
      {{"values_shape"}, "Shape", {"values"}, {{"T", tvalues}, {"out_type", tsplits}}});
  nodes.push_back({{"rows"}, "StridedSlice", {"values_shape", "zero", "one", "one"},
                   {{"T", tsplits}, {"Index", DT_INT32}, {"shrink_axis_mask", 1}}});
  // d(values) = UnsortedSegmentSum(d(output_values), ids, rows)
  nodes.push_back({{"d_values"}, "UnsortedSegmentSum", {"d_output_values", "ids", "rows"},
                   {{"T", tvalues}, {"Tindices", tsplits}, {"Tnumsegments", tsplits}}});
  // d(indices) = 0
  nodes.push_back({{"d_indices"}, "ZerosLike", {"indices"}, {{"T", tindices}}});
  *g = FDH::Define(in, out, {}, nodes);
  return absl::OkStatus();
}

// RaggedTensorToVariant(rt_nested_splits[RAGGED_RANK], rt_dense_values) encodes a ragged
// tensor (batched_input: each row) as variants. As Python, the dedicated op decodes the
// gradient's dense values, in the forward's value shape:
//   d(rt_dense_values) = RaggedTensorToVariantGradient(d(encoded_ragged), splits_0 (0 when
//                        RAGGED_RANK = 0), shape(rt_dense_values))
// and the splits get zeros.
absl::Status RaggedTensorToVariantGrad(const AttrSlice& attrs, FunctionDef* g) {
  int rank;
  DataType tvalues, tsplits;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "RAGGED_RANK", &rank));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tvalues", &tvalues));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tsplits", &tsplits));
  std::vector<std::string> in, out;
  std::vector<FDH::Node> nodes;
  for (int i = 0; i < rank; ++i) in.push_back(Arg(absl::StrCat("splits_", i), tsplits));
  in.push_back(Arg("values", tvalues));
  in.push_back(Arg("d_encoded", DT_VARIANT));
  for (int i = 0; i < rank; ++i) {
    out.push_back(Arg(absl::StrCat("d_splits_", i), tsplits));
    // d(splits_i) = 0
    nodes.push_back({{absl::StrCat("d_splits_", i)}, "ZerosLike", {absl::StrCat("splits_", i)},
                     {{"T", tsplits}}});
  }
  out.push_back(Arg("d_values", tvalues));
  std::string row_splits = "splits_0";
  if (rank == 0) {
    nodes.push_back(FDH::Const<int64_t>("zero", 0));
    nodes.push_back({{"zero_splits"}, "Cast", {"zero"}, {{"SrcT", DT_INT64}, {"DstT", tsplits}}});
    row_splits = "zero_splits";
  }
  nodes.push_back(
      {{"values_shape"}, "Shape", {"values"}, {{"T", tvalues}, {"out_type", DT_INT32}}});
  // d(values) = the dense values the variant gradient encodes
  nodes.push_back({{"d_values"}, "RaggedTensorToVariantGradient",
                   {"d_encoded", row_splits, "values_shape"},
                   {{"Tvalues", tvalues}, {"Tsplits", tsplits}}});
  *g = FDH::Define(in, out, {}, nodes);
  return absl::OkStatus();
}

// RaggedTensorFromVariant(encoded_ragged) decodes variants into one ragged tensor (splits,
// dense values). As Python, its gradient encodes the dense values' gradient with the forward's
// splits:
//   d(encoded_ragged) = RaggedTensorToVariant(output_nested_splits, d(output_dense_values),
//                                             batched_input)
// batched_input: whether encoded_ragged is a vector (rank output_ragged_rank -
// input_ragged_rank; Python reads it from the static shape, and when that is unknown guesses
// output_ragged_rank > 0, as C++ does for an inferred input_ragged_rank of -1); a higher rank
// fails with Python's message. The forward is recomputed in the body for its splits.
absl::Status RaggedTensorFromVariantGrad(const AttrSlice& attrs, FunctionDef* g) {
  int input_rank, output_rank;
  DataType tvalues, tsplits;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "input_ragged_rank", &input_rank));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "output_ragged_rank", &output_rank));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tvalues", &tvalues));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tsplits", &tsplits));
  bool batched = output_rank > 0;
  if (input_rank >= 0) {
    const int variant_rank = output_rank - input_rank;
    if (variant_rank > 1) {
      return absl::InvalidArgumentError(
          "RaggedTensorFromVariant: Unable to compute gradient: RaggedTensorToVariant can "
          "currently only generate 0D or 1D output.");
    }
    batched = variant_rank == 1;
  }
  std::vector<std::string> in = {Arg("encoded", DT_VARIANT)};
  for (int i = 0; i < output_rank; ++i) {
    in.push_back(Arg(absl::StrCat("d_output_splits_", i), tsplits));
  }
  in.push_back(Arg("d_output_values", tvalues));
  std::vector<std::string> out = {Arg("d_encoded", DT_VARIANT)};
  std::vector<std::string> fwd_rets, splits;
  for (int i = 0; i < output_rank; ++i) {
    fwd_rets.push_back(absl::StrCat("fwd_splits_", i));
    splits.push_back(absl::StrCat("fwd_splits_", i));
  }
  fwd_rets.push_back("fwd_values");
  std::vector<FDH::Node> nodes;
  // the forward's splits
  nodes.push_back({fwd_rets, "RaggedTensorFromVariant", {"encoded"},
                   {{"input_ragged_rank", input_rank}, {"output_ragged_rank", output_rank},
                    {"Tvalues", tvalues}, {"Tsplits", tsplits}}});
  std::vector<std::string> args = splits;
  args.push_back("d_output_values");
  // d(encoded) = the dense values' gradient encoded with the forward's splits
  nodes.push_back({{"d_encoded"}, "RaggedTensorToVariant", args,
                   {{"RAGGED_RANK", output_rank}, {"Tvalues", tvalues}, {"Tsplits", tsplits},
                    {"batched_input", batched}}});
  *g = FDH::Define(in, out, {}, nodes);
  return absl::OkStatus();
}

// RaggedTensorToTensor(shape, values, default_value, row_partition_tensors[N]) = a dense
// tensor of the ragged tensor (k = 1 + ragged_rank leading dimensions, ragged_rank the
// partitions that are not FIRST_DIM_SIZE), padded with default_value (broadcast to a value's
// shape), cropped to `shape`. As Python: the same op on the value numbers,
//   index = RaggedTensorToTensor(shape(d(result))[:k], range(rows of values), -1, partitions)
// says which value (or -1: the default) fills each position, so
//   d(values) = UnsortedSegmentSum(d(result)[index != -1], index[index != -1], rows)
//   d(default_value) = reshape(sum over d(result)[index == -1] of the dimensions the default
//                      was broadcast along, shape(default_value))
// (Python's IndexedSlices densified; the reduced dimensions: all but default_value's rank
// without its leading ones, computed at run time as Python does for an unknown shape). The
// shape and partitions get zeros.
absl::Status RaggedTensorToTensorGrad(const AttrSlice& attrs, FunctionDef* g) {
  int n;
  DataType t, tindex, tshape;
  std::vector<std::string> types;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "num_row_partition_tensors", &n));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "T", &t));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tindex", &tindex));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tshape", &tshape));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "row_partition_types", &types));
  int ragged_rank = 0;
  for (const std::string& type : types) ragged_rank += type != "FIRST_DIM_SIZE";
  const int k = 1 + ragged_rank;
  std::vector<std::string> in = {Arg("shape", tshape), Arg("values", t),
                                 Arg("default_value", t)};
  for (int i = 0; i < n; ++i) in.push_back(Arg(absl::StrCat("partition_", i), tindex));
  in.push_back(Arg("d_result", t));
  std::vector<std::string> out = {Arg("d_shape", tshape), Arg("d_values", t),
                                  Arg("d_default_value", t)};
  std::vector<FDH::Node> nodes;
  const FDH::AttrValueWrapper i32(DT_INT32);
  nodes.push_back({{"d_shape"}, "ZerosLike", {"shape"}, {{"T", tshape}}});
  std::vector<std::string> partitions;
  for (int i = 0; i < n; ++i) {
    partitions.push_back(absl::StrCat("partition_", i));
    // d(partition_i) = 0
    nodes.push_back({{absl::StrCat("d_partition_", i)}, "ZerosLike", {partitions.back()},
                     {{"T", tindex}}});
    out.push_back(Arg(absl::StrCat("d_partition_", i), tindex));
  }
  nodes.push_back(FDH::Const<int32>("zero", 0));
  nodes.push_back(FDH::Const<int32>("one", 1));
  nodes.push_back(FDH::Const<int32>("minus_one", -1));
  nodes.push_back(FDH::Const<int32>("begin", std::vector<int32>{0}));
  nodes.push_back(FDH::Const<int32>("k", std::vector<int32>{k}));
  nodes.push_back(FDH::Const<int32>("stride", std::vector<int32>{1}));
  nodes.push_back(FDH::Const<int32>("flat", std::vector<int32>{-1}));
  // rows = shape(values)[0]; index = the value number at each position of d(result), or -1
  nodes.push_back({{"values_shape"}, "Shape", {"values"}, {{"T", t}, {"out_type", i32}}});
  nodes.push_back({{"rows"}, "StridedSlice", {"values_shape", "begin", "stride", "stride"},
                   {{"T", i32}, {"Index", i32}, {"shrink_axis_mask", 1}}});
  nodes.push_back({{"numbers"}, "Range", {"zero", "rows", "one"}, {{"Tidx", i32}}});
  nodes.push_back({{"grad_shape"}, "Shape", {"d_result"}, {{"T", t}, {"out_type", i32}}});
  nodes.push_back({{"outer_shape"}, "StridedSlice", {"grad_shape", "begin", "k", "stride"},
                   {{"T", i32}, {"Index", i32}}});  // shape(d(result))[:k]
  std::vector<std::string> index_args = {"outer_shape", "numbers", "minus_one"};
  index_args.insert(index_args.end(), partitions.begin(), partitions.end());
  nodes.push_back({{"index"}, "RaggedTensorToTensor", index_args,
                   {{"T", i32}, {"Tindex", tindex}, {"Tshape", i32},
                    {"num_row_partition_tensors", n}, {"row_partition_types", types}}});
  // d(result) as [positions, value shape...]; the positions each value / the default fills
  nodes.push_back({{"inner_shape"}, "StridedSlice", {"grad_shape", "k", "begin", "stride"},
                   {{"T", i32}, {"Index", i32}, {"end_mask", 1}}});  // shape(d(result))[k:]
  nodes.push_back({{"flat_grad_shape"}, "ConcatV2", {"flat", "inner_shape", "zero"},
                   {{"T", i32}, {"N", 2}, {"Tidx", i32}}});
  nodes.push_back({{"flat_grad"}, "Reshape", {"d_result", "flat_grad_shape"},
                   {{"T", t}, {"Tshape", i32}}});
  nodes.push_back({{"flat_index"}, "Reshape", {"index", "flat"}, {{"T", i32}, {"Tshape", i32}}});
  nodes.push_back({{"is_value"}, "NotEqual", {"flat_index", "minus_one"}, {{"T", i32}}});
  nodes.push_back({{"is_default"}, "LogicalNot", {"is_value"}, {}});
  for (const char* which : {"value", "default"}) {
    const std::string pos = absl::StrCat(which, "_where"), at = absl::StrCat(which, "_at");
    nodes.push_back({{pos}, "Where", {absl::StrCat("is_", which)}, {{"T", DT_BOOL}}});
    nodes.push_back({{at}, "Reshape", {pos, "flat"}, {{"T", DT_INT64}, {"Tshape", i32}}});
    nodes.push_back({{absl::StrCat(which, "_grads")}, "GatherV2", {"flat_grad", at, "zero"},
                     {{"Tparams", t}, {"Tindices", DT_INT64}, {"Taxis", i32}}});
  }
  nodes.push_back({{"value_ids"}, "GatherV2", {"flat_index", "value_at", "zero"},
                   {{"Tparams", i32}, {"Tindices", DT_INT64}, {"Taxis", i32}}});
  // d(values) = the gradients of the positions each value fills, summed
  nodes.push_back({{"d_values"}, "UnsortedSegmentSum", {"value_grads", "value_ids", "rows"},
                   {{"T", t}, {"Tindices", i32}, {"Tnumsegments", i32}}});
  // default_value's rank without its leading ones
  nodes.push_back({{"default_shape"}, "Shape", {"default_value"}, {{"T", t}, {"out_type", i32}}});
  nodes.push_back({{"dim_is_one"}, "Equal", {"default_shape", "one"}, {{"T", i32}}});
  nodes.push_back({{"dim_is_one_i"}, "Cast", {"dim_is_one"}, {{"SrcT", DT_BOOL}, {"DstT", i32}}});
  nodes.push_back({{"leading_ones"}, "Cumprod", {"dim_is_one_i", "zero"},
                   {{"T", i32}, {"Tidx", i32}}});
  nodes.push_back({{"num_leading_ones"}, "Sum", {"leading_ones", "zero"},
                   {{"T", i32}, {"Tidx", i32}}});
  nodes.push_back({{"default_rank"}, "Rank", {"default_value"}, {{"T", t}}});
  nodes.push_back({{"kept_rank"}, "Sub", {"default_rank", "num_leading_ones"}, {{"T", i32}}});
  nodes.push_back({{"grads_rank"}, "Rank", {"default_grads"}, {{"T", t}}});
  nodes.push_back({{"num_reduced"}, "Sub", {"grads_rank", "kept_rank"}, {{"T", i32}}});
  nodes.push_back({{"reduced"}, "Range", {"zero", "num_reduced", "one"}, {{"Tidx", i32}}});
  nodes.push_back({{"default_sum"}, "Sum", {"default_grads", "reduced"},
                   {{"T", t}, {"Tidx", i32}}});
  // d(default_value) = the default positions' gradients summed over its broadcast dimensions
  nodes.push_back({{"d_default_value"}, "Reshape", {"default_sum", "default_shape"},
                   {{"T", t}, {"Tshape", i32}}});
  *g = FDH::Define(in, out, {}, nodes);
  return absl::OkStatus();
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("RaggedTensorToTensor", RaggedTensorToTensorGrad);
TF_EXT_REGISTER_TF_GRADIENT("RaggedTensorToVariant", RaggedTensorToVariantGrad);
TF_EXT_REGISTER_TF_GRADIENT("RaggedTensorFromVariant", RaggedTensorFromVariantGrad);
TF_EXT_REGISTER_TF_GRADIENT("RaggedFillEmptyRows", RaggedFillEmptyRowsGrad);
TF_EXT_REGISTER_TF_GRADIENT("RaggedTensorToSparse", RaggedTensorToSparseGrad);
TF_EXT_REGISTER_TF_GRADIENT("RaggedGather", RaggedGatherGrad);
// Front ends that have the forward node pass its outputs (the reverse index map).
static const bool ragged_reads_outputs [[maybe_unused]] =
    (DeclareReadsForwardOutputs("RaggedFillEmptyRows"), true);

}  // namespace tensorflow::tf_ext
