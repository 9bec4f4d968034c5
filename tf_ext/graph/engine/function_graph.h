// Function graphs as plain data, for the passes that build functions of their own (the
// control-flow rewrite and its gradients, a function body's gradient): NodeDefs of a function
// graph, names, and the graph's function library.
#ifndef TF_EXT_GRAPH_ENGINE_FUNCTION_GRAPH_H_
#define TF_EXT_GRAPH_ENGINE_FUNCTION_GRAPH_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/core/common_runtime/function_body.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/tensor_shape.pb.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

// Identity nodes with one data input and no control edges, bypassed.
void BypassIdentities(GraphDef* def);
// Sets the "index" attr of node `node` (an _Arg or _Retval).
void SetIndex(GraphDef* def, const std::string& node, int index);

// "node:index".
std::string TensorName(const std::string& node, int index);
// `base`, or `base`_2, ...: the first that no node name of g starts with.
std::string UnusedPrefix(const Graph& g, const std::string& base);
// NodeDefs of a function graph.
NodeDef MakeNode(const std::string& name, const std::string& op,
                 const std::vector<std::string>& inputs);
NodeDef ArgNode(const std::string& name, DataType type, int index);
NodeDef RetNode(const std::string& name, const std::string& input, DataType type, int index);
NodeDef ScalarConst(const std::string& name, int32_t value);
TensorShapeProto UnknownShape();
// A function of the library, instantiated with its attrs.
absl::StatusOr<std::unique_ptr<FunctionBody>> Instantiate(const FunctionLibraryDefinition& flib,
                                                          const NameAttrList& f);
// Adds the function `def` (a graph of _Arg, _Retval and body nodes) to g's library under a new
// name built from `base`; nodes named in `control_rets` stay control outputs.
absl::StatusOr<std::string> AddFunction(Graph* g, const GraphDef& def, const std::string& base,
                                        const std::set<std::string>& control_rets = {});
// Adds to g's library the functions `from` has and g lacks.
absl::Status MergeLibrary(const FunctionLibraryDefinition& from, Graph* g);
// The arg index output `index` of `n` passes on unchanged (through Identity nodes), or -1.
int SourceArg(const Node* n, int index);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_FUNCTION_GRAPH_H_
