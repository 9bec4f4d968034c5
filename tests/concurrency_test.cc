// Every tf_ext op, forward and gradient, run from 8 threads on one Session for a fixed
// number of steps (the ops, attrs and inputs come from the manifest); every result must equal,
// bit for bit, the single-threaded run of the same inputs (the kernels are deterministic, and
// shared state must not leak between calls).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/node_def_builder.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/public/session.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/tools/gradcheck_spec.h"

namespace tensorflow::tf_ext {
namespace {

constexpr int kThreads = 8;
constexpr int kSteps = 25;
constexpr int kInputSets = 6;

using NodeOut = NodeDefBuilder::NodeOut;

class GraphBuilder {
 public:
  NodeOut Placeholder(const std::string& name, DataType dt) {
    Add(NodeDefBuilder(name, "Placeholder").Attr("dtype", dt));
    return NodeOut(name, 0, dt);
  }
  void Add(NodeDefBuilder b) {
    NodeDef* n = graph_.add_node();
    ASSERT_TRUE(b.Finalize(n).ok()) << b.Finalize(n);
  }
  // SymbolicGradient of `op` (with `attrs`) at `inputs`, incoming gradients `dys`: one
  // gradient per input, through the op's FDH gradient.
  void Gradient(const std::string& name, const std::string& op,
                const std::vector<std::pair<std::string, AttrValue>>& attrs,
                const std::vector<NodeOut>& inputs, const std::vector<NodeOut>& dys) {
    NameAttrList f;
    f.set_name(op);
    for (const auto& [k, v] : attrs) (*f.mutable_attr())[k] = v;
    std::vector<NodeOut> all = inputs;
    all.insert(all.end(), dys.begin(), dys.end());
    DataTypeVector tin, tout;
    for (const auto& in : all) tin.push_back(in.data_type);
    for (const auto& in : inputs) tout.push_back(in.data_type);
    Add(NodeDefBuilder(name, "SymbolicGradient").Input(all).Attr("Tin", tin).Attr("Tout", tout)
            .Attr("f", f));
  }
  const GraphDef& graph() const { return graph_; }

 private:
  GraphDef graph_;
};

// Bit-identical tensors; a string tensor holds a serialized FunctionDef, compared as one
// (protobuf map order is not part of the contract).
bool SameBits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.dtype() == DT_STRING) {
    FunctionDef fa, fb;
    return fa.ParseFromString(a.scalar<tstring>()()) && fb.ParseFromString(b.scalar<tstring>()()) &&
           FunctionDefsEqual(fa, fb);
  }
  return a.tensor_data() == b.tensor_data();
}

// Every declared op with an input spec (its manifest declaration's GradCheck), for every
// declared type: the forward op and, where declared differentiable, its SymbolicGradient (which
// runs the op's backward op). A new op is covered by declaring it; nothing here names an op.
TEST(Concurrency, EveryOpForwardAndGradientFromEightThreadsMatchesOneThread) {
  auto specs = tools::ParseSpecs(ManifestGradCheckSpecs());
  ASSERT_TRUE(specs.ok()) << specs.status();
  GraphBuilder g;
  std::vector<std::string> fetches;
  // feeds[k]: placeholder name -> tensor, for input set k (the same attrs, other values).
  std::vector<std::vector<std::pair<std::string, Tensor>>> feeds(kInputSets);
  std::set<std::string> covered;
  const std::vector<OpFacts> manifest = GradientManifest();
  const OpFacts* first_gradient = nullptr;
  for (const OpFacts& f : manifest) {
    if (f.gradcheck.empty()) continue;
    const OpDef* def = nullptr;
    ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef(f.op, &def).ok()) << f.op;
    const tools::OpSpec& spec = (*specs)[f.op];
    const std::vector<DataType> types =
        f.types.empty() ? std::vector<DataType>{DT_FLOAT} : f.types;
    for (DataType dt : types) {
      const std::string name = absl::StrCat(absl::StrReplaceAll(f.op, {{">", "_"}}), "_",
                                            DataTypeString(dt));
      std::vector<tools::OpInstance> sets;
      for (int k = 0; k < kInputSets; ++k) {
        sets.push_back(tools::BuildOpInstance(*def, &spec, f.type_attr, dt, 100 + 17 * k));
        ASSERT_EQ(sets.back().problem, "") << f.op;
      }
      std::vector<NodeOut> in;
      for (size_t i = 0; i < sets[0].inputs.size(); ++i) {
        const std::string p = absl::StrCat(name, "_in", i);
        in.push_back(g.Placeholder(p, sets[0].inputs[i].dtype()));
        for (int k = 0; k < kInputSets; ++k) feeds[k].push_back({p, sets[k].inputs[i]});
      }
      NodeDefBuilder b(name, f.op);
      for (const auto& i : in) b.Input(i);
      for (const auto& [k, v] : sets[0].attrs) b.Attr(k, v);
      g.Add(std::move(b));
      std::vector<NodeOut> outs;
      DataTypeVector out_types;
      {
        NodeDef n;
        n.set_op(f.op);
        for (const auto& [k, v] : sets[0].attrs) (*n.mutable_attr())[k] = v;
        AddDefaultsToNodeDef(*def, &n);
        ASSERT_TRUE(OutputTypesForNode(n, *def, &out_types).ok()) << f.op;
      }
      for (size_t o = 0; o < out_types.size(); ++o) {
        outs.push_back(NodeOut(name, static_cast<int>(o), out_types[o]));
        fetches.push_back(absl::StrCat(name, ":", o));
      }
      if (f.differentiability == Differentiability::kGradient) {
        // d(outputs) = the outputs themselves: one gradient per input.
        g.Gradient("d_" + name, f.op, sets[0].attrs, in, outs);
        for (size_t i = 0; i < in.size(); ++i) fetches.push_back(absl::StrCat("d_", name, ":", i));
        if (first_gradient == nullptr) first_gradient = &f;
      }
      covered.insert(f.op);
    }
  }
  // Every differentiable op is covered (each has a GradCheck spec: manifest_test).
  for (const OpFacts& f : manifest) {
    if (f.differentiability == Differentiability::kGradient) {
      EXPECT_TRUE(covered.count(f.op)) << f.op;
    }
  }
  ASSERT_NE(first_gradient, nullptr);
  // The registry op, too: a gradient FunctionDef built concurrently.
  NodeDef fwd;
  fwd.set_op(first_gradient->op);
  {
    const OpDef* def = nullptr;
    ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef(fwd.op(), &def).ok());
    tools::OpInstance inst = tools::BuildOpInstance(*def, &(*specs)[fwd.op()],
                                                    first_gradient->type_attr,
                                                    first_gradient->types.back(), 1);
    for (const auto& [k, v] : inst.attrs) (*fwd.mutable_attr())[k] = v;
  }
  Tensor node_def(DT_STRING, TensorShape({}));
  node_def.scalar<tstring>()() = fwd.SerializeAsString();
  AttrValue value;
  node_def.AsProtoTensorContent(value.mutable_tensor());
  g.Add(NodeDefBuilder("node_def", "Const").Attr("dtype", DT_STRING).Attr("value", value));
  g.Add(NodeDefBuilder("gradient_function_def", "TfExt>GradientFunctionDef")
            .Input(NodeOut("node_def", 0, DT_STRING)));
  fetches.push_back("gradient_function_def:0");
  if (HasFatalFailure()) return;

  SessionOptions options;
  options.config.set_intra_op_parallelism_threads(4);
  options.config.set_inter_op_parallelism_threads(4);
  std::unique_ptr<Session> session(NewSession(options));
  ASSERT_TRUE(session->Create(g.graph()).ok());

  std::vector<std::vector<Tensor>> want(kInputSets);
  for (int k = 0; k < kInputSets; ++k) {
    absl::Status s = session->Run(feeds[k], fetches, {}, &want[k]);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(want[k].size(), fetches.size());
  }

  std::atomic<int> mismatches{0}, errors{0}, runs{0};
  std::vector<std::string> first_problem(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int step = 0; step < kSteps; ++step) {
        const int k = (t + step) % kInputSets;
        std::vector<Tensor> got;
        absl::Status s = session->Run(feeds[k], fetches, {}, &got);
        ++runs;
        if (!s.ok()) {
          if (errors++ == 0) first_problem[t] = std::string(s.message());
          continue;
        }
        for (size_t i = 0; i < fetches.size(); ++i) {
          if (!SameBits(got[i], want[k][i])) {
            if (mismatches++ == 0) first_problem[t] = fetches[i] + " differs";
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  std::string problems;
  for (const auto& p : first_problem) {
    if (!p.empty()) problems += p + "; ";
  }
  EXPECT_EQ(runs.load(), kThreads * kSteps);
  EXPECT_EQ(errors.load(), 0) << problems;
  EXPECT_EQ(mismatches.load(), 0) << problems;
}

}  // namespace
}  // namespace tensorflow::tf_ext
