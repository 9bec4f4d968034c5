// Exporting a built gradient as a SavedModel that runs without tf_ext (tf_ext_grad --export).
//
// The forward + backward graph that ComputeGraphGradients ran (kept with
// GradientOptions::keep_backward_graph) becomes a TF1-style SavedModel: one MetaGraphDef
// tagged "serve" whose signature "gradients" feeds the request's fed tensors and fetches y and
// d sum(y) / dx per x. The frozen weights (floating-point constants, and the constants the run
// fed instead: GradientResult::constant_feeds) move out of the GraphDef, which protobuf limits
// to 2 GB, into variables/ (resource variables restored by the SaverDef's restore op from a
// tensor bundle), so the directory loads with Python's tf.saved_model.load (as a TF1 model),
// C++ LoadSavedModel and TensorFlow Serving. Gradients are plain ops (GradientOptions::
// inline_gradients): a SymbolicGradient or function-call node left anywhere in the graph or its
// functions is refused, so the export needs no gradient registry at load time, and no
// op library when the forward graph has none of tf_ext's ops.
#ifndef TF_EXT_GRAPH_RUNTIME_EXPORT_H_
#define TF_EXT_GRAPH_RUNTIME_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tf_ext/graph/pipeline/gradient_request.h"

namespace tensorflow::tf_ext {

inline constexpr char kGradientsSignatureKey[] = "gradients";

struct ExportOptions {
  // Floating-point constants of the graph (not of its functions: a frozen model's weights are
  // captured into loop bodies as inputs) with at least this many elements become variables;
  // smaller ones (scalars, epsilons, short vectors) stay Const nodes that graph optimizations
  // can fold.
  int64_t min_variable_elements = 16;
};

struct ExportStats {
  int variables = 0;              // weights written to variables/
  int64_t variable_bytes = 0;     // their size in memory (the bundle's data file holds these)
  int64_t saved_model_bytes = 0;  // saved_model.pb: the graph without those weights
  int graph_nodes = 0;            // nodes of the exported graph (saver nodes included)
  int functions = 0;              // functions its nodes reach (loop bodies, ...)
  std::vector<std::string> input_keys, output_keys;  // of the "gradients" signature
  // tf_ext op types the graph (or its functions) uses, sorted: empty when the forward graph
  // had none, else a loader must load the op library first.
  std::vector<std::string> tf_ext_ops;
};

// OK when `dir` can receive an export: it does not exist, or is an empty directory (a tool
// checks this before the work of building the gradient).
absl::Status CheckExportTarget(const std::string& dir);

// Writes `dir` as described above from the request (its feeds become the signature's inputs)
// and the result of ComputeGraphGradients run with keep_backward_graph; the backward graph is
// moved out of `result` (it holds the weights once). `dir` must not exist or be an empty
// directory; its parent is created if missing. The export is written next to `dir` and renamed
// into place only once complete: on error nothing is left behind and `dir` is untouched.
// Signature keys: inputs are the fed nodes' names, outputs "y" and "d_<x node>[_<index>]"
// (SaveGradients' names), with every character other than [A-Za-z0-9_] replaced by '_'.
absl::Status ExportGradientSavedModel(const std::string& dir, const GradientRequest& request,
                                      GradientResult* result, const ExportOptions& options = {},
                                      ExportStats* stats = nullptr);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_RUNTIME_EXPORT_H_
