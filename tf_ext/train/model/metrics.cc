#include "tf_ext/train/model/metrics.h"

#include <cfloat>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensorflow/core/framework/attr_value_util.h"
#include "tensorflow/core/framework/types.h"

namespace tensorflow::tf_ext::train {
namespace {

constexpr int kTopK = 5;              // TopKCategoricalAccuracy's default k
constexpr int kAucThresholds = 200;   // AUC's default num_thresholds
constexpr double kThreshold = 0.5;    // binary accuracy's, precision's and recall's

struct Known {
  const char* name;
  MetricKind kind;
};
constexpr Known kKnown[] = {
    {"accuracy", MetricKind::kAccuracy},
    {"acc", MetricKind::kAccuracy},
    {"binary_accuracy", MetricKind::kBinaryAccuracy},
    {"categorical_accuracy", MetricKind::kCategoricalAccuracy},
    {"sparse_categorical_accuracy", MetricKind::kSparseCategoricalAccuracy},
    {"top_k_categorical_accuracy", MetricKind::kTopKCategoricalAccuracy},
    {"sparse_top_k_categorical_accuracy", MetricKind::kSparseTopKCategoricalAccuracy},
    {"mae", MetricKind::kMeanAbsoluteError},
    {"mean_absolute_error", MetricKind::kMeanAbsoluteError},
    {"mse", MetricKind::kMeanSquaredError},
    {"mean_squared_error", MetricKind::kMeanSquaredError},
    {"auc", MetricKind::kAuc},
    {"precision", MetricKind::kPrecision},
    {"recall", MetricKind::kRecall},
};

bool IsMean(MetricKind kind) {
  return kind != MetricKind::kAuc && kind != MetricKind::kPrecision && kind != MetricKind::kRecall;
}

// A tensor with its static dimensions (-1: unknown), which Keras's shape decisions read.
struct Value {
  GraphTensor t;
  std::vector<int64_t> dims;
  int rank() const { return static_cast<int>(dims.size()); }
  int64_t last() const { return dims.empty() ? -1 : dims.back(); }
};

DataType TypeOf(GraphTensor t) {
  return t.node != nullptr ? t.node->output_type(t.index) : DT_INVALID;
}

std::vector<int64_t> Dims(const PartialTensorShape& shape) {
  std::vector<int64_t> dims;
  for (int i = 0; i < shape.dims(); ++i) dims.push_back(shape.dim_size(i));
  return dims;
}

AttrValue TypeAttr(DataType dtype) {
  AttrValue v;
  SetAttrValue(dtype, &v);
  return v;
}

// The metric builder: Keras's ops on Values.
class Builder {
 public:
  explicit Builder(GraphOps* ops) : ops_(ops) {}

  GraphTensor Ints(const std::vector<int32_t>& values) {
    Tensor t(DT_INT32, TensorShape({static_cast<int64_t>(values.size())}));
    for (size_t i = 0; i < values.size(); ++i) t.flat<int32>()(i) = values[i];
    return ops_->Const(t, "ints");
  }
  Value Cast(Value v, DataType to) {
    if (TypeOf(v.t) != to) v.t = ops_->Cast(v.t, to);
    return v;
  }
  Value Squeeze(Value v) {
    AttrValue dims;
    dims.mutable_list()->add_i(-1);
    v.t = ops_->Op("Squeeze", {v.t}, "Squeeze", {{"squeeze_dims", dims}});
    v.dims.pop_back();
    return v;
  }
  Value Expand(Value v) {
    v.t = ops_->Op("ExpandDims", {v.t, ops_->Scalar(DT_INT32, -1)}, "ExpandDims");
    v.dims.push_back(1);
    return v;
  }
  // keras.src.losses.loss.squeeze_or_expand_to_same_rank
  void SqueezeOrExpand(Value* x1, Value* x2, bool expand_rank_1 = true) {
    const int r1 = x1->rank(), r2 = x2->rank();
    if (r1 == r2) return;
    if (r1 == r2 + 1 && x1->last() == 1) {
      if (r2 == 1 && expand_rank_1) {
        *x2 = Expand(*x2);
      } else {
        *x1 = Squeeze(*x1);
      }
    }
    if (r2 == r1 + 1 && x2->last() == 1) {
      if (r1 == 1 && expand_rank_1) {
        *x1 = Expand(*x1);
      } else {
        *x2 = Squeeze(*x2);
      }
    }
  }
  // mean over axes [from, rank)
  Value MeanFrom(Value v, int from) {
    std::vector<int32_t> axes;
    for (int i = from; i < v.rank(); ++i) axes.push_back(i);
    v.t = ops_->Op("Mean", {v.t, Ints(axes)}, "Mean");
    v.dims.resize(from);
    return v;
  }
  Value Reshape(Value v, const std::vector<int32_t>& shape) {
    v.t = ops_->Op("Reshape", {v.t, Ints(shape)}, "Reshape");
    v.dims.assign(shape.begin(), shape.end());
    return v;
  }
  // Keras's argmax on the last axis (int32): floats computed in at least float32, with -0.0
  // made the smallest negative number so that 0.0 wins over it.
  Value ArgMax(Value v) {
    GraphTensor x = v.t;
    DataType dtype = TypeOf(x);
    if (DataTypeIsFloating(dtype)) {
      if (dtype != DT_DOUBLE && dtype != DT_FLOAT) {
        x = ops_->Cast(x, DT_FLOAT);
        dtype = DT_FLOAT;
      }
      const double tiny = dtype == DT_DOUBLE ? DBL_MIN : FLT_MIN;
      GraphTensor zero = ops_->Scalar(dtype, 0);
      // x == 0 and 1/x < 0: -0.0
      GraphTensor negative_zero = ops_->Binary(
          "LogicalAnd", ops_->Binary("Equal", x, zero),
          ops_->Binary("Less", ops_->Unary("Reciprocal", x), zero));
      x = ops_->Op("SelectV2", {negative_zero, ops_->Scalar(dtype, -tiny), x}, "SelectV2");
    }
    Value out{ops_->Op("ArgMax", {x, ops_->Scalar(DT_INT32, -1)}, "ArgMax",
                       {{"output_type", TypeAttr(DT_INT32)}}),
              v.dims};
    out.dims.pop_back();
    return out;
  }
  GraphTensor Float(GraphTensor bools) { return ops_->Cast(bools, DT_FLOAT); }

  GraphOps* ops() { return ops_; }

 private:
  GraphOps* ops_;
};

// The per-example values of a mean metric (MeanMetricWrapper's fn), float32.
absl::StatusOr<Value> MeanValues(Builder* b, MetricKind kind, Value t, Value p) {
  GraphOps* ops = b->ops();
  const DataType pt = TypeOf(p.t);
  switch (kind) {
    case MetricKind::kBinaryAccuracy: {
      // cast(y_pred > 0.5, y_true.dtype) == y_true
      b->SqueezeOrExpand(&t, &p);
      GraphTensor positive = ops->Binary("Greater", p.t, ops->Scalar(pt, kThreshold));
      GraphTensor match = ops->Binary("Equal", t.t, ops->Cast(positive, TypeOf(t.t)));
      return Value{b->Float(match), t.dims};
    }
    case MetricKind::kCategoricalAccuracy: {
      // argmax(y_true) == argmax(y_pred)
      Value truth = b->ArgMax(t);
      GraphTensor original = ops->Op("Shape", {truth.t}, "Shape");
      std::vector<int64_t> original_dims = truth.dims;
      const bool reshape = truth.rank() == p.rank();
      if (reshape) truth = b->Squeeze(truth);
      Value pred = b->ArgMax(p);
      Value matches{b->Float(ops->Binary("Equal", truth.t, pred.t)), truth.dims};
      if (reshape) {
        matches.t = ops->Op("Reshape", {matches.t, original}, "Reshape");
        matches.dims = original_dims;
      }
      return matches;
    }
    case MetricKind::kSparseCategoricalAccuracy: {
      // y_true == argmax(y_pred), in y_pred's dtype
      Value truth = b->Cast(t, pt);
      GraphTensor original = ops->Op("Shape", {truth.t}, "Shape");
      std::vector<int64_t> original_dims = truth.dims;
      const bool reshape = truth.rank() == p.rank() && truth.last() == 1;
      if (reshape) truth = b->Squeeze(truth);
      Value pred = b->Cast(b->ArgMax(p), pt);
      Value matches{b->Float(ops->Binary("Equal", truth.t, pred.t)), truth.dims};
      if (reshape) {
        matches.t = ops->Op("Reshape", {matches.t, original}, "Reshape");
        matches.dims = original_dims;
      }
      if (matches.rank() > 1 && matches.last() == 1) matches = b->Squeeze(matches);
      return matches;
    }
    case MetricKind::kTopKCategoricalAccuracy:
    case MetricKind::kSparseTopKCategoricalAccuracy: {
      // in_top_k(y_true's class, y_pred, 5)
      Value truth = kind == MetricKind::kTopKCategoricalAccuracy ? b->ArgMax(b->Cast(t, pt))
                                                                  : b->Cast(t, DT_INT32);
      GraphTensor original = ops->Op("Shape", {truth.t}, "Shape");
      std::vector<int64_t> original_dims = truth.dims;
      if (p.rank() > 2) {
        if (p.last() < 0) {
          return absl::InvalidArgumentError(
              "trainer: top-k accuracy of an output whose last dimension is unknown");
        }
        p = b->Reshape(p, {-1, static_cast<int32_t>(p.last())});
      }
      const bool reshape = truth.rank() > 1;
      if (reshape) truth = b->Reshape(truth, {-1});
      GraphTensor in_top_k =
          ops->Op("InTopKV2", {p.t, truth.t, ops->Scalar(DT_INT32, kTopK)}, "InTopKV2");
      Value matches{b->Float(in_top_k), truth.dims};
      if (reshape) {
        matches.t = ops->Op("Reshape", {matches.t, original}, "Reshape");
        matches.dims = original_dims;
      }
      return matches;
    }
    case MetricKind::kMeanAbsoluteError:
    case MetricKind::kMeanSquaredError: {
      // mean(|y_true - y_pred|) or mean((y_true - y_pred)^2) over the last axis
      Value truth = b->Cast(t, pt);
      b->SqueezeOrExpand(&truth, &p);
      GraphTensor d = ops->Binary("Sub", truth.t, p.t);
      d = ops->Unary(kind == MetricKind::kMeanAbsoluteError ? "Abs" : "Square", d);
      Value values{ops->ReduceLast("Mean", d), truth.dims};
      if (!values.dims.empty()) values.dims.pop_back();
      return values;
    }
    default:
      return absl::InternalError("trainer: not a mean metric");
  }
}

// Mean.update_state(values, sample_weight): reduce_to_samplewise_values with ops.mean, then
// total += sum(values), count += sum(weights) or the number of examples.
void UpdateMean(Builder* b, Value values, GraphTensor weights, const std::vector<GraphTensor>& state,
                std::vector<Node*>* updates) {
  GraphOps* ops = b->ops();
  values = b->Cast(values, DT_FLOAT);
  Value w;
  if (weights.node != nullptr) {
    w = b->Cast(Value{weights, {-1}}, DT_FLOAT);
    b->SqueezeOrExpand(&values, &w);
    if (values.rank() > w.rank()) values = b->MeanFrom(values, w.rank());
    values.t = ops->Binary("Mul", values.t, w.t);
    if (w.rank() > 1) w = b->MeanFrom(w, 1);
  }
  if (values.rank() > 1) values = b->MeanFrom(values, 1);
  updates->push_back(ops->Assign("AssignAddVariableOp", state[0], ops->SumAll(values.t)));
  GraphTensor count;
  if (weights.node != nullptr) {
    count = ops->SumAll(w.t);
  } else if (values.rank() >= 1) {
    count = ops->Cast(ops->Size(values.t, DT_INT32), DT_FLOAT);
  } else {
    count = ops->Scalar(DT_FLOAT, 1);
  }
  updates->push_back(ops->Assign("AssignAddVariableOp", state[1], count));
}

// metrics_utils.update_confusion_matrix_variables: true positives and false positives
// (precision) or false negatives (recall) at the threshold 0.5 (its unoptimized path), or the
// four counts at AUC's 200 evenly spaced thresholds (its bucketed path).
void UpdateConfusion(Builder* b, MetricKind kind, Value t, Value p, GraphTensor weights,
                     const std::vector<GraphTensor>& state, std::vector<Node*>* updates) {
  GraphOps* ops = b->ops();
  t = b->Cast(t, DT_FLOAT);
  p = b->Cast(p, DT_FLOAT);
  b->SqueezeOrExpand(&p, &t);
  GraphTensor w;  // per element of y_pred, flattened as the path flattens
  if (weights.node != nullptr) {
    Value sw = b->Expand(b->Cast(Value{weights, {-1}}, DT_FLOAT));
    Value unused = t;
    b->SqueezeOrExpand(&unused, &sw, /*expand_rank_1=*/false);
    w = ops->Op("BroadcastTo", {sw.t, ops->Op("Shape", {p.t}, "Shape")}, "BroadcastTo");
  }
  auto add = [&](int i, GraphTensor value) {
    updates->push_back(ops->Assign("AssignAddVariableOp", state[i], value));
  };
  if (kind == MetricKind::kAuc) {
    if (w.node != nullptr) w = b->Reshape(Value{w, {}}, {-1}).t;
    // clip_by_value(y_pred, 0, 1)
    GraphTensor pred = ops->Binary("Maximum", ops->Binary("Minimum", p.t, ops->Scalar(DT_FLOAT, 1)),
                                   ops->Scalar(DT_FLOAT, 0));
    GraphTensor truth = ops->Cast(ops->Cast(t.t, DT_BOOL), DT_FLOAT);
    truth = b->Reshape(Value{truth, {}}, {-1}).t;
    pred = b->Reshape(Value{pred, {}}, {-1}).t;
    GraphTensor true_labels = truth;
    GraphTensor false_labels = ops->Binary("Sub", ops->Scalar(DT_FLOAT, 1), truth);
    if (w.node != nullptr) {
      true_labels = ops->Binary("Mul", true_labels, w);
      false_labels = ops->Binary("Mul", false_labels, w);
    }
    // bucket = relu(ceil(p (thresholds - 1)) - 1): the thresholds p exceeds, the first and last
    // thresholds being 0 - epsilon and 1 + epsilon
    GraphTensor bucket = ops->Binary(
        "Sub",
        ops->Unary("Ceil", ops->Binary("Mul", pred, ops->Scalar(DT_FLOAT, kAucThresholds - 1))),
        ops->Scalar(DT_FLOAT, 1));
    bucket = ops->Cast(ops->Unary("Relu", bucket), DT_INT32);
    GraphTensor axis = b->Ints({0});
    auto at_or_above = [&](GraphTensor labels) {
      // flip(cumsum(flip(segment_sum(labels, bucket))))
      GraphTensor sums = ops->Op("UnsortedSegmentSum",
                                 {labels, bucket, ops->Scalar(DT_INT32, kAucThresholds)},
                                 "UnsortedSegmentSum");
      GraphTensor flipped = ops->Op("ReverseV2", {sums, axis}, "ReverseV2");
      GraphTensor cumsum = ops->Op("Cumsum", {flipped, ops->Scalar(DT_INT32, 0)}, "Cumsum");
      return ops->Op("ReverseV2", {cumsum, axis}, "ReverseV2");
    };
    GraphTensor tp = at_or_above(true_labels), fp = at_or_above(false_labels);
    GraphTensor positives = ops->SumAll(true_labels), negatives = ops->SumAll(false_labels);
    add(0, tp);
    add(1, fp);
    add(2, ops->Binary("Sub", negatives, fp));  // true negatives
    add(3, ops->Binary("Sub", positives, tp));  // false negatives
    return;
  }
  // [1, n]: each prediction against the one threshold
  GraphTensor pred = b->Reshape(p, {1, -1}).t;
  GraphTensor label = b->Reshape(Value{ops->Cast(t.t, DT_BOOL), t.dims}, {1, -1}).t;
  if (w.node != nullptr) w = b->Reshape(Value{w, {}}, {1, -1}).t;
  GraphTensor positive = ops->Binary("Greater", pred, ops->Scalar(DT_FLOAT, kThreshold));
  auto count = [&](GraphTensor label_is, GraphTensor pred_is) {
    GraphTensor both = ops->Binary("LogicalAnd", label_is, pred_is);
    GraphTensor counted = w.node != nullptr
                              ? ops->Op("SelectV2", {both, w, ops->Scalar(DT_FLOAT, 0)}, "SelectV2")
                              : b->Float(both);
    return ops->Op("Sum", {counted, b->Ints({1})}, "Sum");
  };
  add(0, count(label, positive));
  if (kind == MetricKind::kPrecision) {
    add(1, count(ops->Unary("LogicalNot", label), positive));
  } else {
    add(1, count(label, ops->Unary("LogicalNot", positive)));
  }
}

// The metric's value from its state (Mean.result, Precision.result, Recall.result, AUC.result
// for ROC with interpolation).
GraphTensor Result(GraphOps* ops, Builder* b, MetricKind kind, const std::vector<GraphTensor>& reads) {
  if (IsMean(kind)) return ops->Binary("DivNoNan", reads[0], reads[1]);
  if (kind != MetricKind::kAuc) {
    // tp / (tp + fp) or tp / (tp + fn), its one threshold's
    GraphTensor r = ops->Binary("DivNoNan", reads[0], ops->Binary("AddV2", reads[0], reads[1]));
    return ops->Op("Reshape", {r, b->Ints({})}, "Reshape");
  }
  const int n = kAucThresholds;
  auto head = [&](GraphTensor x) { return ops->Op("Slice", {x, b->Ints({0}), b->Ints({n - 1})}, "Slice"); };
  auto tail = [&](GraphTensor x) { return ops->Op("Slice", {x, b->Ints({1}), b->Ints({n - 1})}, "Slice"); };
  const GraphTensor &tp = reads[0], &fp = reads[1], &tn = reads[2], &fn = reads[3];
  GraphTensor recall = ops->Binary("DivNoNan", tp, ops->Binary("AddV2", tp, fn));
  GraphTensor fp_rate = ops->Binary("DivNoNan", fp, ops->Binary("AddV2", fp, tn));
  // sum((fp_rate[:-1] - fp_rate[1:]) (recall[:-1] + recall[1:]) / 2)
  GraphTensor heights = ops->Binary("RealDiv", ops->Binary("AddV2", head(recall), tail(recall)),
                                    ops->Scalar(DT_FLOAT, 2));
  GraphTensor terms = ops->Binary("Mul", ops->Binary("Sub", head(fp_rate), tail(fp_rate)), heights);
  return ops->SumAll(terms);
}

std::vector<TensorShape> StateShapes(MetricKind kind) {
  if (IsMean(kind)) return {TensorShape({}), TensorShape({})};
  if (kind == MetricKind::kAuc) return std::vector<TensorShape>(4, TensorShape({kAucThresholds}));
  return {TensorShape({1}), TensorShape({1})};
}

std::vector<std::string> StateNames(MetricKind kind) {
  if (IsMean(kind)) return {"total", "count"};
  if (kind == MetricKind::kAuc) {
    return {"true_positives", "false_positives", "true_negatives", "false_negatives"};
  }
  if (kind == MetricKind::kPrecision) return {"true_positives", "false_positives"};
  return {"true_positives", "false_negatives"};
}

std::string NodeName(GraphTensor t) { return t.node != nullptr ? t.node->name() : ""; }

}  // namespace

absl::StatusOr<std::vector<MetricSpec>> ParseMetrics(const std::string& text) {
  std::vector<MetricSpec> plain, weighted;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::string item(absl::StripAsciiWhitespace(part));
    MetricSpec spec;
    spec.name = item;
    if (absl::StartsWith(item, "weighted_")) {
      spec.weighted = true;
      spec.name = item.substr(std::string("weighted_").size());
    }
    bool found = false;
    for (const Known& k : kKnown) {
      if (spec.name == k.name) {
        spec.kind = k.kind;
        found = true;
      }
    }
    if (!found) {
      std::vector<std::string> names;
      for (const Known& k : kKnown) names.push_back(k.name);
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer: unknown metric '", item, "' (known: ", absl::StrJoin(names, ", "),
          "; weighted_NAME weights NAME by the sample weights, as Keras's weighted_metrics)"));
    }
    (spec.weighted ? weighted : plain).push_back(spec);
  }
  // CompileMetrics.result's keys
  std::map<std::string, int> taken;
  std::vector<MetricSpec> specs;
  for (MetricSpec& s : plain) {
    const int n = taken[s.name]++;
    s.key = n == 0 ? s.name : absl::StrCat(s.name, "_", n);
    specs.push_back(s);
  }
  for (MetricSpec& s : weighted) {
    if (taken[s.name]++ == 0) {
      s.key = s.name;
    } else {
      const std::string name = absl::StrCat("weighted_", s.name);
      const int n = taken[name]++;
      s.key = n == 0 ? name : absl::StrCat(name, "_", n);
    }
    specs.push_back(s);
  }
  return specs;
}

absl::Status AddMetrics(GraphOps* ops, const std::vector<MetricSpec>& specs, GraphTensor predictions,
                        const PartialTensorShape& predictions_shape, GraphTensor targets,
                        GraphTensor weights, MetricNodes* nodes) {
  if (predictions_shape.unknown_rank()) {
    return absl::InvalidArgumentError(
        "trainer: metrics need the output's rank, and the signature does not give it");
  }
  nodes->specs = specs;
  Builder b(ops);
  GraphTensor p = ops->Unary("Identity", predictions);
  nodes->predictions = NodeName(p);
  nodes->predictions_type = TypeOf(predictions);
  nodes->predictions_shape = predictions_shape;
  nodes->targets = NodeName(targets);
  nodes->targets_type = TypeOf(targets);
  if (weights.node != nullptr) {
    nodes->weights = NodeName(weights);
    nodes->weights_type = TypeOf(weights);
  }
  std::vector<Node*> resets;
  for (const MetricSpec& spec : specs) {
    const std::vector<TensorShape> shapes = StateShapes(spec.kind);
    const std::vector<std::string> names = StateNames(spec.kind);
    std::vector<GraphTensor> reads;
    std::vector<std::string> handles;
    for (size_t i = 0; i < shapes.size(); ++i) {
      GraphTensor handle = ops->VarHandle(absl::StrCat("metrics/", spec.key, "/", names[i]),
                                          DT_FLOAT, PartialTensorShape(shapes[i].dim_sizes()));
      Tensor zeros(DT_FLOAT, shapes[i]);
      zeros.flat<float>().setZero();
      resets.push_back(ops->Assign("AssignVariableOp", handle, ops->Const(zeros, "zeros")));
      reads.push_back(ops->Read(handle, DT_FLOAT));
      handles.push_back(NodeName(handle));
    }
    nodes->state.push_back(handles);
    nodes->results.push_back(NodeName(Result(ops, &b, spec.kind, reads)));
  }
  Node* reset = ops->Group("metrics/reset", resets);
  TF_RETURN_IF_ERROR(ops->status());
  nodes->reset = reset->name();
  return absl::OkStatus();
}

absl::StatusOr<GraphDef> MetricUpdateGraph(const MetricNodes& nodes,
                                           const PartialTensorShape& targets_shape,
                                           std::string* update,
                                           const StateReducer& sum_over_workers) {
  // The Session's nodes the update reads, as placeholders of the same names, left out of the
  // GraphDef so that its inputs name the Session's nodes.
  Graph g(OpRegistry::Global());
  std::set<std::string> stand_ins;
  absl::Status status;
  auto stand_in = [&](const std::string& name, DataType dtype) -> GraphTensor {
    Node* n = nullptr;
    if (!status.ok()) return {};
    status = NodeBuilder(name, "Placeholder").Attr("dtype", dtype).Finalize(&g, &n);
    stand_ins.insert(name);
    return {n, 0};
  };
  const GraphTensor predictions = stand_in(nodes.predictions, nodes.predictions_type);
  const GraphTensor targets = stand_in(nodes.targets, nodes.targets_type);
  const GraphTensor weights = nodes.weights.empty() ? GraphTensor{} : stand_in(nodes.weights, nodes.weights_type);
  std::vector<std::vector<GraphTensor>> state;
  for (const std::vector<std::string>& handles : nodes.state) {
    state.emplace_back();
    for (const std::string& h : handles) state.back().push_back(stand_in(h, DT_RESOURCE));
  }
  TF_RETURN_IF_ERROR(status);

  GraphOps ops(&g, "tf_ext_train/metrics_update");
  Builder b(&ops);
  const Value p{predictions, Dims(nodes.predictions_shape)};
  Value t{targets, Dims(targets_shape)};
  std::vector<Node*> updates;
  for (size_t i = 0; i < nodes.specs.size(); ++i) {
    const MetricSpec& spec = nodes.specs[i];
    const GraphTensor w = spec.weighted ? weights : GraphTensor{};
    MetricKind kind = spec.kind;
    if (kind == MetricKind::kAccuracy) {
      // compile_utils.is_binary_or_sparse_categorical
      const int64_t t_last = t.last(), p_last = p.last();
      if (p_last == 1) {
        kind = MetricKind::kBinaryAccuracy;
      } else if (t.rank() < p.rank() || (t_last == 1 && p_last > 1)) {
        kind = MetricKind::kSparseCategoricalAccuracy;
      } else {
        kind = MetricKind::kCategoricalAccuracy;
      }
    }
    if (IsMean(kind)) {
      auto values = MeanValues(&b, kind, t, p);
      if (!values.ok()) return values.status();
      UpdateMean(&b, *values, w, state[i], &updates);
    } else {
      UpdateConfusion(&b, kind, t, p, w, state[i], &updates);
    }
  }
  if (sum_over_workers) {
    TF_RETURN_IF_ERROR(ops.status());
    // Every update is an AssignAddVariableOp(state, increment): its increment, summed over the
    // workers, is added instead.
    std::vector<GraphTensor> increments;
    for (Node* u : updates) {
      const Edge* e = nullptr;
      TF_RETURN_IF_ERROR(u->input_edge(1, &e));
      increments.push_back({e->src(), e->src_output()});
    }
    TF_RETURN_IF_ERROR(sum_over_workers(&g, &increments));
    for (size_t i = 0; i < updates.size(); ++i) {
      TF_RETURN_IF_ERROR(g.UpdateEdge(increments[i].node, increments[i].index, updates[i], 1));
    }
  }
  Node* group = ops.Group("update", updates);
  TF_RETURN_IF_ERROR(ops.status());
  *update = group->name();
  GraphDef def;
  g.ToGraphDef(&def);
  GraphDef out;
  *out.mutable_versions() = def.versions();
  for (NodeDef& n : *def.mutable_node()) {
    if (!stand_ins.count(n.name())) out.add_node()->Swap(&n);
  }
  return out;
}

}  // namespace tensorflow::tf_ext::train
