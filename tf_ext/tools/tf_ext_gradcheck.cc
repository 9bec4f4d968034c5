// tf_ext_gradcheck: checks the C++ (FDH) gradients of every op of a custom-op library - or of
// TensorFlow's own ops - against float64 central differences, with no Python.
//
//   tf_ext_gradcheck [--library=PATH] [--ops=A,B] [--spec=FILE] [--seed=N]
//   tf_ext_gradcheck --library=none --ops=Tanh,Sigmoid,Mul [--spec=FILE]  (TensorFlow alone)
//   tf_ext_gradcheck --registries[=full] [--library=PATH]      (the registry report)
//   tf_ext_gradcheck --added_tf_gradients[=list] --spec=tf_ext/tools/tf_core_gradcheck_spec.txt
//       (the gradients the library adds for TensorFlow's own ops, tf_ext/grads/tf/)
//   tf_ext_gradcheck --emit_configs=DIR --spec=FILE [--ops=A,B]
//       (the attribute sweep of every configuration of every op with a C++ gradient, for scripts/audit_gradients.py: DIR gets
//       configs.jsonl and one GraphDef per variant and dtype, the forward op fed by constants)
// An op named in --ops that has no spec line gets values for its integer inputs chosen from
// their names (WithDefaultIntInputs, gradcheck_spec.h) instead of being left unchecked.
//
// The op library is found as tf_ext_grad finds it (tf_ext/tools/library_lookup.h: --library,
// $TF_EXT_LIBRARY, runfiles, next to the binary), and the tool says which one it loaded and
// how it was found; --library=none loads none. For each op: whether it has an FDH gradient, is explicitly non-differentiable, or has
// nothing registered; for ops with a gradient, one row per configuration (spec line, column
// "config"; "-": no spec, default inputs) and dtype with the max errors and PASS/FAIL. Exit
// status 1 if any row FAILs or cannot run, 0 otherwise.
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensorflow/c/c_api.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/public/version.h"
#include "tensorflow/core/platform/env.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/grads/unify.h"
#include "tf_ext/testing/gradient_checker.h"
#include "tf_ext/graph/io/tensor_doubles.h"
#include "tf_ext/tools/flags.h"
#include "tf_ext/tools/gradcheck_spec.h"
#include "tf_ext/tools/library_lookup.h"
#include "tf_ext/tools/quiet_startup.h"

namespace tensorflow::tf_ext::tools {
namespace {

constexpr char kDescription[] =
    R"(Checks the C++ (FDH) gradients of an op library's ops (all, or those in --ops),
or of TensorFlow's own ops (--library=none --ops=...), against float64 central differences.
  tf_ext_gradcheck [--library=PATH] [--ops=A,B] [--spec=FILE] [--seed=N]
  tf_ext_gradcheck --library=none --ops=Tanh,Sigmoid,Mul [--spec=FILE]
  tf_ext_gradcheck --registries[=full] [--library=PATH]
  tf_ext_gradcheck --added_tf_gradients[=list] [--library=PATH] [--spec=FILE]
The op library is found as tf_ext_grad finds it: --library, $TF_EXT_LIBRARY, Bazel runfiles,
next to this binary (docs/cpp.md, "Where the op library is found").)";

// --library's value that loads no library: TensorFlow's own registrations only.
constexpr char kNoLibrary[] = "none";

// The op library to load ("" for --library=none), found in library_lookup.h's order; prints
// which one and how it was found, so a report never leaves that open.
absl::StatusOr<std::string> ResolveLibrary(const std::string& flag) {
  if (flag == kNoLibrary) {
    std::cout << "op library: none (--library=none): TensorFlow's own gradients only\n";
    return std::string();
  }
  absl::StatusOr<LibraryCandidate> found = LocateOpLibrary(LibraryLookupContext::FromProcess(flag));
  if (!found.ok()) {
    return absl::NotFoundError(absl::StrCat(
        found.status().message(), " (--library=none checks TensorFlow's own ops without one)"));
  }
  std::cout << "op library: " << found->path << " (from " << found->source << ")\n";
  return found->path;
}

struct Row {
  std::string op, gradient, dtype, size, abs_err, rel_err, result, note, config = "-";
};

std::string Sci(double v) {
  std::ostringstream s;
  s << std::setprecision(2) << std::scientific << v;
  return s.str();
}

// The library's own input specs: its TfExtGradCheckSpecs entry point (tf_ext/grads/manifest.h),
// if the loaded library has one; "" otherwise.
std::string LibrarySpecs(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return "";
  using SpecsFn = size_t (*)(char*, size_t);
  auto fn = reinterpret_cast<SpecsFn>(dlsym(handle, "TfExtGradCheckSpecs"));
  std::string text;
  if (fn != nullptr) {
    text.resize(fn(nullptr, 0) + 1);
    text.resize(fn(text.data(), text.size()));
  }
  dlclose(handle);
  return text;
}

// Whether type attr `name` of `def` may be float, double or complex (not, e.g., an integer
// Tshape).
bool AllowsFloating(const OpDef& def, const std::string& name) {
  for (const auto& a : def.attr()) {
    if (a.name() != name) continue;
    if (!a.has_allowed_values()) return true;
    for (int t : a.allowed_values().list().type()) {
      if (t == DT_FLOAT || t == DT_DOUBLE || t == DT_COMPLEX64 || t == DT_COMPLEX128) return true;
    }
  }
  return false;
}

// The dtypes to check: the spec's, else float and double where the op's type attr (that of
// its first input whose type may be floating: Conv3DBackpropInputV2's T, not Tshape) allows,
// else complex64 and complex128 (FFT's Tcomplex).
std::vector<DataType> Dtypes(const OpDef& def, const OpSpec* spec, std::string* type_attr) {
  std::vector<DataType> out;
  for (const auto& in : def.input_arg()) {
    if (!in.type_attr().empty() && AllowsFloating(def, in.type_attr())) {
      *type_attr = in.type_attr();
      break;
    }
  }
  if (spec != nullptr && !spec->dtypes.empty()) {
    for (const std::string& s : spec->dtypes) {
      DataType dt;
      if (DataTypeFromString(s, &dt)) out.push_back(dt);
    }
    return out;
  }
  if (type_attr->empty()) return {DT_INVALID};  // fixed input types: one row
  for (const auto& a : def.attr()) {
    if (a.name() != *type_attr) continue;
    for (const auto& pair : {std::vector<DataType>{DT_FLOAT, DT_DOUBLE},
                             std::vector<DataType>{DT_COMPLEX64, DT_COMPLEX128}}) {
      for (DataType dt : pair) {
        const auto& allowed = a.allowed_values().list().type();
        if (!a.has_allowed_values() ||
            std::find(allowed.begin(), allowed.end(), dt) != allowed.end()) {
          out.push_back(dt);
        }
      }
      if (!out.empty()) break;
    }
  }
  return out;
}

// One configuration (`config`: its number, "-" for none) of `op`.
void CheckConfig(const std::string& op, const OpDef* def, const OpSpec* spec,
                 const std::string& config, uint64_t seed, double tol_float, double tol_double,
                 std::vector<Row>* rows);

// Every configuration of `op` (`specs`: its spec lines; none: default inputs).
void CheckOp(const std::string& op, const std::vector<OpSpec>& specs, uint64_t seed,
             double tol_float, double tol_double, std::vector<Row>* rows) {
  const OpDef* def = nullptr;
  if (!OpRegistry::Global()->LookUpOpDef(op, &def).ok()) {
    rows->push_back({op, "-", "-", "-", "-", "-", "ERROR", "op is not registered"});
    return;
  }
  std::string unimplemented;
  switch (LookupGradientKind(op, &unimplemented)) {
    case GradientKind::kUnimplemented:
      rows->push_back({op, "unimpl.", "-", "-", "-", "-", "unimpl.", unimplemented});
      return;
    case GradientKind::kNone:
      rows->push_back({op, "none", "-", "-", "-", "-", "no-grad", "explicitly not differentiable"});
      return;
    case GradientKind::kMissing:
      rows->push_back({op, "MISSING", "-", "-", "-", "-", "missing", "no C++ gradient registered"});
      return;
    case GradientKind::kFunction:
      break;
  }
  if (specs.empty()) {
    CheckConfig(op, def, nullptr, "-", seed, tol_float, tol_double, rows);
    return;
  }
  for (size_t c = 0; c < specs.size(); ++c) {
    CheckConfig(op, def, &specs[c], absl::StrCat(c + 1), seed, tol_float, tol_double, rows);
  }
}

void CheckConfig(const std::string& op, const OpDef* def, const OpSpec* spec,
                 const std::string& config, uint64_t seed, double tol_float, double tol_double,
                 std::vector<Row>* rows) {
  std::string type_attr;
  std::vector<DataType> dtypes = Dtypes(*def, spec, &type_attr);
  if (dtypes.empty()) {
    Row row{op, "FDH", "-", "-", "-", "-", "unchecked", "no float/double variant to difference"};
    row.config = config;
    rows->push_back(row);
    return;
  }
  for (DataType dt : dtypes) {
    Row row{op, "FDH", dt == DT_INVALID ? "fixed" : DataTypeString(dt)};
    row.config = config;
    OpInstance instance = BuildOpInstance(*def, spec, type_attr, dt, seed);
    const std::string& problem = instance.problem;
    const std::vector<Tensor>& inputs = instance.inputs;
    test::OpAttrs attrs;
    for (const auto& [name, value] : instance.attrs) {
      FunctionDefHelper::AttrValueWrapper w;
      w.proto = value;
      attrs.push_back({name, w});
    }
    if (!problem.empty()) {
      row.size = row.abs_err = row.rel_err = "-";
      row.result = "unchecked";
      row.note = problem;
      rows->push_back(row);
      continue;
    }
    test::GradientCheckOptions opts;
    opts.seed = seed;
    if (spec != nullptr) {
      opts.non_differentiable_inputs = spec->nondiff;
      opts.symmetric_inputs = spec->symmetric;
      opts.ignored_outputs = spec->ignore_outputs;
      opts.delta = spec->delta;
    }
    test::GradientCheckResult r;
    absl::Status s = test::CheckGradient(op, attrs, inputs, opts, &r);
    if (!s.ok()) {
      row.size = row.abs_err = row.rel_err = "-";
      row.result = "ERROR";
      row.note = std::string(s.message()).substr(0, 160);
      rows->push_back(row);
      continue;
    }
    const double tol = spec != nullptr && spec->tol > 0                     ? spec->tol
                       : dt == DT_DOUBLE || dt == DT_COMPLEX128 ? tol_double
                                                                : tol_float;
    row.size = absl::StrCat(r.rows, "x", r.columns);
    row.abs_err = Sci(r.max_abs_error);
    row.rel_err = Sci(r.max_rel_error);
    row.result = r.Passed(tol) && r.columns > 0 ? "PASS" : "FAIL";
    if (r.columns == 0) row.note = "nothing was differenced";
    if (r.numeric_reference != "op") {
      row.note = "numeric Jacobian of the " + r.numeric_reference +
                 " (its gradient is by design not the op's derivative)";
    }
    if (!r.Passed(tol)) row.note = r.ToString();
    if (r.rows == 0) {  // integer outputs only: nothing to compare
      row.result = "unchecked";
      row.note = "no floating-point output to compare";
    }
    rows->push_back(row);
  }
}

// --registries: counts before (TensorFlow's own registrations: this binary does not link the
// op library) and after loading `library` and unifying.
int RegistriesReport(const std::string& library, bool full) {
  RegistryReport report;
  std::vector<std::string> lacking_function, lacking_client;
  report.before = CountGradientRegistries(&lacking_function, &lacking_client);
  if (!library.empty()) {
    void* handle = nullptr;
    if (absl::Status s = Env::Default()->LoadDynamicLibrary(library.c_str(), &handle); !s.ok()) {
      std::cerr << "tf_ext_gradcheck: error: cannot load '" << library << "': " << s.message()
                << "\n";
      return 2;
    }
  }
  RegistryReport unified;
  if (absl::Status s = UnifyGradientRegistries(&unified); !s.ok()) {
    std::cerr << "tf_ext_gradcheck: error: " << s.message() << "\n";
    return 1;
  }
  report.after = unified.after;
  report.lacking_function = unified.lacking_function;
  report.lacking_client = unified.lacking_client;
  // Added = lacking before, not after (by the library's load-time unification or this call).
  auto added = [](const std::vector<std::string>& before, const std::vector<std::string>& after) {
    std::vector<std::string> out;
    std::set_difference(before.begin(), before.end(), after.begin(), after.end(),
                        std::back_inserter(out));
    return out;
  };
  report.added_function = added(lacking_function, report.lacking_function);
  report.added_client = added(lacking_client, report.lacking_client);
  std::cout << report.ToString(full);
  return 0;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonList(const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (const std::string& s : v) q.push_back(JsonString(s));
  return absl::StrCat("[", absl::StrJoin(q, ","), "]");
}

// The dtypes of the sweep: of float, double, complex64, complex128 those `type_attr` allows
// (one DT_INVALID for fixed input types); `wide_only`: double and complex128 only, where allowed.
std::vector<DataType> SweepDtypes(const OpDef& def, const std::string& type_attr, bool wide_only) {
  if (type_attr.empty()) return {DT_INVALID};
  std::vector<DataType> out;
  for (const auto& a : def.attr()) {
    if (a.name() != type_attr) continue;
    const auto& allowed = a.allowed_values().list().type();
    for (DataType dt : {DT_FLOAT, DT_DOUBLE, DT_COMPLEX64, DT_COMPLEX128}) {
      if (wide_only && (dt == DT_FLOAT || dt == DT_COMPLEX64)) continue;
      if (!a.has_allowed_values() || std::find(allowed.begin(), allowed.end(), dt) != allowed.end()) {
        out.push_back(dt);
      }
    }
  }
  if (out.empty() && wide_only) return SweepDtypes(def, type_attr, false);
  return out;
}

// --emit_configs: for each op with an FDH gradient, each configuration (spec line) and each
// variant of its sweep (SweepVariants), each dtype (all four for the base variant, the wide
// ones for the others): a GraphDef (Const nodes "input_<i>" feeding node "op") and a line of
// DIR/configs.jsonl: {"op", "config", "variant", "dtype", "graph", "nondiff",
// "ignore_outputs", "problem"}; ops without an FDH gradient get one line with "skip".
int EmitConfigs(const std::string& dir, const std::vector<std::string>& ops,
                const std::map<std::string, std::vector<OpSpec>>& specs, uint64_t seed) {
  Env* env = Env::Default();
  if (!env->RecursivelyCreateDir(dir).ok()) {
    std::cerr << "tf_ext_gradcheck: error: cannot create '" << dir << "'\n";
    return 2;
  }
  std::string lines;
  int count = 0, graphs = 0;
  for (const std::string& op : ops) {
    const OpDef* def = nullptr;
    std::string unimplemented;
    if (!OpRegistry::Global()->LookUpOpDef(op, &def).ok()) {
      absl::StrAppend(&lines, "{\"op\":", JsonString(op), ",\"skip\":\"not registered\"}\n");
      continue;
    }
    if (LookupGradientKind(op, &unimplemented) != GradientKind::kFunction) {
      absl::StrAppend(&lines, "{\"op\":", JsonString(op), ",\"skip\":\"no C++ gradient\"}\n");
      continue;
    }
    auto it = specs.find(op);
    std::vector<OpSpec> configs =
        it != specs.end() ? it->second : std::vector<OpSpec>{OpSpec{op}};
    std::string type_attr;
    Dtypes(*def, nullptr, &type_attr);
    for (size_t c = 0; c < configs.size(); ++c) {
      const OpSpec base = WithDefaultIntInputs(*def, &configs[c]);
      for (const SweepVariant& v : SweepVariants(*def, base)) {
        for (DataType dt : SweepDtypes(*def, type_attr, v.label != "base")) {
          OpInstance instance = BuildOpInstance(*def, &v.spec, type_attr, dt, seed,
                                                /*batch_zero=*/false, /*lists=*/true);
          std::string graph_file;
          if (instance.problem.empty()) {
            GraphDef graph;
            graph.mutable_versions()->set_producer(TF_GRAPH_DEF_VERSION);
            NodeDef* node = graph.add_node();
            node->set_name("op");
            node->set_op(op);
            for (size_t i = 0; i < instance.inputs.size(); ++i) {
              NodeDef* in = graph.add_node();
              in->set_name(absl::StrCat("input_", i));
              in->set_op("Const");
              (*in->mutable_attr())["dtype"].set_type(instance.inputs[i].dtype());
              instance.inputs[i].AsProtoTensorContent((*in->mutable_attr())["value"].mutable_tensor());
              node->add_input(in->name());
            }
            for (const auto& [name, value] : instance.attrs) (*node->mutable_attr())[name] = value;
            graph_file = absl::StrCat(absl::Dec(graphs++, absl::kZeroPad5), ".pb");
            if (!WriteBinaryProto(env, absl::StrCat(dir, "/", graph_file), graph).ok()) {
              std::cerr << "tf_ext_gradcheck: error: cannot write to '" << dir << "'\n";
              return 2;
            }
          }
          absl::StrAppend(&lines, "{\"op\":", JsonString(op), ",\"config\":", JsonString(absl::StrCat(c + 1)),
                          ",\"variant\":", JsonString(v.label), ",\"dtype\":",
                          JsonString(dt == DT_INVALID ? "fixed" : DataTypeString(dt)),
                          ",\"graph\":", JsonString(graph_file), ",\"nondiff\":",
                          JsonList(v.spec.nondiff), ",\"ignore_outputs\":",
                          JsonList(v.spec.ignore_outputs), ",\"problem\":",
                          JsonString(instance.problem), "}\n");
          ++count;
        }
      }
    }
  }
  if (!WriteStringToFile(env, dir + "/configs.jsonl", lines).ok()) {
    std::cerr << "tf_ext_gradcheck: error: cannot write to '" << dir << "'\n";
    return 2;
  }
  std::cout << "emitted " << count << " configurations (" << graphs << " graphs) of "
            << ops.size() << " ops to " << dir << "\n";
  return 0;
}

// The rows as an aligned table, their notes and the summary line; returns the failures.
int PrintRows(const std::vector<Row>& rows) {
  const std::vector<std::string> header = {"op", "gradient", "dtype", "rows x cols",
                                           "max abs err", "max rel err", "result", "config"};
  std::vector<size_t> width(header.size());
  auto cells = [](const Row& r) {
    return std::vector<std::string>{r.op, r.gradient, r.dtype, r.size, r.abs_err, r.rel_err,
                                    r.result, r.config};
  };
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const Row& r : rows) {
    auto cs = cells(r);
    for (size_t c = 0; c < cs.size(); ++c) width[c] = std::max(width[c], cs[c].size());
  }
  auto print = [&](const std::vector<std::string>& cs) {
    std::cout << "|";
    for (size_t c = 0; c < cs.size(); ++c) std::cout << " " << std::left << std::setw(width[c]) << cs[c] << " |";
    std::cout << "\n";
  };
  print(header);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  print(rule);
  int pass = 0, fail = 0, other = 0;
  for (const Row& r : rows) {
    print(cells(r));
    if (r.result == "PASS") {
      ++pass;
    } else if (r.result == "FAIL" || r.result == "ERROR") {
      ++fail;
    } else {
      ++other;
    }
  }
  for (const Row& r : rows) {
    if (!r.note.empty()) {
      std::cout << "note: " << r.op << " (" << r.dtype << ", config " << r.config
                << "): " << r.note << "\n";
    }
  }
  std::cout << "gradcheck: " << pass << " passed, " << fail << " failed, " << other
            << " without a checkable gradient\n";
  return fail;
}

// Loads the op library and names the ops to check: --ops, else the TensorFlow ops whose
// gradients it adds (--added_tf_gradients; =list only lists them and sets *listed), else its
// own. False after printing an error.
bool LibraryOps(const std::string& library, const std::string& added_tf_gradients,
                std::vector<std::string>* ops, bool* listed) {
  TF_Status* status = TF_NewStatus();
  TF_Library* lib = TF_LoadLibrary(library.c_str(), status);
  if (TF_GetCode(status) != TF_OK) {
    std::cerr << "tf_ext_gradcheck: error: cannot load '" << library
              << "': " << TF_Message(status) << "\n";
    TF_DeleteStatus(status);
    return false;
  }
  TF_DeleteStatus(status);
  TF_Buffer list = TF_GetOpList(lib);
  OpList op_list;
  op_list.ParseFromArray(list.data, static_cast<int>(list.length));
  TF_DeleteLibraryHandle(lib);  // frees the handle and its op list; the library stays loaded
  std::vector<std::string> lib_ops;
  for (const OpDef& d : op_list.op()) lib_ops.push_back(d.name());
  std::cout << "ops in the op library: " << lib_ops.size() << "\n";
  if (!added_tf_gradients.empty()) {
    std::vector<std::string> added = AddedTfGradientOps();
    std::cout << "TensorFlow ops whose gradient the op library adds: " << added.size() << "\n";
    if (added_tf_gradients == "list") {
      for (const std::string& op : added) std::cout << "added: " << op << "\n";
      *listed = true;
      return true;
    }
    if (ops->empty()) *ops = added;
  } else if (ops->empty()) {
    *ops = lib_ops;
  }
  return true;
}

// Input specs: the library's own (its declarations' GradCheck, through the C entry point
// TfExtGradCheckSpecs, when it has one), then --spec's lines, whose configurations of an op
// replace the library's. False after printing an error.
bool ReadSpecs(const std::string& library, const std::string& spec_path,
               std::map<std::string, std::vector<OpSpec>>* specs) {
  std::vector<std::string> texts = {library.empty() ? "" : LibrarySpecs(library)};
  if (!spec_path.empty()) {
    std::string file;
    if (absl::Status s = ReadFileToString(Env::Default(), spec_path, &file); !s.ok()) {
      std::cerr << "tf_ext_gradcheck: error: cannot read spec '" << spec_path << "'\n";
      return false;
    }
    texts.push_back(file);
  }
  for (const std::string& text : texts) {
    auto parsed = ParseSpecConfigs(text);
    if (!parsed.ok()) {
      std::cerr << "tf_ext_gradcheck: error: " << parsed.status().message() << "\n";
      return false;
    }
    for (auto& [op, configs] : *parsed) (*specs)[op] = std::move(configs);
  }
  return true;
}

int Main(int argc, char** argv) {
  std::string library, ops_flag, spec_path, registries;
  std::string added_tf_gradients, emit_configs;
  uint64_t seed = 1;
  double tol_float = 1e-3, tol_double = 1e-6;
  FlagParser parser("tf_ext_gradcheck", kDescription);
  parser.String("library", &library,
                "op library to load; its ops are checked (all, or those in --ops). Default:\n"
                "$TF_EXT_LIBRARY, then runfiles, then next to this binary; =none loads none")
      .ValueName("PATH");
  parser.String("ops", &ops_flag,
                "ops to check (required with --library=none: e.g. TensorFlow's own ops)")
      .ValueName("A,B");
  parser.String("added_tf_gradients", &added_tf_gradients,
                "check the gradients the op library adds for TensorFlow's own ops\n"
                "(TF_EXT_REGISTER_TF_GRADIENT, tf_ext/grads/tf/) instead of its own ops;\n"
                "=list only lists them ('added: OP' lines)")
      .ValueName("list")
      .ImplicitValue("check")
      .Choices({"check", "list"});
  parser.String("spec", &spec_path,
                "input specs, one configuration per line (shapes, ranges, values, ROI rows,\n"
                "SPD matrices, dtypes, attrs); see gradcheck_spec.h")
      .ValueName("FILE");
  parser.Int("seed", &seed, "seed of the generated inputs");
  parser.Double("tol_float", &tol_float, "max error for PASS of float rows").ValueName("TOL");
  parser.Double("tol_double", &tol_double, "max error for PASS of double rows").ValueName("TOL");
  parser.String("emit_configs", &emit_configs,
                "instead of checking: write the attribute sweep of every configuration (each\n"
                "allowed enum value, bools flipped, strides/dilations 2, negative axes, size-1\n"
                "and empty dimensions, broadcasting; each float/complex dtype) to DIR:\n"
                "configs.jsonl plus one GraphDef per row (scripts/audit_gradients.py)")
      .ValueName("DIR");
  parser.String("registries", &registries,
                "instead of checking: how many ops have a function gradient, a client\n"
                "gradient, both or neither, before and after tf_ext unifies TensorFlow's two\n"
                "C++ gradient registries (after loading the op library, unless\n"
                "--library=none); =full also\n"
                "lists every op still lacking in each registry")
      .ValueName("full")
      .ImplicitValue("summary")
      .Choices({"summary", "full"});
  const absl::Status parsed = parser.Parse(argc, argv);
  if (parser.help_requested()) {
    std::cout << parser.Usage();
    return 0;
  }
  if (!parsed.ok()) {
    std::cerr << "tf_ext_gradcheck: error: " << parser.ErrorLine(parsed.message()) << "\n";
    return 2;
  }
  std::vector<std::string> ops;
  if (!ops_flag.empty()) ops = absl::StrSplit(ops_flag, ',', absl::SkipEmpty());
  if (registries.empty() && library == kNoLibrary && ops.empty()) {
    std::cerr << "tf_ext_gradcheck: error: " << parser.ErrorLine("--library=none needs --ops")
              << "\n";
    return 2;
  }
  absl::StatusOr<std::string> resolved = ResolveLibrary(library);
  if (!resolved.ok()) {
    std::cerr << "tf_ext_gradcheck: error: " << resolved.status().message() << "\n";
    return 2;
  }
  library = *resolved;
  if (!registries.empty()) return RegistriesReport(library, registries == "full");
  if (!library.empty()) {
    bool listed = false;
    if (!LibraryOps(library, added_tf_gradients, &ops, &listed)) return 2;
    if (listed) return 0;
  }
  std::map<std::string, std::vector<OpSpec>> specs;
  if (!ReadSpecs(library, spec_path, &specs)) return 2;

  if (!emit_configs.empty()) {
    if (ops_flag.empty()) {  // every registered op with a C++ (function) gradient
      std::vector<OpDef> defs;
      OpRegistry::Global()->GetRegisteredOps(&defs);
      std::set<std::string> all;
      std::string unused;
      for (const OpDef& d : defs) {
        if (LookupGradientKind(d.name(), &unused) == GradientKind::kFunction) all.insert(d.name());
      }
      ops.assign(all.begin(), all.end());
    }
    return EmitConfigs(emit_configs, ops, specs, seed);
  }
  std::vector<Row> rows;
  for (const std::string& op : ops) {
    auto it = specs.find(op);
    std::vector<OpSpec> configs;
    if (it != specs.end()) {
      configs = it->second;
    } else if (!ops_flag.empty()) {
      // Named by --ops without a spec line: integer inputs chosen from their names.
      const OpDef* def = nullptr;
      if (OpRegistry::Global()->LookUpOpDef(op, &def).ok()) {
        configs.push_back(WithDefaultIntInputs(*def, nullptr));
      }
    }
    CheckOp(op, configs, seed, tol_float, tol_double, &rows);
  }

  return PrintRows(rows) == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tensorflow::tf_ext::tools

int main(int argc, char** argv) {
  tensorflow::tf_ext::tools::QuietTensorFlowStartup();
  return tensorflow::tf_ext::tools::Main(argc, argv);
}
