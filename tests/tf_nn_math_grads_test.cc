// The C++ gradients tf_ext adds for TensorFlow's nn and math ops (tf_ext/grads/tf/nn_grad.cc,
// math_grad.cc) against numeric Jacobians, through tf_ext_gradcheck, in two input/attr
// configurations each: the spec lines of tf_ext/tools/tf_core_gradcheck_spec.txt, and the
// second configurations below (NCHW, SAME padding, strides 2, other shapes and ranges).
// Python-convention checks (max-pool ties, ReluGrad at 0, training-mode batch norm) are in
// tests/python/test_tf_nn_math_grads.py.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/command.h"

namespace tensorflow::tf_ext {
namespace {

using test::CommandResult;
using test::RunCommand;

// Ops checked in float and double / in float only (the fused batch-norm kernels; isotonic
// regression's default output_dtype; its double kernels: tests/python/test_tf_nn_math_grads.py).
const std::vector<std::string> kFloatAndDouble = {
    "ReluGrad", "Relu6Grad", "EluGrad", "SeluGrad", "SoftplusGrad", "TanhGrad", "SigmoidGrad",
    "SqrtGrad", "RsqrtGrad", "ReciprocalGrad", "Round", "Rint", "Ceil", "BiasAddGrad",
    "AvgPoolGrad", "Conv2DBackpropFilter", "DepthwiseConv2dNativeBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter", "Digamma", "Dawsn", "Expint", "FresnelCos", "FresnelSin",
    "Spence", "BesselI0", "BesselI0e", "BesselI1", "BesselI1e", "BesselJ0", "BesselJ1", "BesselK0",
    "BesselK0e", "BesselK1", "BesselK1e", "BesselY0", "BesselY1", "Igamma", "Igammac", "Betainc",
    "Zeta", "Polygamma", "FloorMod", "Cross", "EuclideanNorm", "NextAfter", "Cumprod",
    "CumulativeLogsumexp", "SparseSoftmaxCrossEntropyWithLogits", "InvGrad", "BiasAddV1", "Conv3D",
    "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2", "TopKV2", "MaxPoolWithArgmax", "Dilation2D",
    "NthElement", "SegmentMean", "SegmentMax", "SegmentMin", "SegmentProd", "UnsortedSegmentProd",
    "SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN",
    "SparseSegmentSumWithNumSegments", "SparseSegmentMeanWithNumSegments",
    "SparseSegmentSqrtNWithNumSegments",
};
const std::vector<std::string> kFloatOnly = {
    "FusedBatchNorm", "FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3",
    "FusedBatchNormV2", "IsotonicRegression",
};

// Second configuration of each op (the first: tf_core_gradcheck_spec.txt). Inputs stay away
// from the kinks (0 and 6 of Relu6, integers and half-integers of Ceil / Round / Rint) and from
// the points where a closed form divides by x.
constexpr char kSecondConfigs[] =
    "ReluGrad gradients=8@-2:2 features=values:-3,-1.5,-0.6,-0.1,0.1,0.7,1.9,4\n"
    "Relu6Grad gradients=8@-2:2 features=values:-3,-0.1,0.1,1.9,4,5.9,6.1,9\n"
    "EluGrad gradients=8@-2:2 outputs=values:-0.99,-0.7,-0.3,-0.05,0.05,0.7,1.9,4\n"
    "SeluGrad gradients=8@-2:2 outputs=values:-1.7,-1.2,-0.3,-0.05,0.05,0.7,1.9,4\n"
    "SoftplusGrad gradients=3x4@-2:2 features=3x4@-5:5\n"
    "TanhGrad y=3x4@-0.99:0.99 dy=3x4@-2:2\n"
    "SigmoidGrad y=3x4@0.01:0.99 dy=3x4@-2:2\n"
    "SqrtGrad y=3x4@0.2:5 dy=3x4@-2:2\n"
    "RsqrtGrad y=3x4@0.2:3 dy=3x4@-2:2\n"
    "ReciprocalGrad y=3x4@0.2:3 dy=3x4@-2:2\n"
    "Round x=3x4@-5.1:4.9\n"
    "Rint x=3x4@-5.1:4.9\n"
    "Ceil x=3x4@-5.1:4.9\n"
    "BiasAddGrad out_backprop=2x3x4x5@-1:1 attr.data_format=NCHW\n"
    "AvgPoolGrad orig_input_shape=values:2,5,5,2 grad=2x3x3x2@-1:1 attr.ksize=[1,3,3,1] "
    "attr.strides=[1,2,2,1] attr.padding=SAME nondiff=orig_input_shape\n"
    "Conv2DBackpropFilter input=1x5x5x2@-1:1 filter_sizes=values:3,3,2,2 "
    "out_backprop=1x3x3x2@-1:1 attr.strides=[1,2,2,1] attr.padding=SAME nondiff=filter_sizes\n"
    "DepthwiseConv2dNativeBackpropInput input_sizes=values:1,5,5,2 filter=3x3x2x1@-1:1 "
    "out_backprop=1x3x3x2@-1:1 attr.strides=[1,2,2,1] attr.padding=SAME nondiff=input_sizes\n"
    "DepthwiseConv2dNativeBackpropFilter input=1x5x5x2@-1:1 filter_sizes=values:3,3,2,1 "
    "out_backprop=1x3x3x2@-1:1 attr.strides=[1,2,2,1] attr.padding=SAME nondiff=filter_sizes\n"
    "FusedBatchNormGradV3 y_backprop=2x3x2x2@-1:1 x=2x3x2x2@-1:1 scale=3@0.5:1.5 "
    "reserve_space_1=3@-0.5:0.5 reserve_space_2=3@0.5:1.5 reserve_space_3=3@0.5:1.5 "
    "attr.is_training=false attr.data_format=NCHW attr.epsilon=0.01 attr.U=float "
    "nondiff=reserve_space_1,reserve_space_2,reserve_space_3 dtypes=float\n"
    "FusedBatchNormGradV2 y_backprop=2x3x2x2@-1:1 x=2x3x2x2@-1:1 scale=3@0.5:1.5 "
    "reserve_space_1=3@-0.5:0.5 reserve_space_2=3@0.5:1.5 attr.is_training=false "
    "attr.data_format=NCHW attr.epsilon=0.01 attr.U=float "
    "nondiff=reserve_space_1,reserve_space_2 dtypes=float\n"
    "FusedBatchNormGrad y_backprop=2x3x2x2@-1:1 x=2x3x2x2@-1:1 scale=3@0.5:1.5 "
    "reserve_space_1=3@-0.5:0.5 reserve_space_2=3@0.5:1.5 attr.is_training=false "
    "attr.data_format=NCHW attr.epsilon=0.01 nondiff=reserve_space_1,reserve_space_2 dtypes=float\n"
    "FusedBatchNorm x=2x3x2x2@-1:1 scale=3@0.5:1.5 offset=3@-1:1 mean=3@-0.5:0.5 "
    "variance=3@0.5:1.5 attr.is_training=false attr.data_format=NCHW attr.epsilon=0.01 "
    "nondiff=mean,variance dtypes=float\n"
    "FusedBatchNormV2 x=2x3x2x2@-1:1 scale=3@0.5:1.5 offset=3@-1:1 mean=3@-0.5:0.5 "
    "variance=3@0.5:1.5 attr.is_training=false attr.data_format=NCHW attr.epsilon=0.01 "
    "attr.U=float nondiff=mean,variance dtypes=float\n"
    // Special functions: other ranges; scalars broadcast against tensors (the gradient of a
    // broadcast input is summed).
    "Digamma x=3x4@2:8\n"
    "Dawsn x=3x4@-5:5\n"
    "Expint x=3x4@-3:-0.5\n"
    "FresnelCos x=3x4@-3:3\n"
    "FresnelSin x=3x4@-3:3\n"
    "Spence x=3x4@1.5:4\n"
    "BesselI0 x=3x4@-4:4\n"
    "BesselI0e x=3x4@-4:4\n"
    "BesselI1 x=3x4@-4:4\n"
    "BesselI1e x=3x4@-4:4\n"
    "BesselJ0 x=3x4@-6:6\n"
    "BesselJ1 x=3x4@-6:6\n"
    "BesselK0 x=3x4@1:6\n"
    "BesselK0e x=3x4@1:6\n"
    "BesselK1 x=3x4@1:6\n"
    "BesselK1e x=3x4@1:6\n"
    "BesselY0 x=3x4@1:6\n"
    "BesselY1 x=3x4@1:6\n"
    "Igamma a=scalar:2 x=3x4@0.3:5\n"
    "Igammac a=3x4@1:4 x=scalar:1.5\n"
    "Betainc a=scalar:2 b=scalar:3 x=3x4@0.05:0.95 nondiff=a,b\n"
    "Zeta x=scalar:2.5 q=3x4@0.5:3 nondiff=x\n"
    "Polygamma a=scalar:1 x=3x4@0.5:3 nondiff=a\n"
    // Other math ops: broadcast scalars, negative and several axes, exclusive / reverse scans.
    "FloorMod x=3x4@-5:5 y=scalar:1.3\n"
    "Cross a=2x2x3@-2:2 b=2x2x3@-2:2\n"
    "EuclideanNorm input=2x3x4@-1:1 reduction_indices=values:-1,0 attr.keep_dims=true\n"
    "NextAfter x1=3x4@-2:2 x2=scalar:0.25\n"
    "Cumprod x=3x4@-2:-0.5 axis=scalar:0 attr.exclusive=true attr.reverse=true\n"
    "CumulativeLogsumexp x=3x4@-3:3 axis=scalar:0 attr.exclusive=true attr.reverse=true\n"
    "SparseSoftmaxCrossEntropyWithLogits features=4x5@-3:3 labels=values:4,0,2,1\n"
    // 3-D convolutions: SAME padding, strides 2.
    "InvGrad y=3x4@-3:-0.3 dy=3x4@-2:2\n"
    "BiasAddV1 value=2x3x4@-1:1 bias=4@-1:1\n"
    "Conv3D input=1x4x4x4x2@-1:1 filter=3x3x3x2x1@-1:1 attr.strides=[1,2,2,2,1] attr.padding=SAME\n"
    "Conv3DBackpropInputV2 input_sizes=values:1,4,4,4,2 filter=3x3x3x2x1@-1:1 "
    "out_backprop=1x2x2x2x1@-1:1 attr.strides=[1,2,2,2,1] attr.padding=SAME nondiff=input_sizes\n"
    "Conv3DBackpropFilterV2 input=1x4x4x4x2@-1:1 filter_sizes=values:3,3,3,2,1 "
    "out_backprop=1x2x2x2x1@-1:1 attr.strides=[1,2,2,2,1] attr.padding=SAME nondiff=filter_sizes\n"
    // Selection and argmax pooling: k = all of the last axis, SAME, the batch in the index.
    "TopKV2 input=2x3x4@-2:2 k=scalar:4\n"
    "MaxPoolWithArgmax input=2x5x5x3@-1:1 attr.ksize=[1,3,3,1] attr.strides=[1,2,2,1] "
    "attr.padding=SAME attr.include_batch_in_index=true\n"
    "Dilation2D input=2x5x5x3@-1:1 filter=3x3x3@-1:1 attr.strides=[1,2,2,1] attr.rates=[1,1,1,1] "
    "attr.padding=SAME\n"
    "NthElement input=3x4@-2:2 n=scalar:0 attr.reverse=true\n"
    "IsotonicRegression input=3x8@-3:3 dtypes=float\n"
    // Segments: 3-D data, int64 ids, an empty segment, repeated indices, negative products.
    "SegmentMean data=5x2x2@-1:1 segment_ids=values:0,1,1,1,3 attr.Tindices=int64\n"
    "SegmentMax data=5x2x2@-1:1 segment_ids=values:0,1,1,1,3 attr.Tindices=int64\n"
    "SegmentMin data=5x2x2@-1:1 segment_ids=values:0,1,1,1,3 attr.Tindices=int64\n"
    "SegmentProd data=5x2x2@-1.5:-0.5 segment_ids=values:0,1,1,1,3 attr.Tindices=int64\n"
    "UnsortedSegmentProd data=6x2x2@-1.5:-0.5 segment_ids=values:3,-1,0,3,3,1 "
    "num_segments=scalar:5 attr.Tindices=int64 attr.Tnumsegments=int64\n"
    "SparseSegmentSum data=5x2x2@-1:1 indices=values:4,4,0 segment_ids=values:0,2,2\n"
    "SparseSegmentMean data=5x2x2@-1:1 indices=values:4,4,0 segment_ids=values:0,2,2\n"
    "SparseSegmentSqrtN data=5x2x2@-1:1 indices=values:4,4,0 segment_ids=values:0,2,2\n"
    "SparseSegmentSumWithNumSegments data=5x2x2@-1:1 indices=values:4,4,0 "
    "segment_ids=values:0,2,2 num_segments=scalar:6\n"
    "SparseSegmentMeanWithNumSegments data=5x2x2@-1:1 indices=values:4,4,0 "
    "segment_ids=values:0,2,2 num_segments=scalar:6\n"
    "SparseSegmentSqrtNWithNumSegments data=5x2x2@-1:1 indices=values:4,4,0 "
    "segment_ids=values:0,2,2 num_segments=scalar:6\n";

std::string OpList() {
  std::string list;
  for (const auto* ops : {&kFloatAndDouble, &kFloatOnly}) {
    for (const std::string& op : *ops) list += (list.empty() ? "" : ",") + op;
  }
  return list;
}

// The table row of `op` for `dtype` says `result`.
bool HasRow(const std::string& out, const std::string& op, const std::string& dtype,
            const std::string& result) {
  const std::regex row("\\| " + op + " +\\| [^|]+\\| " + dtype + " +\\|[^\\n]*\\| " + result +
                       " +\\|");
  return std::regex_search(out, row);
}

void ExpectEveryRowPasses(const CommandResult& r) {
  EXPECT_EQ(r.code, 0) << r.output;
  for (const std::string& op : kFloatAndDouble) {
    EXPECT_TRUE(HasRow(r.output, op, "float", "PASS")) << op << "\n" << r.output;
    EXPECT_TRUE(HasRow(r.output, op, "double", "PASS")) << op << "\n" << r.output;
  }
  for (const std::string& op : kFloatOnly) {
    EXPECT_TRUE(HasRow(r.output, op, "float", "PASS")) << op << "\n" << r.output;
  }
  const int rows = 2 * kFloatAndDouble.size() + kFloatOnly.size();
  EXPECT_NE(r.output.find("gradcheck: " + std::to_string(rows) + " passed, 0 failed"),
            std::string::npos)
      << r.output;
}

TEST(TfNnMathGrads, FirstConfigurationMatchesNumericJacobians) {
  ExpectEveryRowPasses(RunCommand(
      "tf_ext/tf_ext_gradcheck --library=tf_ext/_tf_ext_ops.so "
      "--spec=tf_ext/tools/tf_core_gradcheck_spec.txt --ops=" + OpList()));
}

TEST(TfNnMathGrads, SecondConfigurationMatchesNumericJacobians) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/second_configs.txt";
  std::ofstream(path) << kSecondConfigs;
  ExpectEveryRowPasses(RunCommand("tf_ext/tf_ext_gradcheck --library=tf_ext/_tf_ext_ops.so "
                                  "--spec=" + path + " --ops=" + OpList()));
}

// TensorFlow 2.21 has none of these gradients in C++: without the library each is missing (if
// a release adds one, RegisterGradientIfMissing keeps TensorFlow's and this test says so).
TEST(TfNnMathGrads, TensorFlowAloneHasNone) {
  const CommandResult r = RunCommand(
      "tf_ext/tf_ext_gradcheck --library=none --spec=tf_ext/tools/tf_core_gradcheck_spec.txt "
      "--ops=" + OpList());
  for (const auto* ops : {&kFloatAndDouble, &kFloatOnly}) {
    for (const std::string& op : *ops) {
      EXPECT_TRUE(HasRow(r.output, op, "-", "missing")) << op << "\n" << r.output;
    }
  }
}

}  // namespace
}  // namespace tensorflow::tf_ext
