// A gradient built once and run per request, for servers.
//
// GradientSession takes a forward graph (a GraphDef, e.g. a frozen model, or a SavedModel
// signature: saved_model.h), one or several ys, optionally with incoming gradients (then each
// run computes vector-Jacobian products), and the xs. It builds the forward + backward graph
// once (pipeline/gradient_pipeline.h: plain ops, control flow included) in one TensorFlow Session; Run()
// then computes the ys and sum_i <dy_i, d y_i / d x> per x for one request's feeds, and may be
// called from many threads at once.
//
// Every request is checked before anything runs, and refused with InvalidArgument starting
// "GradientSession:" and naming the feed: an unknown or missing feed, a wrong dtype, a shape
// the placeholder does not accept, an incoming gradient whose shape is not its y's, and feed
// shapes under which shape inference finds a tensor whose size overflows or exceeds max_tensor_bytes
// (GradientSessionOptions). The check sees what shape inference sees: tensors whose shapes depend on
// values (a fed integer scalar used as a size is read for the check; a loop's trip count is
// not) are counted where their shapes are inferred. Results of the check are cached per feed
// signature (shapes, and the values of small integer feeds).
#ifndef TF_EXT_GRAPH_RUNTIME_GRADIENT_SESSION_H_
#define TF_EXT_GRAPH_RUNTIME_GRADIENT_SESSION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/public/session.h"
#include "tensorflow/core/public/session_options.h"
#include "tf_ext/graph/pipeline/gradient_request.h"
#include "tf_ext/graph/io/tensor_ref.h"

namespace tensorflow::tf_ext {

struct GradientSessionSpec {
  std::vector<TensorRef> ys;
  std::vector<TensorRef> xs;
  // Per y (empty: none): its incoming gradient is a feed named IncomingGradientName(y) that
  // every run must give, of y's dtype and shape; otherwise it is ones (d sum(y) / dx).
  std::vector<bool> incoming_gradients;
  // Names requests use instead of the graph's (a SavedModel signature's keys): placeholder
  // node -> feed name, and per y the name its incoming gradient's feed is made from (empty: the
  // node names).
  std::map<std::string, std::string> input_names;
  std::vector<std::string> y_names;
};

struct GradientSessionOptions {
  // TensorFlow's graph optimizations (GradientOptions::optimize_graph), and whether the frozen
  // weights are fed rather than held as constants (GradientOptions::hoist_constants: less
  // memory, more time).
  bool optimize_graph = true;
  bool hoist_constants = false;
  // Largest tensor a request may make shape inference find, in bytes; 0: half of this
  // machine's physical memory.
  int64_t max_tensor_bytes = 0;
  // A budget for the memory a run allocates above the loaded graph and feeds: the builder
  // recomputes forward tensors rather than keep them (passes/rematerialize.h). It is planned
  // for the shapes in `feed_shapes` (placeholder -> shape; the placeholders' own shapes where
  // not given).
  MemoryBudget backward_memory_budget;
  std::map<std::string, TensorShape> feed_shapes;
  // Threads of the Session's pools; 0: TensorFlow's default (one per core).
  int intra_op_threads = 0;
  int inter_op_threads = 0;
  // Run the gradient as one must-compile XLA cluster (GradientOptions::jit_compile). XLA
  // compiles it again for every new signature of feed shapes (a warning says so, once): once
  // `jit_compile_cache` signatures have been compiled, the next new one starts the Session
  // afresh, dropping the compiled programs. Pad inputs to fixed shapes to compile once
  // (docs/xla.md). Not with a memory budget.
  bool jit_compile = false;
  int jit_compile_cache = 16;
};

// A feed a request gives: a Placeholder of the forward graph (PlaceholderWithDefault ones may be
// left out), or an incoming gradient.
struct GradientSessionInput {
  std::string name;  // as Run() takes it: the node name, or its name in input_names
  std::string node;  // the placeholder
  DataType dtype = DT_INVALID;
  PartialTensorShape shape;  // what the placeholder accepts
  bool required = true;
};

// "d_<y node>" (and "_<index>" for an output other than the first), every character other than
// [A-Za-z0-9_] replaced by '_': the feed name of y's incoming gradient. With a name for y
// (GradientSessionSpec::y_names): "d_<name>".
std::string IncomingGradientName(const TensorRef& y, const std::string& y_name = "");

class GradientSession {
 public:
  // Builds the gradient of `graph` (consumed). Errors: the build's (a y or x not in the graph,
  // an op on the path without a gradient, ...).
  static absl::StatusOr<std::unique_ptr<GradientSession>> Create(
      GraphDef graph, const GradientSessionSpec& spec, const GradientSessionOptions& options = {});

  ~GradientSession();
  GradientSession(const GradientSession&) = delete;
  GradientSession& operator=(const GradientSession&) = delete;

  // One request: `feeds` by input name ("node" or "node:0"); `ys` gets the ys' values and `dxs`
  // one gradient per x. Thread-safe. A refused request (see above) runs nothing.
  absl::Status Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                   std::vector<Tensor>* ys, std::vector<Tensor>* dxs) const;

  // Checks a request as Run does, without running it.
  absl::Status CheckRequest(const std::vector<std::pair<std::string, Tensor>>& feeds) const;

  // With jit_compile: the feed-shape signatures compiled since the Session (re)started.
  int jit_compiled_signatures() const;

  const std::vector<GradientSessionInput>& inputs() const { return inputs_; }
  const GradientSessionSpec& spec() const { return spec_; }
  int64_t max_tensor_bytes() const { return budget_; }
  // Build statistics (inlined calls, gradient nodes, loops, ...); no tensors.
  const GradientResult& build_info() const { return build_; }

 private:
  GradientSession() = default;
  // The feeds in Session::Run's form, their values validated; sets `signature` to the key of
  // the shape-check cache.
  absl::Status ValidateFeeds(const std::vector<std::pair<std::string, Tensor>>& feeds,
                             std::vector<std::pair<std::string, Tensor>>* session_feeds,
                             std::string* signature) const;
  // ValidateFeeds, then CheckShapes through the cache; `signature` (may be null): the
  // request's feed signature.
  absl::Status Prepare(const std::vector<std::pair<std::string, Tensor>>& feeds,
                       std::vector<std::pair<std::string, Tensor>>* session_feeds,
                       std::string* signature = nullptr) const;
  // jit_compile: counts the signature's compilation, restarting the Session past the cache.
  absl::Status NoteCompiledSignature(const std::string& signature) const;
  absl::Status CheckShapes(const std::vector<std::pair<std::string, Tensor>>& session_feeds) const;

  GradientSessionSpec spec_;
  std::vector<GradientSessionInput> inputs_;
  std::map<std::string, int> input_index_;        // by node name
  std::vector<std::string> input_tensors_;        // per input: the tensor Session::Run feeds
  std::vector<std::string> fetches_;              // ys, then dxs
  std::vector<std::pair<std::string, Tensor>> constant_feeds_;  // hoisted weights
  int64_t budget_ = 0;
  std::string prefix_;  // of the nodes the build added
  // The graph shape checks run on: the built graph, large constants as shaped placeholders.
  std::unique_ptr<Graph> shape_graph_;
  GradientResult build_;
  mutable absl::Mutex mu_;
  mutable std::map<std::string, absl::Status> checked_ ABSL_GUARDED_BY(mu_);
  // jit_compile: the graph the Session runs (kept to restart it) and the signatures compiled.
  bool jit_ = false;
  size_t jit_cache_ = 0;
  SessionOptions session_options_;
  GraphDef jit_graph_;
  mutable std::set<std::string> jit_signatures_ ABSL_GUARDED_BY(mu_);
  mutable bool jit_warned_ ABSL_GUARDED_BY(mu_) = false;
  // Runs share the Session; a restart (jit_compile) replaces it.
  mutable absl::Mutex session_mu_;
  mutable std::unique_ptr<Session> session_ ABSL_GUARDED_BY(session_mu_);
};

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_RUNTIME_GRADIENT_SESSION_H_
