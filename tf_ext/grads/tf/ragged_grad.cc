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
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {
namespace {

using FDH = FunctionDefHelper;
using grad::GradName;

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

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("RaggedTensorToVariant", RaggedTensorToVariantGrad);
TF_EXT_REGISTER_TF_GRADIENT("RaggedTensorFromVariant", RaggedTensorFromVariantGrad);
TF_EXT_REGISTER_TF_GRADIENT("RaggedFillEmptyRows", RaggedFillEmptyRowsGrad);
TF_EXT_REGISTER_TF_GRADIENT("RaggedTensorToSparse", RaggedTensorToSparseGrad);
TF_EXT_REGISTER_TF_GRADIENT("RaggedGather", RaggedGatherGrad);
// Front ends that have the forward node pass its outputs (the reverse index map).
static const bool ragged_reads_outputs [[maybe_unused]] =
    (DeclareReadsForwardOutputs("RaggedFillEmptyRows"), true);

}  // namespace tensorflow::tf_ext
