// audit_doors: the attribute-sweep audit's rows (scripts/audit_gradients.py) differentiated
// through tf_ext's C++ entry points, many rows per process:
//
//   audit_doors DOOR MANIFEST [FIRST_ROW]
//
// DOOR: pipeline (the default: each op's gradient inlined, Grappler on), symbolic_gradients,
// no_optimize, hoist_constants (tf_ext_grad's modes: BuildGradientGraph, then a Session as
// ComputeGraphGradients runs it), tf_ext_add_gradients (TfExtAddGradients) or tf_add_gradients
// (TensorFlow's own TF_AddGradients, with the op library loaded), both on an imported TF_Graph
// run by a TF_Session with default options.
//
// MANIFEST: one row a line, tab-separated: GRAPH (binary GraphDef), OUT (a path prefix), the
// ys, their incoming gradients (Const nodes of the graph), the xs, each a comma-separated list
// of "node:index". Writes OUT.DOOR.grad (per x: int32 dtype (0: no gradient), int32 rank, int64
// dims, int64 byte size, the raw bytes) or OUT.DOOR.err (the error), and prints "row N" to
// stdout before each row, so that a caller can tell which row a crash (a TensorFlow CHECK)
// stopped at and go on from the next (FIRST_ROW). The op library named by $TF_EXT_LIBRARY is
// loaded first. Tested through tests/python/test_audit_gradients.py.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tensorflow/c/c_api.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/public/session.h"
#include "tf_ext/graph/c_api/c_gradients.h"
#include "tf_ext/graph/io/tensor_ref.h"
#include "tf_ext/graph/pipeline/gradient_pipeline.h"
#include "tf_ext/graph/runtime/session_options.h"

namespace tensorflow::tf_ext {
namespace {

struct Row {
  std::string graph, out;
  std::vector<TensorRef> ys, dys, xs;
};

absl::StatusOr<std::vector<TensorRef>> Refs(const std::string& text) {
  std::vector<TensorRef> refs;
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(text, ',', absl::SkipEmpty()))) {
    auto ref = TensorRef::Parse(part);
    if (!ref.ok()) return ref.status();
    refs.push_back(*ref);
  }
  return refs;
}

// One gradient: dtype (0: none), rank, dims, byte size, bytes.
void Append(std::string* out, int32_t dtype, const std::vector<int64_t>& dims, const char* data,
            int64_t bytes) {
  const int32_t rank = static_cast<int32_t>(dims.size());
  out->append(reinterpret_cast<const char*>(&dtype), 4);
  out->append(reinterpret_cast<const char*>(&rank), 4);
  for (int64_t d : dims) out->append(reinterpret_cast<const char*>(&d), 8);
  out->append(reinterpret_cast<const char*>(&bytes), 8);
  if (bytes > 0) out->append(data, bytes);
}

void AppendTensor(std::string* out, const Tensor& t) {
  std::vector<int64_t> dims;
  for (int d = 0; d < t.dims(); ++d) dims.push_back(t.dim_size(d));
  const auto data = t.tensor_data();
  Append(out, t.dtype(), dims, data.data(), data.size());
}

absl::Status Write(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), bytes.size());
  f.close();
  return f ? absl::OkStatus() : absl::InternalError(absl::StrCat("cannot write ", path));
}

// The incoming gradients' values: the Const nodes the manifest names.
absl::Status ConstValues(const GraphDef& graph, const std::vector<TensorRef>& refs,
                         std::vector<Tensor>* values) {
  for (const TensorRef& ref : refs) {
    bool found = false;
    for (const NodeDef& n : graph.node()) {
      if (n.name() != ref.node) continue;
      Tensor t;
      if (n.op() != "Const" || !t.FromProto(n.attr().at("value").tensor())) {
        return absl::InvalidArgumentError(absl::StrCat("'", ref.node, "' is not a Const"));
      }
      values->push_back(t);
      found = true;
    }
    if (!found) return absl::InvalidArgumentError(absl::StrCat("no node '", ref.node, "'"));
  }
  return absl::OkStatus();
}

// tf_ext_grad's pipeline (BuildGradientGraph) and run (as ComputeGraphGradients), the ys'
// incoming gradients fed.
absl::Status Pipeline(const std::string& door, GraphDef graph, const Row& row, std::string* out) {
  std::vector<Tensor> dys;
  TF_RETURN_IF_ERROR(ConstValues(graph, row.dys, &dys));
  GradientOptions options;
  options.inline_gradients = door != "symbolic_gradients";
  options.optimize_graph = door != "no_optimize";
  options.hoist_constants = door == "hoist_constants";
  GradientGraphSpec spec;
  spec.ys = row.ys;
  spec.xs = row.xs;
  spec.incoming_gradients.assign(row.ys.size(), true);
  GradientResult result;
  GradientGraph built;
  TF_RETURN_IF_ERROR(BuildGradientGraph(&graph, spec, options, &result, &built));
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (size_t i = 0; i < dys.size(); ++i) feeds.push_back({built.dy_names[i], dys[i]});
  if (options.hoist_constants) {
    std::set<std::string> keep;
    for (const TensorRef& r : row.ys) keep.insert(r.node);
    for (const TensorRef& r : row.xs) keep.insert(r.node);
    for (auto& f : HoistConstants(keep, &built.graph)) feeds.push_back(std::move(f));
  }
  std::unique_ptr<Session> session(NewSession(BackwardSessionOptions(options.optimize_graph)));
  if (session == nullptr) return absl::InternalError("could not create a Session");
  TF_RETURN_IF_ERROR(session->Create(std::move(built.graph)));
  std::vector<Tensor> grads;
  TF_RETURN_IF_ERROR(session->Run(feeds, built.dx_names, {}, &grads));
  for (const Tensor& g : grads) AppendTensor(out, g);
  return session->Close();
}

struct Deleter {
  void operator()(TF_Graph* g) const { TF_DeleteGraph(g); }
  void operator()(TF_Status* s) const { TF_DeleteStatus(s); }
  void operator()(TF_Buffer* b) const { TF_DeleteBuffer(b); }
  void operator()(TF_ImportGraphDefOptions* o) const { TF_DeleteImportGraphDefOptions(o); }
  void operator()(TF_SessionOptions* o) const { TF_DeleteSessionOptions(o); }
  void operator()(TF_Tensor* t) const { TF_DeleteTensor(t); }
};

absl::Status StatusOf(TF_Status* s, const std::string& what) {
  if (TF_GetCode(s) == TF_OK) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(TF_GetCode(s)),
                      absl::StrCat(what, ": ", TF_Message(s)));
}

// TF_AddGradients or TfExtAddGradients on the imported graph, run by a TF_Session.
absl::Status CApi(const std::string& door, const std::string& bytes, const Row& row,
                  std::string* out) {
  std::unique_ptr<TF_Graph, Deleter> g(TF_NewGraph());
  std::unique_ptr<TF_Status, Deleter> s(TF_NewStatus());
  {
    std::unique_ptr<TF_Buffer, Deleter> buffer(TF_NewBufferFromString(bytes.data(), bytes.size()));
    std::unique_ptr<TF_ImportGraphDefOptions, Deleter> opts(TF_NewImportGraphDefOptions());
    TF_GraphImportGraphDef(g.get(), buffer.get(), opts.get(), s.get());
    TF_RETURN_IF_ERROR(StatusOf(s.get(), "import"));
  }
  auto outputs = [&](const std::vector<TensorRef>& refs,
                     std::vector<TF_Output>* to) -> absl::Status {
    for (const TensorRef& r : refs) {
      TF_Operation* op = TF_GraphOperationByName(g.get(), r.node.c_str());
      if (op == nullptr) return absl::InvalidArgumentError(absl::StrCat("no node '", r.node, "'"));
      to->push_back({op, r.index});
    }
    return absl::OkStatus();
  };
  std::vector<TF_Output> ys, dys, xs;
  TF_RETURN_IF_ERROR(outputs(row.ys, &ys));
  TF_RETURN_IF_ERROR(outputs(row.dys, &dys));
  TF_RETURN_IF_ERROR(outputs(row.xs, &xs));
  std::vector<TF_Output> grads(xs.size(), TF_Output{nullptr, 0});
  if (door == "tf_add_gradients") {
    TF_AddGradients(g.get(), ys.data(), ys.size(), xs.data(), xs.size(), dys.data(), s.get(),
                    grads.data());
    TF_RETURN_IF_ERROR(StatusOf(s.get(), "TF_AddGradients"));
  } else {
    TfExtAddGradients(g.get(), nullptr, ys.data(), ys.size(), xs.data(), xs.size(), dys.data(),
                      s.get(), grads.data());
    TF_RETURN_IF_ERROR(StatusOf(s.get(), "TfExtAddGradients"));
  }
  std::vector<TF_Output> fetches;
  for (const TF_Output& o : grads) {
    if (o.oper != nullptr) fetches.push_back(o);
  }
  std::unique_ptr<TF_SessionOptions, Deleter> options(TF_NewSessionOptions());
  TF_Session* session = TF_NewSession(g.get(), options.get(), s.get());
  TF_RETURN_IF_ERROR(StatusOf(s.get(), "TF_NewSession"));
  std::vector<TF_Tensor*> values(fetches.size(), nullptr);
  TF_SessionRun(session, nullptr, nullptr, nullptr, 0, fetches.data(), values.data(),
                fetches.size(), nullptr, 0, nullptr, s.get());
  absl::Status run = StatusOf(s.get(), "run");
  std::unique_ptr<TF_Status, Deleter> close(TF_NewStatus());
  TF_CloseSession(session, close.get());
  TF_DeleteSession(session, close.get());
  TF_RETURN_IF_ERROR(run);
  size_t next = 0;
  for (const TF_Output& o : grads) {
    if (o.oper == nullptr) {
      Append(out, 0, {}, nullptr, 0);
      continue;
    }
    std::unique_ptr<TF_Tensor, Deleter> t(values[next++]);
    std::vector<int64_t> dims(TF_NumDims(t.get()));
    for (size_t d = 0; d < dims.size(); ++d) dims[d] = TF_Dim(t.get(), d);
    Append(out, TF_TensorType(t.get()), dims, static_cast<const char*>(TF_TensorData(t.get())),
           TF_TensorByteSize(t.get()));
  }
  return absl::OkStatus();
}

absl::Status RunRow(const std::string& door, const Row& row) {
  std::string bytes;
  TF_RETURN_IF_ERROR(ReadFileToString(Env::Default(), row.graph, &bytes));
  std::string out;
  absl::Status s;
  if (door == "tf_add_gradients" || door == "tf_ext_add_gradients") {
    s = CApi(door, bytes, row, &out);
  } else {
    GraphDef graph;
    if (!graph.ParseFromString(bytes)) return absl::InvalidArgumentError("not a GraphDef");
    s = Pipeline(door, std::move(graph), row, &out);
  }
  const std::string prefix = absl::StrCat(row.out, ".", door);
  if (!s.ok()) return Write(prefix + ".err", std::string(s.message()));
  return Write(prefix + ".grad", out);
}

int Main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: audit_doors DOOR MANIFEST [FIRST_ROW]\n";
    return 2;
  }
  const std::string door = argv[1];
  const std::vector<std::string> doors = {"pipeline", "symbolic_gradients", "no_optimize",
                                          "hoist_constants", "tf_ext_add_gradients",
                                          "tf_add_gradients"};
  if (std::find(doors.begin(), doors.end(), door) == doors.end()) {
    std::cerr << "audit_doors: unknown DOOR " << door << "\n";
    return 2;
  }
  const int first = argc == 4 ? std::atoi(argv[3]) : 0;
  if (const char* library = std::getenv("TF_EXT_LIBRARY")) {
    std::unique_ptr<TF_Status, Deleter> s(TF_NewStatus());
    TF_LoadLibrary(library, s.get());
    if (TF_GetCode(s.get()) != TF_OK) {
      std::cerr << "audit_doors: cannot load " << library << ": " << TF_Message(s.get()) << "\n";
      return 2;
    }
  }
  std::ifstream manifest(argv[2]);
  std::string line;
  for (int n = 0; std::getline(manifest, line); ++n) {
    if (n < first) continue;
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    if (fields.size() != 5) {
      std::cerr << "audit_doors: line " << n + 1 << " has " << fields.size() << " fields, not 5\n";
      return 2;
    }
    Row row{fields[0], fields[1], {}, {}, {}};
    auto ys = Refs(fields[2]), dys = Refs(fields[3]), xs = Refs(fields[4]);
    if (!ys.ok() || !dys.ok() || !xs.ok() || ys->size() != dys->size()) {
      std::cerr << "audit_doors: line " << n + 1 << ": bad tensor names\n";
      return 2;
    }
    row.ys = *ys;
    row.dys = *dys;
    row.xs = *xs;
    std::cout << "row " << n << std::endl;  // flushed: a crash names its row
    if (absl::Status s = RunRow(door, row); !s.ok()) {
      std::cerr << "audit_doors: " << s.message() << "\n";
      return 3;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tensorflow::tf_ext

int main(int argc, char** argv) { return tensorflow::tf_ext::Main(argc, argv); }
