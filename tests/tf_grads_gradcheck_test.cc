// Every gradient tf_ext adds for TensorFlow's own ops (tf_ext/grads/tf/, registered with
// TF_EXT_REGISTER_TF_GRADIENT) against numeric Jacobians, through tf_ext_gradcheck:
//   tf_ext_gradcheck --added_tf_gradients --spec=tf_ext/tools/tf_core_gradcheck_spec.txt
// The list of ops comes from the registry at run time (the tool's --added_tf_gradients), not
// from a list here: an op newly registered in tf_ext/grads/tf/ fails this test by name until it
// has two passing configurations in the spec file or an entry in kExceptions below.
//
// Each op needs, in the spec file, at least two configurations (lines) whose every row passes,
// a 32-bit row (float or complex64) and a 64-bit row (double or complex128) unless it is on
// kSinglePrecision. Python-convention checks (ties, kinks, training-mode batch norm, the
// eigenvector phases) are in the tests named in the spec file's comments.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/command.h"

namespace tensorflow::tf_ext {
namespace {

using test::CommandResult;
using test::RunCommand;

// Gradients tf_ext_gradcheck cannot check, each with the reason and the test that checks it
// numerically (or against Python's gradients) instead.
const std::map<std::string, std::string> kExceptions = {
    // Variant / resource inputs or outputs: TensorLists, TensorArrays, Optionals, composite
    // tensors, CSR sparse matrices.
    {"TensorListConcat", "variant input; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListConcatV2", "variant input; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListFromTensor", "variant output; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListGather", "variant input; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListGetItem", "variant input; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListPopBack", "variant input; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListPushBack", "variant input; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListResize", "variant input; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListScatter", "variant output; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListScatterIntoExistingList",
     "variant input; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListScatterV2", "variant output; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListSetItem", "variant input; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListSplit", "variant output; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorListStack", "variant input; tests/list_grads_test.cc, tests/python/test_list_grads.py"},
    {"TensorArrayConcatV3", "resource input; tests/python/test_list_grads.py"},
    {"TensorArrayGatherV3", "resource input; tests/python/test_list_grads.py"},
    {"TensorArrayReadV3", "resource input; tests/python/test_list_grads.py"},
    {"TensorArrayScatterV3", "resource input; tests/python/test_list_grads.py"},
    {"TensorArraySplitV3", "resource input; tests/python/test_list_grads.py"},
    {"TensorArrayWriteV3", "resource input; tests/python/test_list_grads.py"},
    {"TensorArrayConcat",
     "string handle, runs only in GraphDefs of version < 16; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"TensorArrayConcatV2",
     "string handle, made only in GraphDefs of version < 26; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"TensorArrayGather",
     "string handle, runs only in GraphDefs of version < 16; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"TensorArrayGatherV2",
     "string handle, runs only in GraphDefs of version < 26; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"TensorArrayRead",
     "string handle, runs only in GraphDefs of version < 16; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"TensorArrayReadV2",
     "string handle, runs only in GraphDefs of version < 26; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"TensorArrayScatter",
     "string handle, runs only in GraphDefs of version < 19; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"TensorArrayScatterV2",
     "string handle, runs only in GraphDefs of version < 26; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"TensorArraySplit",
     "string handle, runs only in GraphDefs of version < 16; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"TensorArraySplitV2",
     "string handle, runs only in GraphDefs of version < 26; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"TensorArrayWrite",
     "string handle, runs only in GraphDefs of version < 16; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"TensorArrayWriteV2",
     "string handle, runs only in GraphDefs of version < 26; "
     "tests/python/test_tensor_array_v1v2_grads.py"},
    {"OptionalFromValue", "variant output; tests/python/test_control_flow.py"},
    {"OptionalGetValue", "variant input; tests/python/test_control_flow.py"},
    {"CompositeTensorVariantFromComponents",
     "variant output; tests/tf_misc_parity_grads_test.cc, tests/python/test_tf_misc_parity_grads.py"},
    {"CompositeTensorVariantToComponents",
     "variant input; tests/tf_misc_parity_grads_test.cc, tests/python/test_tf_misc_parity_grads.py"},
    {"RaggedTensorFromVariant",
     "variant input; tests/tf_misc_parity_grads_test.cc, tests/python/test_tf_misc_parity_grads.py"},
    {"RaggedTensorToVariant",
     "variant output; tests/tf_misc_parity_grads_test.cc, tests/python/test_tf_misc_parity_grads.py"},
    {"CSRSparseMatrixToDense", "variant input; tests/python/test_tf_sparse_grads.py"},
    {"CSRSparseMatrixToSparseTensor", "variant input; tests/python/test_tf_sparse_grads.py"},
    {"DenseToCSRSparseMatrix", "variant output; tests/python/test_tf_sparse_grads.py"},
    {"SparseTensorToCSRSparseMatrix", "variant output; tests/python/test_tf_sparse_grads.py"},
    {"SparseMatrixMatMul", "variant input; tests/python/test_tf_sparse_grads.py"},
    {"SparseMatrixSparseMatMul", "variant inputs; tests/python/test_tf_sparse_grads.py"},
    {"SparseMatrixTranspose", "variant input; tests/python/test_tf_sparse_grads.py"},
    {"SparseMatrixAdd",
     "no kernel in tensorflow-cpu; checked structurally against Python's gradient graph by "
     "tests/python/test_unrunnable_grads.py"},
    {"SparseMatrixSoftmax",
     "no kernel in tensorflow-cpu; checked structurally against Python's gradient graph by "
     "tests/python/test_unrunnable_grads.py"},
    {"XlaSpmdShardToFullShape",
     "no kernel in tensorflow-cpu (its gradient op, XlaSpmdFullToShardShape, runs only in an "
     "XLA cluster); checked structurally against Python's gradient graph, and in an XLA "
     "cluster on one device, by tests/python/test_unrunnable_grads.py"},
    // Function-valued control flow: list inputs and function attrs.
    {"While", "function attrs, list inputs; tests/python/test_control_flow.py"},
    {"StatelessWhile", "function attrs, list inputs; tests/python/test_control_flow.py"},
    {"If", "function attrs, list inputs; tests/python/test_control_flow.py"},
    {"StatelessIf", "function attrs, list inputs; tests/python/test_control_flow.py"},
    {"Case", "function attrs, list inputs; tests/python/test_control_flow.py"},
    {"StatelessCase", "function attrs, list inputs; tests/python/test_control_flow.py"},
    // List inputs (N * T, list(type)).
    {"AccumulateNV2", "list input; tests/python/test_tf_array_misc_grads.py"},
    {"IdentityN", "list input; tests/unify_test.cc, tests/gradcheck_test.cc"},
    {"Print", "list input; tests/python/test_tf_array_misc_grads.py"},
    {"RaggedGather",
     "list input; tests/tf_misc_parity_grads_test.cc, tests/python/test_tf_misc_parity_grads.py"},
    {"RaggedTensorToSparse",
     "list input; tests/tf_misc_parity_grads_test.cc, tests/python/test_tf_misc_parity_grads.py"},
    {"RaggedTensorToTensor",
     "list input; tests/tf_misc_parity_grads_test.cc, tests/python/test_tf_misc_parity_grads.py"},
    // Gradients that are by design not the forward's derivative.
    {"PreventGradient", "its gradient is an error (Python: LookupError); tests/tf_sparse_grads_test.cc"},
    {"FakeQuantWithMinMaxArgs",
     "straight-through estimator; tests/tf_array_misc_grads_test.cc, tests/python/test_tf_array_misc_grads.py"},
    {"FakeQuantWithMinMaxVars",
     "straight-through estimator; tests/tf_array_misc_grads_test.cc, tests/python/test_tf_array_misc_grads.py"},
    {"FakeQuantWithMinMaxVarsPerChannel",
     "straight-through estimator; tests/python/test_tf_array_misc_grads.py"},
    {"QuantizeAndDequantizeV2",
     "straight-through estimator; tests/tf_array_misc_grads_test.cc, tests/python/test_tf_array_misc_grads.py"},
    {"RandomGamma",
     "stateful: every run draws new samples; tests/tf_array_misc_grads_test.cc"},
    {"StatelessRandomGammaV2",
     "implicit reparameterisation: not the derivative of the sampler's rejection path at a fixed "
     "seed; tests/tf_array_misc_grads_test.cc, tests/python/test_tf_array_misc_grads.py"},
    {"StatelessRandomGammaV3",
     "implicit reparameterisation (as StatelessRandomGammaV2); tests/python/test_tf_array_misc_grads.py"},
    {"StatelessParameterizedTruncatedNormal",
     "implicit reparameterisation of a rejection sampler; tests/tf_array_misc_grads_test.cc, "
     "tests/python/test_tf_array_misc_grads.py"},
    // Integer outputs only: no Jacobian to compare (the gradient is zeros, as Python's None).
    {"ArgMax", "integer output; tests/python/test_tf_nn_math_grads.py"},
    {"ArgMin", "integer output; tests/python/test_tf_nn_math_grads.py"},
    // Kernels this process cannot run.
    {"DebugGradientRefIdentity",
     "reference-typed output; tests/tf_misc_parity_grads_test.cc, tests/python/test_tf_misc_parity_grads.py"},
    {"ApproxTopK", "no CPU kernel in tensorflow-cpu; tests/tf_sparse_grads_test.cc"},
    {"TopK", "no TopK node runs in TensorFlow 2.21; tests/tf_sparse_grads_test.cc (TopKV1IsTopKV2)"},
    {"CTCLossV2", "GPU-only kernel; tests/tf_sparse_grads_test.cc"},
    {"BatchNormWithGlobalNormalization",
     "kernels run only in GraphDefs of version < 9; tests/tf_misc_parity_grads_test.cc"},
};

// Ops checked in 32-bit types only, and why.
const std::map<std::string, std::string> kSinglePrecision = {
    {"FusedBatchNorm", "float kernels only"},
    {"FusedBatchNormV2", "U is float only"},
    {"FusedBatchNormGrad", "float kernels only"},
    {"FusedBatchNormGradV2", "U is float only"},
    {"FusedBatchNormGradV3", "U is float only"},
    {"IsotonicRegression", "float kernels for the default output_dtype"},
    {"SparseMatMul", "float and bfloat16 only"},
    {"BlockLSTM", "half and float only"},
    {"BlockLSTMV2", "half and float only"},
    {"AvgPool3DGrad", "no double CPU kernel"},
    {"MaxPool3DGrad", "half, bfloat16 and float only"},
    {"MaxPool3DGradGrad", "no double CPU kernel"},
    {"XlaEinsum", "float, bfloat16 and complex64 kernels; complex64 (Python's unconjugated rule) "
                  "against Python in tests/python/test_tf_xla_grads.py"},
};

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

struct Row {
  std::string op, dtype, result, config;
};

// The rows of tf_ext_gradcheck's table (op, gradient, dtype, size, errors, result, config).
std::vector<Row> Rows(const std::string& output) {
  static const std::regex row(
      "\\| (\\S+) +\\| \\S+ +\\| (\\S+) +\\|[^|\\n]*\\|[^|\\n]*\\|[^|\\n]*\\| (\\S+) +\\| "
      "(\\S+) +\\|\\n");
  std::vector<Row> rows;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), row);
       it != std::sregex_iterator(); ++it) {
    if ((*it)[1] == "op" || (*it)[1].str()[0] == '-') continue;  // the header and its rule
    rows.push_back({(*it)[1], (*it)[2], (*it)[3], (*it)[4]});
  }
  return rows;
}

TEST(TfGradsGradcheck, EveryAddedGradientPassesOrIsAnException) {
  const CommandResult r = RunCommand(
      "tf_ext/tf_ext_gradcheck --library=tf_ext/_tf_ext_ops.so --added_tf_gradients "
      "--spec=tf_ext/tools/tf_core_gradcheck_spec.txt");
  std::smatch count;
  ASSERT_TRUE(std::regex_search(r.output, count,
                                std::regex("TensorFlow ops whose gradient the op library adds: "
                                           "(\\d+)")))
      << r.output;
  std::map<std::string, std::vector<Row>> by_op;
  for (const Row& row : Rows(r.output)) by_op[row.op].push_back(row);
  EXPECT_EQ(by_op.size(), std::stoul(count[1])) << r.output;
  EXPECT_GE(by_op.size(), 150u) << r.output;

  std::vector<std::string> failed;
  for (const auto& [op, rows] : by_op) {
    std::set<std::string> configs, dtypes;
    bool all_pass = true;
    for (const Row& row : rows) {
      configs.insert(row.config);
      dtypes.insert(row.dtype);
      all_pass = all_pass && row.result == "PASS";
    }
    const bool has32 = dtypes.count("float") || dtypes.count("complex64");
    const bool has64 = dtypes.count("double") || dtypes.count("complex128");
    std::string problem;
    if (configs.count("-")) {
      problem = "no spec line in tf_ext/tools/tf_core_gradcheck_spec.txt";
    } else if (!all_pass) {
      problem = "a row does not pass";
    } else if (configs.size() < 2) {
      problem = "one configuration (needs two)";
    } else if (!has32 || (!has64 && !kSinglePrecision.count(op))) {
      problem = "not checked in both precisions";
    }
    if (kExceptions.count(op)) {
      // An exception that passes is stale: it must go.
      EXPECT_FALSE(problem.empty()) << op << " passes: remove it from kExceptions";
      continue;
    }
    if (!problem.empty()) failed.push_back(op + ": " + problem);
  }
  EXPECT_TRUE(failed.empty()) << "failing or unchecked (spec it or add an exception with the "
                                 "test that checks it):\n  "
                              << Join(failed, "\n  ") << "\n\n" << r.output;
  for (const auto& [op, reason] : kExceptions) {
    EXPECT_TRUE(by_op.count(op)) << op << " is not a gradient tf_ext adds: remove the exception";
  }
  for (const auto& [op, reason] : kSinglePrecision) {
    EXPECT_TRUE(by_op.count(op)) << op << " is not a gradient tf_ext adds";
  }
}

// TensorFlow 2.21 has none of these gradients in C++: without the library each is missing (if a
// release adds one, RegisterGradientIfMissing keeps TensorFlow's and the op leaves the list).
TEST(TfGradsGradcheck, TensorFlowAloneHasNone) {
  const CommandResult list = RunCommand(
      "tf_ext/tf_ext_gradcheck --library=tf_ext/_tf_ext_ops.so --added_tf_gradients=list");
  ASSERT_EQ(list.code, 0) << list.output;
  std::vector<std::string> ops;
  const std::regex added("\\nadded: (\\S+)");
  for (auto it = std::sregex_iterator(list.output.begin(), list.output.end(), added);
       it != std::sregex_iterator(); ++it) {
    ops.push_back((*it)[1]);
  }
  ASSERT_GE(ops.size(), 150u) << list.output;
  const CommandResult bare = RunCommand(
      "tf_ext/tf_ext_gradcheck --library=none --ops=" + Join(ops, ","));
  for (const std::string& op : ops) {
    EXPECT_TRUE(std::regex_search(bare.output, std::regex("\\| " + op + " +\\| MISSING +\\|")))
        << op << "\n" << bare.output;
  }
}

}  // namespace
}  // namespace tensorflow::tf_ext
