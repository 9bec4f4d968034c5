#include "tf_ext/graph/passes/rematerialize.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tensorflow/core/common_runtime/shape_refiner.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/graph/algorithm.h"
#include "tensorflow/core/graph/control_flow.h"

namespace tensorflow::tf_ext {
namespace {

// Outputs smaller than this are always kept: recomputing them saves nothing worth a copy.
constexpr int64_t kSmallBytes = 4096;

// The graph as the estimate sees it: data inputs, control inputs, output sizes.
struct AbstractNode {
  int original = -1;                      // for a copy: the node it recomputes; else itself
  std::vector<std::pair<int, int>> in;    // data inputs (node, output)
  std::vector<int> control;               // control inputs
  std::vector<int64_t> out_bytes;         // per output; 0 when unknown
  bool loaded = false;                    // constants, placeholders, variable reads: in memory before the run
  bool alias = false;                     // output 0 shares input 0's buffer
  bool backward = false;                  // "<prefix>/..." reached from an incoming gradient (copies included)
  bool recomputable = false;
  bool deferred = false;                  // "<prefix>/..." that no incoming gradient reaches
  int64_t flops = 0;
  bool expensive = false;                 // a matmul or convolution: >= 8 FLOPs an output element
  int fuses_into = -1;                    // the one reader it is kept or recomputed with
  bool unread = false;                    // an alias nothing reads and no run fetches (Build)
  int segment = -1;                       // for a copy
};

// An output that shape inference leaves unknown but that the CPU kernel allocates empty: a
// training-mode FusedBatchNormV3's reserve_space_3 (cuDNN's workspace on a GPU).
bool ReservedForGpu(const Node& n, int output) {
  return output == 5 &&
         (n.type_string() == "FusedBatchNormV3" || n.type_string() == "_FusedBatchNormEx");
}

bool IsAliasOp(const std::string& op) {
  return op == "Identity" || op == "Reshape" || op == "Squeeze" || op == "ExpandDims" ||
         op == "StopGradient" || op == "PreventGradient";
}

bool IsLoopOrConditional(const Node* n) {
  const std::string& op = n->type_string();
  return n->IsControlFlow() || op == "While" || op == "StatelessWhile" || op == "If" ||
         op == "StatelessIf" || op == "Case" || op == "StatelessCase";
}

int64_t Elements(shape_inference::InferenceContext* c, shape_inference::ShapeHandle s) {
  if (!c->FullyDefined(s)) return -1;
  int64_t n = 1;
  for (int d = 0; d < c->Rank(s); ++d) n *= c->Value(c->Dim(s, d));
  return n;
}

// Multiply-adds counted twice for the ops that dominate; elementwise work for the rest.
int64_t Flops(const Node* n, shape_inference::InferenceContext* c) {
  if (c == nullptr || c->num_outputs() == 0) return 0;
  const int64_t out = Elements(c, c->output(0));
  if (out < 0) return 0;
  const std::string& op = n->type_string();
  if ((op == "MatMul" || op == "BatchMatMulV2" || op == "BatchMatMul" ||
       op == "BatchMatMulV3") && c->num_inputs() >= 1 && c->RankKnown(c->input(0))) {
    bool transpose = false;
    if (!GetNodeAttr(n->attrs(), op == "MatMul" ? "transpose_a" : "adj_x", &transpose).ok()) {
      transpose = false;
    }
    const int rank = c->Rank(c->input(0));
    if (rank >= 2) {
      auto k = c->Dim(c->input(0), transpose ? rank - 2 : rank - 1);
      if (c->ValueKnown(k)) return 2 * out * c->Value(k);
    }
  }
  if ((op == "Conv2D" || op == "Conv3D" || op == "DepthwiseConv2dNative") &&
      c->num_inputs() >= 2) {
    const int64_t filter = Elements(c, c->input(1));
    auto filter_shape = c->input(1);
    if (filter > 0 && c->RankKnown(filter_shape)) {
      const int rank = c->Rank(filter_shape);
      auto out_channels = c->Dim(filter_shape, rank - 1);
      int64_t per_output = filter;
      if (c->ValueKnown(out_channels) && c->Value(out_channels) > 0) {
        per_output = filter / c->Value(out_channels);
      }
      if (op == "DepthwiseConv2dNative" && c->ValueKnown(c->Dim(filter_shape, rank - 2))) {
        per_output = filter / std::max<int64_t>(1, c->Value(c->Dim(filter_shape, rank - 2)) *
                                                       std::max<int64_t>(1, c->Value(out_channels)));
      }
      return 2 * out * per_output;
    }
  }
  return out;
}

struct Schedule {
  int64_t peak = 0;
  std::vector<int> order;
};

// Runs the nodes in the executor's likely order (ready ones first in, first out) and tracks
// the live buffers.
Schedule Simulate(const std::vector<AbstractNode>& nodes) {
  const int n = static_cast<int>(nodes.size());
  std::vector<std::vector<int>> out(n);
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> consumers_of;  // per node, per output: data consumers
  consumers_of.resize(n);
  std::vector<int> data_consumers(n, 0);
  for (int i = 0; i < n; ++i) consumers_of[i].assign(nodes[i].out_bytes.size(), 0);
  for (int i = 0; i < n; ++i) {
    for (const auto& [src, idx] : nodes[i].in) {
      out[src].push_back(i);
      ++pending[i];
      if (idx >= 0 && idx < static_cast<int>(consumers_of[src].size())) ++consumers_of[src][idx];
      ++data_consumers[src];
    }
    for (int src : nodes[i].control) {
      out[src].push_back(i);
      ++pending[i];
    }
  }
  std::deque<int> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push_back(i);
  }
  std::vector<std::vector<int>> buffer(n);  // per node, per output: buffer id
  std::vector<int64_t> buffer_bytes, refs;
  Schedule s;
  int64_t live = 0;
  while (!ready.empty()) {
    const int i = ready.front();
    ready.pop_front();
    s.order.push_back(i);
    const AbstractNode& a = nodes[i];
    buffer[i].assign(a.out_bytes.size(), -1);
    std::vector<int> transient;
    for (size_t o = 0; o < a.out_bytes.size(); ++o) {
      const int uses = consumers_of[i][o];
      if (a.alias && o == 0 && !a.in.empty() && a.in[0].first >= 0) {
        const int b = buffer[a.in[0].first].empty() ? -1 : buffer[a.in[0].first][a.in[0].second];
        if (b >= 0) {
          buffer[i][o] = b;
          refs[b] += uses;
          continue;
        }
      }
      const int b = static_cast<int>(buffer_bytes.size());
      buffer_bytes.push_back(a.loaded ? 0 : a.out_bytes[o]);
      refs.push_back(uses);
      buffer[i][o] = b;
      live += buffer_bytes[b];
      // An output nobody reads is freed at once, unless the node's outputs are read by none
      // (a fetched result).
      if (uses == 0 && data_consumers[i] > 0) transient.push_back(b);
    }
    s.peak = std::max(s.peak, live);
    for (int b : transient) live -= buffer_bytes[b];
    for (const auto& [src, idx] : a.in) {
      const int b = buffer[src].empty() ? -1 : buffer[src][idx];
      if (b < 0) continue;
      if (--refs[b] == 0) live -= buffer_bytes[b];
    }
    for (int next : out[i]) {
      if (--pending[next] == 0) ready.push_back(next);
    }
  }
  return s;
}

// Per node, the nodes that read it: through data edges, and with `control` control edges too.
std::vector<std::vector<int>> Consumers(const std::vector<AbstractNode>& nodes, bool control) {
  std::vector<std::vector<int>> out(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const auto& [src, idx] : nodes[i].in) out[src].push_back(static_cast<int>(i));
    if (!control) continue;
    for (int src : nodes[i].control) out[src].push_back(static_cast<int>(i));
  }
  return out;
}

// Marks every node reachable from `from` along `out` (consumers per node), `from` included.
std::vector<char> Reachable(const std::vector<std::vector<int>>& out, std::vector<int> from) {
  std::vector<char> reached(out.size(), 0);
  for (int i : from) reached[i] = 1;
  while (!from.empty()) {
    const int x = from.back();
    from.pop_back();
    for (int y : out[x]) {
      if (!reached[y]) {
        reached[y] = 1;
        from.push_back(y);
      }
    }
  }
  return reached;
}

struct Model {
  std::vector<AbstractNode> nodes;
  std::vector<Node*> graph_nodes;  // per original abstract node
  int unknown_tensors = 0;
  int unknown_forward = 0;         // of those, outputs of forward nodes
  std::string unknown_example;     // one of them
};

Model Build(const Graph& g, const std::string& prefix, const std::set<std::string>& keep,
            const std::map<std::string, TensorShape>& feed_shapes,
            const std::set<std::string>& seeds = {},
            const std::set<std::string>* deferred = nullptr) {
  Model m;
  // Ties broken by name: the edge sets' own order is their pointers', which differs between
  // processes, and with it the simulated schedule and the plan.
  std::vector<Node*> order;
  GetReversePostOrder(g, &order, NodeComparatorName());
  ShapeRefiner refiner(g.versions(), g.op_registry());
  std::vector<int> index(g.num_node_ids(), -1);
  for (Node* n : order) {
    if (!n->IsOp()) continue;
    if (refiner.AddNode(n).ok()) {
      auto it = feed_shapes.find(n->name());
      if (it != feed_shapes.end() && n->num_outputs() == 1) {
        shape_inference::InferenceContext* c = refiner.GetContext(n);
        shape_inference::ShapeHandle h;
        if (c->MakeShapeFromTensorShape(it->second, &h).ok()) {
          refiner.SetShape(n, 0, h).IgnoreError();
        }
      }
    }
    index[n->id()] = static_cast<int>(m.nodes.size());
    m.graph_nodes.push_back(n);
    AbstractNode a;
    a.original = index[n->id()];
    // Inlined gradient bodies are "<prefix>/..." and their argument and result Identities
    // "Func/<prefix>/..."; Grappler names the nodes it makes of them "<pass>/<prefix>/...".
    a.backward = !prefix.empty() && (absl::StartsWith(n->name(), prefix + "/") ||
                                     absl::StrContains(n->name(), absl::StrCat("/", prefix, "/")));
    // A variable's read shares the variable's buffer: resident before the run, as a constant.
    a.loaded = n->IsConstant() || n->type_string() == "Placeholder" ||
               n->type_string() == "PlaceholderWithDefault" || n->IsArg() ||
               n->type_string() == "HostConst" || n->type_string() == "ReadVariableOp";
    a.alias = IsAliasOp(n->type_string());
    shape_inference::InferenceContext* c = refiner.GetContext(n);
    for (int o = 0; o < n->num_outputs(); ++o) {
      int64_t bytes = 0;
      const int64_t size = DataTypeSize(BaseType(n->output_type(o)));
      const int64_t elements =
          ReservedForGpu(*n, o) ? 0 : c != nullptr ? Elements(c, c->output(o)) : -1;
      if (elements < 0 || size == 0) {
        if (!a.loaded) ++m.unknown_tensors;
        if (!a.loaded && !a.backward && size != 0) {
          if (m.unknown_forward++ == 0) m.unknown_example = absl::StrCat(n->name(), ":", o);
        }
      } else {
        bytes = elements * size;
      }
      a.out_bytes.push_back(bytes);
    }
    a.flops = Flops(n, c);
    if (c != nullptr && c->num_outputs() > 0) {
      const int64_t elements = Elements(c, c->output(0));
      a.expensive = elements > 0 && a.flops >= 8 * elements;
    }
    m.nodes.push_back(std::move(a));
  }
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    const Node* n = m.graph_nodes[i];
    AbstractNode& a = m.nodes[i];
    a.in.assign(n->num_inputs(), {-1, 0});
    for (const Edge* e : n->in_edges()) {
      if (!e->src()->IsOp()) continue;
      const int src = index[e->src()->id()];
      if (src < 0) continue;
      if (e->IsControlEdge()) {
        a.control.push_back(src);
      } else {
        a.in[e->dst_input()] = {src, e->src_output()};
      }
    }
    // Inputs from outside (none in a valid graph) are dropped.
    a.in.erase(std::remove_if(a.in.begin(), a.in.end(),
                              [](const std::pair<int, int>& p) { return p.first < 0; }),
               a.in.end());
  }
  // A gradient body's node that no incoming gradient reaches computes from forward tensors
  // alone (SquaredDifference's 2 (x - y), a recomputed MaxPool output): the executor runs it
  // during the forward pass and holds its output until the backward pass reads it. Under a
  // budget it is deferred: recomputed where the backward pass reads it (Rewrite).
  const std::vector<std::vector<int>> consumers = Consumers(m.nodes, true);
  if (deferred != nullptr) {
    for (size_t i = 0; i < m.nodes.size(); ++i) {
      AbstractNode& a = m.nodes[i];
      if (a.backward && deferred->count(m.graph_nodes[i]->name())) {
        a.backward = false;
        a.deferred = true;
      }
    }
  } else if (!seeds.empty()) {
    const int count = static_cast<int>(m.nodes.size());
    std::vector<int> seed_nodes;
    for (int i = 0; i < count; ++i) {
      if (seeds.count(m.graph_nodes[i]->name())) seed_nodes.push_back(i);
    }
    const std::vector<char> reached = Reachable(consumers, seed_nodes);
    for (int i = 0; i < count; ++i) {
      AbstractNode& a = m.nodes[i];
      if (a.backward && !reached[i]) a.backward = false, a.deferred = true;
    }
  }
  // A deferred node that a forward node reads is forward: Grappler's common-subexpression pass
  // merges a forward node with the equal node a gradient body recomputes from forward tensors
  // (an attention layer's Softmax) and may keep the gradient's name. (A backward node's forward
  // readers are the trainer's optimizer updates.)
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < m.nodes.size(); ++i) {
      AbstractNode& a = m.nodes[i];
      if (!a.deferred) continue;
      for (int c : consumers[i]) {
        if (m.nodes[c].backward || m.nodes[c].deferred) continue;
        a.deferred = false;
        changed = true;
        break;
      }
    }
  }
  // An inlined gradient body's argument Identity that nothing reads (BiasAdd's gradient takes
  // the forward input and ignores it) runs as soon as its input exists and holds nothing;
  // Grappler prunes it. It is no reader: not for fusion (MarkFusedChains), and it keeps reading
  // an original that is recomputed (Rewrite).
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    m.nodes[i].unread = m.nodes[i].alias && consumers[i].empty() &&
                        keep.count(m.graph_nodes[i]->name()) == 0;
  }
  // A node in a loop's frame (lowered control flow: Grappler lowers While) runs once per
  // iteration; a copy outside the frame would not.
  std::vector<ControlFlowInfo> frames;
  std::vector<std::string> unreachable;
  const bool framed = BuildControlFlowInfo(&g, &frames, &unreachable).ok();
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    const Node* n = m.graph_nodes[i];
    AbstractNode& a = m.nodes[i];
    const bool in_frame = !framed || (static_cast<size_t>(n->id()) < frames.size() &&
                                      !frames[n->id()].frame_name.empty());
    bool refs = false;
    for (int o = 0; o < n->num_outputs(); ++o) refs |= IsRefType(n->output_type(o));
    for (int j = 0; j < n->num_inputs(); ++j) refs |= IsRefType(n->input_type(j));
    a.recomputable = !a.backward && !a.loaded && !refs && n->num_outputs() > 0 &&
                     !n->op_def().is_stateful() && !n->IsControlFlow() &&
                     !IsLoopOrConditional(n) && !n->IsFunctionCall() && !n->IsRetval() &&
                     !in_frame && keep.count(n->name()) == 0;
  }
  return m;
}

// Chains Grappler's remapper fuses into one kernel (a MatMul or convolution, its bias, its
// activation): it fuses a node into its consumer only where that is the node's one consumer. A
// plan that kept the first and recomputed the rest would give the first a second consumer (the
// copy), so that neither the original nor the copy is fused, and both compute other values
// than the unbudgeted graph's fused kernel.
void MarkFusedChains(Model* model) {
  Model& m = *model;
  const std::vector<std::vector<int>> consumers = Consumers(m.nodes, true);
  auto op = [&](int i) -> const std::string& { return m.graph_nodes[i]->type_string(); };
  auto contraction = [&](int i) {
    return op(i) == "MatMul" || op(i) == "Conv2D" || op(i) == "Conv3D" ||
           op(i) == "DepthwiseConv2dNative";
  };
  // Whether node b adds a bias to (or normalises) the output of contraction c, as the remapper
  // matches it: a BiasAdd or an inference-mode batch normalisation of c, or (oneDNN's bias
  // semantics) an Add of c and a smaller constant, variable or placeholder operand (Keras 3's
  // Dense adds its bias with AddV2).
  auto adds_bias = [&](int c, int b) {
    const std::vector<std::pair<int, int>>& in = m.nodes[b].in;
    if (!contraction(c) || in.empty()) return false;
    if (op(b) == "BiasAdd") return in[0].first == c;
    if (op(b) == "FusedBatchNorm" || op(b) == "FusedBatchNormV3") {
      bool training = true;  // training mode is not fused
      return in[0].first == c &&
             GetNodeAttr(m.graph_nodes[b]->attrs(), "is_training", &training).ok() && !training;
    }
    if ((op(b) == "Add" || op(b) == "AddV2") && in.size() == 2) {
      const int side = in[0].first == c ? 1 : in[1].first == c ? 0 : -1;
      if (side < 0) return false;
      const AbstractNode& other = m.nodes[in[side].first];
      const int64_t product = m.nodes[c].out_bytes.empty() ? 0 : m.nodes[c].out_bytes[0];
      const int64_t operand = other.out_bytes.size() > static_cast<size_t>(in[side].second)
                                  ? other.out_bytes[in[side].second]
                                  : 0;
      return other.loaded && operand > 0 && operand < product;
    }
    return false;
  };
  auto activation = [&](int i) {
    static const std::set<std::string>* kActivations = new std::set<std::string>{
        "Relu", "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid", "_MklSwish"};
    return kActivations->count(op(i)) > 0;
  };
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    std::vector<int> live;
    for (int c : consumers[i]) {
      if (!m.nodes[c].unread) live.push_back(c);
    }
    if (live.size() != 1) continue;
    const int self = static_cast<int>(i);
    const int next = live[0];
    if (!m.nodes[i].recomputable || !m.nodes[next].recomputable) continue;
    bool fused = adds_bias(self, next);
    if (!fused && activation(next) && m.nodes[next].in[0].first == self) {
      for (const auto& [c, unused] : m.nodes[i].in) fused = fused || adds_bias(c, self);
    }
    if (fused) m.nodes[i].fuses_into = next;
  }
}

struct Trial {
  int k = 0;
  bool keep_expensive = false;
  std::vector<AbstractNode> nodes;  // originals (rewired), then copies
  int64_t peak = 0;
  int64_t flops = 0;
  int copies = 0;
};

// Every k-th recomputable node of `order` kept, the others recomputed per segment.
// With keep_expensive, matrix products and convolutions are always checkpoints (they count in
// no interval): only the cheap nodes between them are recomputed.
Trial Rewrite(const std::vector<AbstractNode>& base, const std::vector<int>& order, int k,
              bool keep_expensive) {
  Trial t;
  t.k = k;
  t.keep_expensive = keep_expensive;
  t.nodes = base;
  std::vector<AbstractNode>& nodes = t.nodes;
  const int n = static_cast<int>(base.size());
  std::vector<int> segment(n, -1);  // recomputed nodes: their segment
  int position = 0;
  int next_own_segment = n;         // above every checkpoint interval's segment
  // A fused chain's last node, and whether the chain holds a matrix product or convolution.
  auto chain_end = [&](int i) {
    while (base[i].fuses_into >= 0) i = base[i].fuses_into;
    return i;
  };
  std::vector<char> chain_expensive(n, 0);
  for (int i = 0; i < n; ++i) {
    if (base[i].expensive) chain_expensive[chain_end(i)] = 1;
  }
  for (int i : order) {
    const AbstractNode& a = base[i];
    if (!a.recomputable) continue;
    if (a.fuses_into >= 0) continue;  // follows its chain's end, below
    if (a.alias) {
      // A view follows its input: recomputed with it, or kept with it.
      if (!a.in.empty() && segment[a.in[0].first] >= 0) segment[i] = segment[a.in[0].first];
      continue;
    }
    int64_t bytes = 0;
    for (int64_t b : a.out_bytes) bytes += b;
    if (bytes < kSmallBytes) continue;
    if (a.deferred) {
      // Never a checkpoint: recomputed with the segment of its inputs, or in one of its own.
      int seg = -1;
      for (const auto& [src, idx] : a.in) seg = std::max(seg, segment[src]);
      segment[i] = seg >= 0 ? seg : next_own_segment++;
      continue;
    }
    if (keep_expensive && (a.expensive || chain_expensive[i])) continue;
    if ((position + 1) % k != 0) segment[i] = position / k;
    ++position;
  }
  // A fused chain is kept or recomputed whole: with its end.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (base[*it].recomputable && base[*it].fuses_into >= 0) segment[*it] = segment[chain_end(*it)];
  }
  std::map<std::pair<int, int>, int> copy_of;  // (node, segment) -> copy
  std::map<int, std::vector<int>> members;      // segment -> its copies
  std::map<int, std::set<int>> readers;         // segment -> backward nodes reading copies
  std::function<int(int, int)> get_copy = [&](int node, int seg) -> int {
    auto it = copy_of.find({node, seg});
    if (it != copy_of.end()) return it->second;
    AbstractNode c = base[node];
    c.original = node;
    c.backward = true;
    c.recomputable = false;
    c.segment = seg;
    for (auto& [src, idx] : c.in) {
      if (segment[src] >= 0) src = get_copy(src, seg);
    }
    const int id = static_cast<int>(nodes.size());
    nodes.push_back(std::move(c));
    copy_of[{node, seg}] = id;
    members[seg].push_back(id);
    t.flops += base[node].flops;
    return id;
  };
  for (int i = 0; i < n; ++i) {
    if (!base[i].backward || base[i].unread) continue;
    for (size_t j = 0; j < base[i].in.size(); ++j) {
      const auto [src, idx] = base[i].in[j];
      if (segment[src] < 0) continue;
      const int c = get_copy(src, segment[src]);
      nodes[i].in[j] = {c, idx};
      readers[segment[src]].insert(i);
    }
  }
  // A deferred original is read by nobody now (its readers read its copy): the run prunes it.
  for (int i = 0; i < n; ++i) {
    if (!base[i].deferred || segment[i] < 0) continue;
    nodes[i].in.clear();
    nodes[i].control.clear();
    std::fill(nodes[i].out_bytes.begin(), nodes[i].out_bytes.end(), 0);
  }
  t.copies = static_cast<int>(nodes.size()) - n;
  // Each segment's copies wait for the backward tensors their readers take, except those
  // that depend on a reader (that would be a cycle). Latest segments first: the backward pass
  // reaches them first.
  std::vector<std::vector<int>> out = Consumers(nodes, true);
  const std::vector<std::vector<int>> data_out = Consumers(nodes, false);
  for (auto it = readers.rbegin(); it != readers.rend(); ++it) {
    const int seg = it->first;
    const std::vector<char> below =
        Reachable(out, std::vector<int>(it->second.begin(), it->second.end()));
    // A reader that is a view (an inlined gradient's argument Identity) passes the tensor
    // on: its consumers are the readers whose other inputs say the backward pass has come.
    std::set<int> expanded(it->second.begin(), it->second.end());
    std::vector<int> views(it->second.begin(), it->second.end());
    while (!views.empty()) {
      const int r = views.back();
      views.pop_back();
      if (!nodes[r].alias) continue;
      for (int c : data_out[r]) {
        if (expanded.insert(c).second) views.push_back(c);
      }
    }
    std::set<int> triggers;
    for (int r : expanded) {
      for (const auto& [src, idx] : nodes[r].in) {
        if (src < n && nodes[src].backward && !below[src]) triggers.insert(src);
      }
    }
    for (int c : members[seg]) {
      bool root = true;
      for (const auto& [src, idx] : nodes[c].in) root &= src < n;
      if (!root) continue;
      for (int trig : triggers) {
        nodes[c].control.push_back(trig);
        out[trig].push_back(c);
      }
    }
  }
  t.peak = Simulate(nodes).peak;
  return t;
}

// Adds trial's copies to `g` and points the backward readers at them.
absl::Status Apply(const Trial& t, const Model& m, const std::string& prefix, bool gate_roots,
                   Graph* g) {
  const int n = static_cast<int>(m.graph_nodes.size());
  std::vector<Node*> real(m.graph_nodes);
  real.resize(t.nodes.size(), nullptr);
  for (int i = n; i < static_cast<int>(t.nodes.size()); ++i) {
    const AbstractNode& a = t.nodes[i];
    const Node* original = m.graph_nodes[a.original];
    NodeDef def = original->def();
    def.set_name(g->NewName(absl::StrCat(prefix, "/recompute/", original->name())));
    def.clear_input();
    // Keeps the copy distinct from its original for every common-subexpression pass, also
    // where it has no control input.
    AddNodeAttr("_tf_ext_recompute_segment", a.segment, &def);
    absl::Status s;
    Node* copy = g->AddNode(def, &s);
    if (!s.ok()) return s;
    real[i] = copy;
    // A root waits for its triggers through its first input, passed through an EnsureShape
    // that has the control edges, not through control edges of its own: Grappler's remapper
    // fuses no matrix product or convolution that has a control input, and the copy must be
    // fused as its original is to compute the same values. (Grappler removes an Identity
    // that has control inputs, moving them onto its consumer; it keeps an EnsureShape.)
    Node* gate = nullptr;
    if (gate_roots && !a.control.empty() && !a.in.empty()) {
      const auto& [src, index] = a.in[0];
      NodeDef ensure;
      ensure.set_name(g->NewName(absl::StrCat(prefix, "/recompute/", original->name(), "/gate")));
      ensure.set_op("EnsureShape");
      AddNodeAttr("T", real[src]->output_type(index), &ensure);
      // Its shape stays unknown: the shape inference here knows the feeds' shapes, and with
      // them in the graph Grappler learns the batch size and optimizes the whole graph other
      // than the unbudgeted one (the tests' MLP lost a fused MatMul + Tanh so, no longer bitwise).
      AddNodeAttr("shape", PartialTensorShape(), &ensure);
      gate = g->AddNode(ensure, &s);
      if (!s.ok()) return s;
      g->AddEdge(real[src], index, gate, 0);
      for (int c : a.control) g->AddControlEdge(real[c], gate);
    }
    for (size_t j = 0; j < a.in.size(); ++j) {
      if (j == 0 && gate != nullptr) {
        g->AddEdge(gate, 0, copy, 0);
      } else {
        g->AddEdge(real[a.in[j].first], a.in[j].second, copy, static_cast<int>(j));
      }
    }
    if (gate == nullptr) {
      for (int c : a.control) g->AddControlEdge(real[c], copy);
    }
  }
  for (int i = 0; i < n; ++i) {
    const AbstractNode& a = t.nodes[i];
    if (!a.backward) continue;
    for (size_t j = 0; j < a.in.size(); ++j) {
      if (a.in[j].first < n) continue;
      TF_RETURN_IF_ERROR(
          g->UpdateEdge(real[a.in[j].first], a.in[j].second, real[i], static_cast<int>(j)));
    }
  }
  return absl::OkStatus();
}

std::string Mb(int64_t bytes) { return absl::StrFormat("%.1f MB", bytes / 1048576.0); }

}  // namespace

std::string DescribeBudget(const MemoryPlan& plan) {
  if (plan.budget_bytes <= 0) return "";
  std::string line = absl::StrCat(
      "memory budget ", Mb(plan.budget_bytes), " (unbudgeted estimate ",
      Mb(plan.unbudgeted_peak_bytes),
      plan.optimized_peak_bytes > 0 ? absl::StrCat(", ", Mb(plan.optimized_peak_bytes),
                                                   " once TensorFlow optimized the graph")
                                    : "",
      "): ");
  if (plan.recomputed_nodes == 0) return absl::StrCat(line, "met without recomputation");
  return absl::StrCat(line, "recomputes ", plan.recomputed_nodes, " nodes (",
                      absl::StrFormat("%.3g", static_cast<double>(plan.recomputed_flops)),
                      " FLOPs added), keeping ",
                      plan.keeps_contractions ? "every matrix product and convolution and " : "",
                      "1 forward tensor in ", plan.checkpoint_interval,
                      plan.keeps_contractions ? " of the others" : "");
}

std::string MemoryBudget::ToString() const {
  if (fraction > 0) return absl::StrCat(fraction);
  return absl::StrCat(bytes);
}

absl::StatusOr<MemoryBudget> ParseMemoryBudget(absl::string_view text) {
  MemoryBudget budget;
  const std::string t = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  auto bad = [&text](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory budget '", text, "': ", why,
                     " (a fraction in (0, 1] such as 0.5, or bytes such as 536870912 or 512M)"));
  };
  if (t.empty()) return bad("empty");
  if (absl::StrContains(t, '.')) {
    double f = 0;
    if (!absl::SimpleAtod(t, &f) || !(f > 0 && f <= 1)) return bad("not a fraction in (0, 1]");
    budget.fraction = f;
    return budget;
  }
  int64_t scale = 1;
  std::string digits = t;
  switch (t.back()) {
    case 'K': scale = int64_t{1} << 10; break;
    case 'M': scale = int64_t{1} << 20; break;
    case 'G': scale = int64_t{1} << 30; break;
    default: break;
  }
  if (scale > 1) digits.pop_back();
  int64_t v = 0;
  if (!absl::SimpleAtoi(digits, &v) || v <= 0) return bad("not a positive integer");
  if (v > std::numeric_limits<int64_t>::max() / scale) return bad("too large");
  budget.bytes = v * scale;
  return budget;
}

std::set<std::string> DeferredGradientNodes(const Graph& g, const std::string& prefix,
                                            const std::set<std::string>& seeds) {
  std::vector<const Node*> stack;
  std::vector<char> reached(g.num_node_ids(), 0);
  for (const Node* n : g.op_nodes()) {
    if (seeds.count(n->name())) stack.push_back(n), reached[n->id()] = 1;
  }
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const Node* c : n->out_nodes()) {
      if (!reached[c->id()]) stack.push_back(c), reached[c->id()] = 1;
    }
  }
  std::set<std::string> deferred;
  for (const Node* n : g.op_nodes()) {
    if (!reached[n->id()] && absl::StartsWith(n->name(), prefix + "/")) deferred.insert(n->name());
  }
  return deferred;
}

void EstimateMemory(const Graph& g, const std::map<std::string, TensorShape>& feed_shapes,
                    MemoryPlan* plan) {
  Model m = Build(g, "", {}, feed_shapes);
  plan->estimated_peak_bytes = plan->unbudgeted_peak_bytes = Simulate(m.nodes).peak;
  plan->unknown_tensors = m.unknown_tensors;
}

absl::Status PlanMemory(Graph* g, const std::string& prefix, const std::set<std::string>& keep,
                        const std::set<std::string>& seeds,
                        const std::map<std::string, TensorShape>& feed_shapes,
                        const MemoryBudget& budget, bool fused_kernels, MemoryPlan* plan,
                        const std::set<std::string>* deferred) {
  FixupSourceAndSinkEdges(g);
  Model m = Build(*g, prefix, keep, feed_shapes, seeds, deferred);
  const Schedule base = Simulate(m.nodes);
  plan->estimated_peak_bytes = plan->unbudgeted_peak_bytes = base.peak;
  plan->unknown_tensors = m.unknown_tensors;
  if (!budget.set()) return absl::OkStatus();
  const int64_t fraction_of = budget.fraction_of > 0 ? budget.fraction_of : base.peak;
  plan->budget_bytes = budget.fraction > 0
                           ? static_cast<int64_t>(std::llround(budget.fraction * fraction_of))
                           : budget.bytes;
  if (m.unknown_forward > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory budget: shape inference leaves the size of ", m.unknown_forward,
        " forward tensors unknown (e.g. '", m.unknown_example,
        "'): a budget needs the feeds' shapes (feed the placeholders, or give them full "
        "shapes)"));
  }
  if (base.peak <= plan->budget_bytes) return absl::OkStatus();
  if (fused_kernels) MarkFusedChains(&m);
  int recomputable = 0;
  for (const AbstractNode& a : m.nodes) recomputable += a.recomputable ? 1 : 0;
  std::vector<int> ks;
  for (int k = 2; k <= std::max(2, recomputable); k = k < 8 ? k + 1 : k + k / 4) ks.push_back(k);
  std::optional<Trial> best;
  int64_t smallest = base.peak;
  for (bool keep_expensive : {true, false}) {
    for (int k : ks) {
      Trial t = Rewrite(m.nodes, base.order, k, keep_expensive);
      smallest = std::min(smallest, t.peak);
      if (t.peak <= plan->budget_bytes && (!best.has_value() || t.flops < best->flops)) {
        best = std::move(t);
      }
    }
  }
  if (!best.has_value()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory budget of ", Mb(plan->budget_bytes), " (", budget.ToString(),
        ") cannot be met: the estimated peak is ", Mb(base.peak),
        " without recomputation and the smallest it can meet is ", Mb(smallest), " (",
        smallest, " bytes)"));
  }
  TF_RETURN_IF_ERROR(Apply(*best, m, prefix, fused_kernels, g));
  plan->estimated_peak_bytes = best->peak;
  plan->recomputed_nodes = best->copies;
  plan->recomputed_flops = best->flops;
  plan->checkpoint_interval = best->k;
  plan->keeps_contractions = best->keep_expensive;
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext
