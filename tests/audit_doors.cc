// audit_doors: the attribute-sweep audit's rows (scripts/audit_gradients.py) differentiated
// through tf_ext's C++ entry points, many rows per process:
//
//   audit_doors DOOR MANIFEST [FIRST_ROW]
//
// DOOR: pipeline (the default: each op's gradient inlined, Grappler on), symbolic_gradients,
// no_optimize, hoist_constants (tf_ext_grad's modes: BuildGradientGraph, then a Session as
// ComputeGraphGradients runs it), tf_ext_add_gradients (TfExtAddGradients) or tf_add_gradients
// (TensorFlow's own TF_AddGradients, with the op library loaded), both on an imported TF_Graph
// run by a TF_Session with default options; symbolic_gradient_node (a SymbolicGradient node of
// a FunctionDef holding the op, its xs the arguments: TensorFlow's function runtime looks the
// op's gradient up in the registries tf_ext's library filled), gradient_function_def (the C
// API's TfExtGradientFunctionDef, looked up in the loaded library, called by a node of the
// graph), both run by a Session with default options (Grappler on); export (tf_ext_grad
// --export=OUT.export: ComputeGraphGradients, then ExportGradientSavedModel, of the scalar
// sum(Re(conj(dy) y)) over the ys, whose gradient is the row's; the caller runs the SavedModel
// without tf_ext).
//
// MANIFEST: one row a line, tab-separated: GRAPH (binary GraphDef), OUT (a path prefix), the
// ys, their incoming gradients (Const nodes of the graph), the xs, each a comma-separated list
// of "node:index". Writes OUT.DOOR.grad (per x: int32 dtype (0: no gradient), int32 rank, int64
// dims, int64 byte size, the raw bytes; export: the directory OUT.export) or OUT.DOOR.err (the
// error), and prints "row N" to
// stdout before each row, so that a caller can tell which row a crash (a TensorFlow CHECK)
// stopped at and go on from the next (FIRST_ROW). The op library named by $TF_EXT_LIBRARY is
// loaded first. Tested through tests/python/test_audit_gradients.py.
#include <dlfcn.h>

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
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/statusor.h"
#include "tensorflow/core/public/session.h"
#include "tf_ext/graph/c_api/c_gradients.h"
#include "tf_ext/graph/io/tensor_ref.h"
#include "tf_ext/graph/pipeline/gradient_pipeline.h"
#include "tf_ext/graph/runtime/export.h"
#include "tf_ext/graph/runtime/graph_gradients.h"
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

// The row's op node (the ys' node), its OpDef with defaults, and its output argument ranges.
struct OpNode {
  const NodeDef* node = nullptr;
  NodeDef full;  // with the OpDef's defaults
  const OpDef* op_def = nullptr;
  NameRangeMap inputs, outputs;
  // The FunctionDef reference of the op's flat output `index`: "op:ARG:K".
  absl::StatusOr<std::string> OutputRef(int index) const {
    for (const auto& [name, range] : outputs) {
      if (index >= range.first && index < range.second) {
        return absl::StrCat(node->name(), ":", name, ":", index - range.first);
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("'", node->name(), "' has no output ", index));
  }
};

absl::StatusOr<OpNode> FindOpNode(const GraphDef& graph, const Row& row) {
  OpNode op;
  for (const TensorRef& y : row.ys) {
    const NodeDef* found = nullptr;
    for (const NodeDef& n : graph.node()) {
      if (n.name() == y.node) found = &n;
    }
    if (found == nullptr || (op.node != nullptr && op.node != found)) {
      return absl::InvalidArgumentError("the ys are not outputs of one node of the graph");
    }
    op.node = found;
  }
  if (op.node == nullptr) return absl::InvalidArgumentError("no ys");
  TF_RETURN_IF_ERROR(OpRegistry::Global()->LookUpOpDef(op.node->op(), &op.op_def));
  op.full = *op.node;
  AddDefaultsToNodeDef(*op.op_def, &op.full);
  TF_RETURN_IF_ERROR(NameRangesForNode(op.full, *op.op_def, &op.inputs, &op.outputs));
  return op;
}

const NodeDef* NodeNamed(const GraphDef& graph, const std::string& name) {
  for (const NodeDef& n : graph.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

// Runs `graph` in a Session with default options (Grappler on) and appends the fetched
// tensors to `out`.
absl::Status RunDefault(GraphDef graph, const std::vector<std::string>& fetches,
                        std::string* out) {
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  if (session == nullptr) return absl::InternalError("could not create a Session");
  TF_RETURN_IF_ERROR(session->Create(std::move(graph)));
  std::vector<Tensor> values;
  TF_RETURN_IF_ERROR(session->Run({}, fetches, {}, &values));
  for (const Tensor& t : values) AppendTensor(out, t);
  return session->Close();
}

// A SymbolicGradient node of a FunctionDef holding the row's op: its xs are the function's
// arguments, its other inputs Const nodes inside it, its outputs the ys. TensorFlow's function
// runtime looks the op's gradient up in the registries tf_ext's library filled.
absl::Status SymbolicGradientNode(const GraphDef& graph, const Row& row, std::string* out) {
  TF_ASSIGN_OR_RETURN(OpNode op, FindOpNode(graph, row));
  GraphDef run;
  *run.mutable_versions() = graph.versions();
  FunctionDef* fdef = run.mutable_library()->add_function();
  fdef->mutable_signature()->set_name("audit_forward");
  NodeDef* body = fdef->add_node_def();
  *body = *op.node;
  body->clear_input();
  std::set<std::string> copied;
  std::vector<DataType> x_types;
  for (size_t k = 0; k < row.xs.size(); ++k) {
    const NodeDef* x = NodeNamed(graph, row.xs[k].node);
    if (x == nullptr || x->op() != "Const") {
      return absl::InvalidArgumentError(absl::StrCat("x '", row.xs[k].node, "' is not a Const"));
    }
    x_types.push_back(x->attr().at("dtype").type());
    OpDef::ArgDef* arg = fdef->mutable_signature()->add_input_arg();
    arg->set_name(absl::StrCat("x_", k));
    arg->set_type(x_types.back());
    *run.add_node() = *x;
  }
  for (const std::string& input : op.node->input()) {
    TF_ASSIGN_OR_RETURN(TensorRef ref, TensorRef::Parse(input));
    auto x = std::find_if(row.xs.begin(), row.xs.end(), [&](const TensorRef& r) {
      return r.node == ref.node && r.index == ref.index;
    });
    if (x != row.xs.end()) {
      body->add_input(absl::StrCat("x_", x - row.xs.begin()));
      continue;
    }
    const NodeDef* c = NodeNamed(graph, ref.node);
    if (c == nullptr || c->op() != "Const" || ref.index != 0) {
      return absl::InvalidArgumentError(absl::StrCat("input '", input, "' is not a Const"));
    }
    if (copied.insert(c->name()).second) *fdef->add_node_def() = *c;
    body->add_input(absl::StrCat(c->name(), ":output:0"));
  }
  std::vector<DataType> dy_types;
  for (size_t i = 0; i < row.ys.size(); ++i) {
    const NodeDef* dy = NodeNamed(graph, row.dys[i].node);
    if (dy == nullptr) return absl::InvalidArgumentError("no incoming gradient node");
    dy_types.push_back(dy->attr().at("dtype").type());
    *run.add_node() = *dy;
    OpDef::ArgDef* arg = fdef->mutable_signature()->add_output_arg();
    arg->set_name(absl::StrCat("y_", i));
    arg->set_type(dy_types.back());
    TF_ASSIGN_OR_RETURN((*fdef->mutable_ret())[arg->name()], op.OutputRef(row.ys[i].index));
  }
  NodeDef* grad = run.add_node();
  grad->set_name("audit_symbolic_gradient");
  grad->set_op("SymbolicGradient");
  for (const TensorRef& r : row.xs) grad->add_input(r.ToString());
  for (const TensorRef& r : row.dys) grad->add_input(r.ToString());
  auto& tin = *(*grad->mutable_attr())["Tin"].mutable_list();
  for (DataType t : x_types) tin.add_type(t);
  for (DataType t : dy_types) tin.add_type(t);
  auto& tout = *(*grad->mutable_attr())["Tout"].mutable_list();
  for (DataType t : x_types) tout.add_type(t);
  (*grad->mutable_attr())["f"].mutable_func()->set_name("audit_forward");
  std::vector<std::string> fetches;
  for (size_t k = 0; k < row.xs.size(); ++k) fetches.push_back(absl::StrCat(grad->name(), ":", k));
  return RunDefault(std::move(run), fetches, out);
}

// TfExtGradientFunctionDef as an FFI user calls it: looked up in the loaded op library.
using GradientFunctionDefFn = int (*)(const void*, size_t, void**, size_t*, char*, size_t);
using FreeFn = void (*)(void*);
GradientFunctionDefFn gradient_function_def = nullptr;
FreeFn tf_ext_free = nullptr;

// The op's gradient FunctionDef from the C API, called by a node of the graph (its name as the
// op) on the op's inputs and incoming gradients (zeros for the outputs the row does not take).
absl::Status GradientFunctionDefCall(GraphDef graph, const Row& row, std::string* out) {
  if (gradient_function_def == nullptr) {
    return absl::FailedPreconditionError("TfExtGradientFunctionDef: no op library loaded");
  }
  TF_ASSIGN_OR_RETURN(OpNode op, FindOpNode(graph, row));
  NodeDef node = *op.node;
  node.clear_input();
  const std::string bytes = node.SerializeAsString();
  void* fdef_bytes = nullptr;
  size_t fdef_len = 0;
  char error[1024] = "";
  if (gradient_function_def(bytes.data(), bytes.size(), &fdef_bytes, &fdef_len, error,
                            sizeof(error)) != 0) {
    return absl::InternalError(absl::StrCat("TfExtGradientFunctionDef: ", error));
  }
  FunctionDef fdef;
  const bool parsed = fdef.ParseFromArray(fdef_bytes, static_cast<int>(fdef_len));
  tf_ext_free(fdef_bytes);
  if (!parsed) return absl::InternalError("TfExtGradientFunctionDef: not a FunctionDef");
  const int num_inputs = op.node->input_size();
  const int num_outputs = fdef.signature().input_arg_size() - num_inputs;
  if (num_outputs < 0 || fdef.signature().output_arg_size() != num_inputs) {
    return absl::InternalError(absl::StrCat("TfExtGradientFunctionDef: a signature of ",
                                            fdef.signature().input_arg_size(), " inputs and ",
                                            fdef.signature().output_arg_size(), " outputs for ",
                                            num_inputs, " op inputs"));
  }
  NodeDef call;
  call.set_name("audit_gradient_call");
  call.set_op(fdef.signature().name());
  for (const std::string& input : op.node->input()) call.add_input(input);
  for (int k = 0; k < num_outputs; ++k) {
    auto y = std::find_if(row.ys.begin(), row.ys.end(), [&](const TensorRef& r) {
      return r.index == k;
    });
    if (y != row.ys.end()) {
      call.add_input(row.dys[y - row.ys.begin()].ToString());
      continue;
    }
    NodeDef* zeros = graph.add_node();  // an output the row does not take
    zeros->set_name(absl::StrCat("audit_zeros_", k));
    zeros->set_op("ZerosLike");
    zeros->add_input(absl::StrCat(op.node->name(), ":", k));
    (*zeros->mutable_attr())["T"].set_type(fdef.signature().input_arg(num_inputs + k).type());
    call.add_input(zeros->name());
  }
  *graph.mutable_library()->add_function() = std::move(fdef);
  std::vector<std::string> fetches;
  for (const TensorRef& x : row.xs) {
    int position = -1;
    for (int j = 0; j < num_inputs && position < 0; ++j) {
      auto ref = TensorRef::Parse(op.node->input(j));
      if (ref.ok() && ref->node == x.node && ref->index == x.index) position = j;
    }
    if (position < 0) {
      return absl::InvalidArgumentError(absl::StrCat("x '", x.ToString(), "' is not an input"));
    }
    fetches.push_back(absl::StrCat(call.name(), ":", position));
  }
  *graph.add_node() = std::move(call);
  return RunDefault(std::move(graph), fetches, out);
}

NodeDef* AddNode(GraphDef* graph, const std::string& name, const std::string& op,
                 std::vector<std::string> inputs) {
  NodeDef* n = graph->add_node();
  n->set_name(name);
  n->set_op(op);
  for (std::string& in : inputs) n->add_input(std::move(in));
  return n;
}

void AddIntConst(GraphDef* graph, const std::string& name, int32_t value, bool vector) {
  Tensor t(DT_INT32, vector ? TensorShape({1}) : TensorShape({}));
  t.flat<int32_t>()(0) = value;
  NodeDef* n = AddNode(graph, name, "Const", {});
  (*n->mutable_attr())["dtype"].set_type(DT_INT32);
  t.AsProtoTensorContent((*n->mutable_attr())["value"].mutable_tensor());
}

// The scalar whose gradient is the row's: L = sum over the ys of sum(Re(conj(dy) * y)), in
// float64. Its gradient with respect to a y is dy (TensorFlow's convention for a complex y:
// dL/dRe + i dL/dIm), so d L / d x is the row's gradient with these incoming gradients.
absl::Status AddLoss(const Row& row, GraphDef* graph, TensorRef* loss) {
  AddIntConst(graph, "audit_loss/flat", -1, true);
  AddIntConst(graph, "audit_loss/axis", 0, false);
  std::vector<std::string> terms;
  for (size_t i = 0; i < row.ys.size(); ++i) {
    const NodeDef* dy = NodeNamed(*graph, row.dys[i].node);
    if (dy == nullptr) return absl::InvalidArgumentError("no incoming gradient node");
    const DataType type = dy->attr().at("dtype").type();
    const std::string p = absl::StrCat("audit_loss/", i, "/");
    const bool complex = type == DT_COMPLEX64 || type == DT_COMPLEX128;
    std::string dy_name = row.dys[i].ToString();
    if (complex) {
      (*AddNode(graph, p + "conj", "Conj", {dy_name})->mutable_attr())["T"].set_type(type);
      dy_name = p + "conj";
    }
    (*AddNode(graph, p + "mul", "Mul", {row.ys[i].ToString(), dy_name})->mutable_attr())["T"]
        .set_type(type);
    std::string term = p + "mul";
    DataType real = type;
    if (complex) {
      real = type == DT_COMPLEX64 ? DT_FLOAT : DT_DOUBLE;
      NodeDef* re = AddNode(graph, p + "real", "Real", {term});
      (*re->mutable_attr())["T"].set_type(type);
      (*re->mutable_attr())["Tout"].set_type(real);
      term = re->name();
    }
    NodeDef* flat = AddNode(graph, p + "flat", "Reshape", {term, "audit_loss/flat"});
    (*flat->mutable_attr())["T"].set_type(real);
    (*flat->mutable_attr())["Tshape"].set_type(DT_INT32);
    NodeDef* sum = AddNode(graph, p + "sum", "Sum", {flat->name(), "audit_loss/axis"});
    (*sum->mutable_attr())["T"].set_type(real);
    (*sum->mutable_attr())["Tidx"].set_type(DT_INT32);
    (*sum->mutable_attr())["keep_dims"].set_b(false);
    term = sum->name();
    if (real != DT_DOUBLE) {
      NodeDef* cast = AddNode(graph, p + "cast", "Cast", {term});
      (*cast->mutable_attr())["SrcT"].set_type(real);
      (*cast->mutable_attr())["DstT"].set_type(DT_DOUBLE);
      term = cast->name();
    }
    terms.push_back(term);
  }
  NodeDef* total = AddNode(graph, "audit_loss", "AddN", terms);
  (*total->mutable_attr())["T"].set_type(DT_DOUBLE);
  (*total->mutable_attr())["N"].set_i(static_cast<int64_t>(terms.size()));
  *loss = TensorRef{total->name(), 0};
  return absl::OkStatus();
}

// tf_ext_grad --export=OUT.export (ComputeGraphGradients, then ExportGradientSavedModel) of the
// row's loss (AddLoss); scripts/audit_gradients.py runs the SavedModels without tf_ext.
absl::Status Export(GraphDef graph, const Row& row) {
  GradientRequest request;
  TF_RETURN_IF_ERROR(AddLoss(row, &graph, &request.y));
  request.graph = std::move(graph);
  request.xs = row.xs;
  GradientOptions options;
  options.keep_backward_graph = true;
  options.release_forward_graph = true;
  GradientResult result;
  TF_RETURN_IF_ERROR(ComputeGraphGradients(&request, &result, options));
  result.session.reset();
  return ExportGradientSavedModel(absl::StrCat(row.out, ".export"), request, &result);
}

absl::Status RunRow(const std::string& door, const Row& row) {
  std::string bytes;
  TF_RETURN_IF_ERROR(ReadFileToString(Env::Default(), row.graph, &bytes));
  std::string out;
  absl::Status s;
  GraphDef graph;
  if (door == "tf_add_gradients" || door == "tf_ext_add_gradients") {
    s = CApi(door, bytes, row, &out);
  } else if (!graph.ParseFromString(bytes)) {
    return absl::InvalidArgumentError("not a GraphDef");
  } else if (door == "symbolic_gradient_node") {
    s = SymbolicGradientNode(graph, row, &out);
  } else if (door == "gradient_function_def") {
    s = GradientFunctionDefCall(std::move(graph), row, &out);
  } else if (door == "export") {
    s = Export(std::move(graph), row);
  } else {
    s = Pipeline(door, std::move(graph), row, &out);
  }
  const std::string prefix = absl::StrCat(row.out, ".", door);
  if (!s.ok()) return Write(prefix + ".err", std::string(s.message()));
  if (door == "export") return absl::OkStatus();  // the SavedModel is the result
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
                                          "tf_add_gradients", "symbolic_gradient_node",
                                          "gradient_function_def", "export"};
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
    // The C API as FFI users reach it: from the loaded library, not a copy linked here.
    if (void* handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD)) {
      gradient_function_def =
          reinterpret_cast<GradientFunctionDefFn>(dlsym(handle, "TfExtGradientFunctionDef"));
      tf_ext_free = reinterpret_cast<FreeFn>(dlsym(handle, "TfExtFree"));
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
