#include "tf_ext/train/model/optimizers.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace tensorflow::tf_ext::train {
namespace {

double DefaultLearningRate(const std::string& name) { return name == "sgd" ? 0.01 : 0.001; }

// A slot variable of `var`'s shape and dtype, initialized to `value` by `init` ops.
GraphTensor Slot(GraphOps* ops, const TrainableVariable& var, const std::string& slot, double value,
                 std::vector<Node*>* init, OptimizerGraph* out) {
  GraphTensor handle = ops->VarHandle(absl::StrCat("slots/", var.name, "/", slot), var.dtype,
                                      PartialTensorShape());
  // Fill(shape(var), value): the variable's shape, known only at run time in general
  GraphTensor shape = ops->Op("VariableShape", {var.handle}, "shape");
  GraphTensor filled = ops->Op("Fill", {shape, ops->Scalar(var.dtype, value)}, "fill");
  init->push_back(ops->Assign("AssignVariableOp", handle, filled));
  out->state.push_back({absl::StrCat(var.name, "/", slot), handle});
  out->state_types.push_back(var.dtype);
  return handle;
}

// A read ordered after `ready`.
GraphTensor ReadAfter(GraphOps* ops, GraphTensor handle, DataType dtype, Node* ready) {
  GraphTensor r = ops->Read(handle, dtype);
  if (r.node != nullptr && ready != nullptr) ops->graph()->AddControlEdge(ready, r.node);
  return r;
}

}  // namespace

double LearningRateAt(const OptimizerSpec& spec, int64_t iterations) {
  const double lr0 = spec.learning_rate >= 0 ? spec.learning_rate : DefaultLearningRate(spec.name);
  const double step = static_cast<double>(iterations);
  const double decay_steps = static_cast<double>(spec.decay_steps);
  if (decay_steps <= 0) return lr0;  // refused by ValidateOptimizer for a schedule
  if (spec.schedule == "exponential") return lr0 * std::pow(spec.decay_rate, step / decay_steps);
  if (spec.schedule == "cosine") {
    return lr0 * 0.5 * (1 + std::cos(M_PI * std::min(step, decay_steps) / decay_steps));
  }
  return lr0;
}

namespace {

// Keras's _clip_gradients, before anything else. A sparse gradient's norm is that of its rows
// (tf.clip_by_norm of an IndexedSlices; Keras's global_norm sums the squared rows), repeated
// ids not summed first; its rows are scaled (and, by global_clipnorm, made dense by Keras).
std::vector<Gradient> ClipGradients(GraphOps* ops, const OptimizerSpec& spec,
                                    const std::vector<TrainableVariable>& variables,
                                    const std::vector<Gradient>& gradients) {
  std::vector<Gradient> clipped = gradients;
  if (spec.clipnorm > 0) {
    for (size_t i = 0; i < clipped.size(); ++i) {
      // tf.clip_by_norm: g clipnorm / max(||g||, clipnorm), ||g|| taken as 0 where sum(g^2) = 0
      const DataType t = variables[i].dtype;
      GraphTensor g = gradients[i].values;
      GraphTensor l2sum = ops->SumAll(ops->Unary("Square", g));
      GraphTensor positive = ops->Binary("Greater", l2sum, ops->Scalar(t, 0));
      GraphTensor safe = ops->Op("SelectV2", {positive, l2sum, ops->Scalar(t, 1)}, "safe");
      GraphTensor norm = ops->Op("SelectV2", {positive, ops->Unary("Sqrt", safe), l2sum}, "norm");
      GraphTensor c = ops->Scalar(t, spec.clipnorm);
      clipped[i].values =
          ops->Binary("RealDiv", ops->Binary("Mul", g, c), ops->Binary("Maximum", norm, c));
    }
  } else if (spec.global_clipnorm > 0 && !gradients.empty()) {
    // norm = sqrt(sum_i sum(g_i^2)); scale = c min(1 / norm, 1 / c) + (norm - norm)
    const DataType t = variables[0].dtype;
    GraphTensor squared = ops->Scalar(t, 0);
    for (size_t i = 0; i < gradients.size(); ++i) {
      squared = ops->Binary("AddV2", squared,
                            ops->Cast(ops->SumAll(ops->Unary("Square", gradients[i].values)), t));
    }
    GraphTensor norm = ops->Unary("Sqrt", squared);
    GraphTensor c = ops->Scalar(t, spec.global_clipnorm);
    GraphTensor scale = ops->Binary(
        "AddV2",
        ops->Binary("Mul", c,
                    ops->Binary("Minimum", ops->Binary("RealDiv", ops->Scalar(t, 1), norm),
                                ops->Binary("RealDiv", ops->Scalar(t, 1), c))),
        ops->Binary("Sub", norm, norm));
    for (size_t i = 0; i < gradients.size(); ++i) {
      clipped[i].values = ops->Binary("Mul", gradients[i].values, ops->Cast(scale, variables[i].dtype));
      if (!clipped[i].sparse()) continue;
      // Keras multiplies the IndexedSlices by the scale with `*`, which densifies it: the
      // optimizer then sees the rows of repeated ids summed. Summed here without densifying:
      // one row per distinct id (Unique, UnsortedSegmentSum).
      GraphTensor unique = ops->Op("Unique", {clipped[i].indices}, "unique");
      GraphTensor position{unique.node, 1};
      clipped[i].values = ops->Op("UnsortedSegmentSum",
                                  {clipped[i].values, position, ops->Size(unique, DT_INT32)},
                                  "sum_repeated_ids");
      clipped[i].indices = unique;
    }
  }
  return clipped;
}

// One variable's update: what every optimizer's formula reads and where it puts its nodes.
struct VariableUpdate {
  GraphOps* ops;
  const OptimizerSpec& spec;
  const TrainableVariable& var;
  DataType t;
  GraphTensor g;       // the (clipped) gradient: dense, or the rows at ids
  GraphTensor ids;     // sparse only
  bool sparse;
  GraphTensor lr;      // the learning rate at this step
  GraphTensor stepf;   // iterations, in the variable's dtype
  Node* ready;         // the step's loss and the other gradients (AddOptimizer's `after`)
  Node* order;         // what the variable's own update waits for (AdamW's decay, or ready)
  std::vector<Node*>* init;
  std::vector<Node*>* updates;
  OptimizerGraph* out;

  GraphTensor c(double v) const { return ops->Scalar(t, v); }
  GraphTensor Slot(const std::string& slot, double value) const {
    return train::Slot(ops, var, slot, value, init, out);
  }
  // A sparse gradient's part of a dense slot: slot <- slot * keep, then its rows scattered in
  // (added: repeated ids sum); returns the scatter, after which the slot holds the new value.
  Node* DecayAndAdd(GraphTensor handle, double keep, GraphTensor rows) const {
    GraphTensor s = ReadAfter(ops, handle, t, ready);
    Node* scaled = ops->Assign("AssignVariableOp", handle, ops->Binary("Mul", s, c(keep)));
    Node* added = ops->Scatter("ResourceScatterAdd", handle, ids, rows, {scaled});
    updates->push_back(scaled);
    updates->push_back(added);
    return added;
  }
};

// The learning rate at this step: u.lr (lr0), or Keras's schedule of iterations.
GraphTensor ScheduledLearningRate(const VariableUpdate& u) {
  GraphOps* ops = u.ops;
  const OptimizerSpec& spec = u.spec;
  GraphTensor lr = u.lr;
  if (spec.schedule == "exponential") {
    // lr0 * rate^(step / decay_steps)
    lr = ops->Binary("Mul", lr, ops->Binary("Pow", u.c(spec.decay_rate),
                                            ops->Binary("RealDiv", u.stepf, u.c(spec.decay_steps))));
  } else if (spec.schedule == "cosine") {
    // lr0 * 0.5 (1 + cos(pi min(step, decay_steps) / decay_steps))
    GraphTensor s = ops->Binary("Minimum", u.stepf, u.c(spec.decay_steps));
    GraphTensor cosine = ops->Unary(
        "Cos", ops->Binary("Mul", u.c(M_PI), ops->Binary("RealDiv", s, u.c(spec.decay_steps))));
    lr = ops->Binary("Mul", lr, ops->Binary("Mul", u.c(0.5), ops->Binary("AddV2", u.c(1), cosine)));
  }
  return lr;
}

// SGD: var -= g lr, or with momentum m <- m momentum - g lr; var += m (Nesterov: var += m
// momentum - g lr).
void SgdUpdate(const VariableUpdate& u) {
  GraphOps* ops = u.ops;
  const OptimizerSpec& spec = u.spec;
  if (spec.momentum == 0) {
    // var -= g lr (sparse: every row subtracted at its id)
    u.updates->push_back(u.sparse ? ops->Scatter("ResourceScatterSub", u.var.handle, u.ids,
                                                 ops->Binary("Mul", u.g, u.lr), {u.order})
                                  : ops->Assign("AssignSubVariableOp", u.var.handle,
                                                ops->Binary("Mul", u.g, u.lr), {u.order}));
    return;
  }
  GraphTensor m_handle = u.Slot("momentum", 0);
  if (u.sparse) {
    // Keras: m momentum - (g lr densified, repeated ids summed)
    GraphTensor gl = ops->Binary("Mul", u.g, u.lr);
    GraphTensor m = ReadAfter(ops, m_handle, u.t, u.ready);
    Node* scaled = ops->Assign("AssignVariableOp", m_handle, ops->Binary("Mul", m, u.c(spec.momentum)));
    Node* sub = ops->Scatter("ResourceScatterSub", m_handle, u.ids, gl, {scaled});
    u.updates->push_back(scaled);
    u.updates->push_back(sub);
    GraphTensor m_new = ReadAfter(ops, m_handle, u.t, sub);
    if (spec.nesterov) {
      Node* add = ops->Assign("AssignAddVariableOp", u.var.handle,
                              ops->Binary("Mul", m_new, u.c(spec.momentum)), {u.order});
      u.updates->push_back(add);
      u.updates->push_back(ops->Scatter("ResourceScatterSub", u.var.handle, u.ids, gl, {add}));
    } else {
      u.updates->push_back(ops->Assign("AssignAddVariableOp", u.var.handle, m_new, {u.order}));
    }
    return;
  }
  // Dense: TensorFlow's ResourceApplyKerasMomentum computes exactly Keras's formula, in one
  // pass over the variable: m <- m momentum - g lr; var += m (Nesterov: m momentum - g lr).
  AttrValue nesterov;
  nesterov.set_b(spec.nesterov);
  u.updates->push_back(ops->Update("ResourceApplyKerasMomentum",
                                   {u.var.handle, m_handle, u.lr, u.g, u.c(spec.momentum)},
                                   {u.order}, {{"use_nesterov", nesterov}}));
}

// Adam and AdamW (whose decoupled decay came first, in u.order).
void AdamUpdate(const VariableUpdate& u) {
  GraphOps* ops = u.ops;
  const OptimizerSpec& spec = u.spec;
  // t = iterations + 1
  GraphTensor local = ops->Binary("AddV2", u.stepf, u.c(1));
  GraphTensor m_handle = u.Slot("m", 0);
  GraphTensor v_handle = u.Slot("v", 0);
  GraphTensor beta_1_power = ops->Binary("Pow", u.c(spec.beta_1), local);
  GraphTensor beta_2_power = ops->Binary("Pow", u.c(spec.beta_2), local);
  if (!u.sparse) {
    // Dense: TensorFlow's ResourceApplyAdam computes exactly Keras's formula, in one pass
    // over the variable instead of a dozen elementwise ops: alpha = lr sqrt(1 - beta_2^t) /
    // (1 - beta_1^t); m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2);
    // var -= m alpha / (sqrt(v) + epsilon).
    u.updates->push_back(ops->Update("ResourceApplyAdam",
                                     {u.var.handle, m_handle, v_handle, beta_1_power, beta_2_power,
                                      u.lr, u.c(spec.beta_1), u.c(spec.beta_2), u.c(spec.epsilon), u.g},
                                     {u.order}));
    return;
  }
  // t = iterations + 1; alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t)
  GraphTensor alpha = ops->Binary(
      "RealDiv", ops->Binary("Mul", u.lr, ops->Unary("Sqrt", ops->Binary("Sub", u.c(1), beta_2_power))),
      ops->Binary("Sub", u.c(1), beta_1_power));
  // m += (dense(g) - m)(1 - beta_1); v += (dense(g^2 per row) - v)(1 - beta_2)
  Node* m_done = u.DecayAndAdd(m_handle, spec.beta_1, ops->Binary("Mul", u.g, u.c(1 - spec.beta_1)));
  Node* v_done = u.DecayAndAdd(
      v_handle, spec.beta_2, ops->Binary("Mul", ops->Unary("Square", u.g), u.c(1 - spec.beta_2)));
  GraphTensor m_new = ReadAfter(ops, m_handle, u.t, m_done);
  GraphTensor v_new = ReadAfter(ops, v_handle, u.t, v_done);
  // var -= m alpha / (sqrt(v) + epsilon)
  GraphTensor delta = ops->Binary("RealDiv", ops->Binary("Mul", m_new, alpha),
                                  ops->Binary("AddV2", ops->Unary("Sqrt", v_new), u.c(spec.epsilon)));
  u.updates->push_back(ops->Assign("AssignSubVariableOp", u.var.handle, delta, {u.order}));
}

// RMSprop, a sparse gradient's rows: its velocity (and average) rows summed in by id.
void SparseRmspropUpdate(const VariableUpdate& u, GraphTensor vel_handle, GraphTensor avg_handle) {
  GraphOps* ops = u.ops;
  const OptimizerSpec& spec = u.spec;
  Node* vel_done = u.DecayAndAdd(vel_handle, spec.rho,
                                 ops->Binary("Mul", u.c(1 - spec.rho), ops->Unary("Square", u.g)));
  // denominator = velocity - average^2 + epsilon at the gradient's rows
  GraphTensor denominator = ops->GatherRows(vel_handle, u.t, u.ids, vel_done);
  if (spec.centered) {
    Node* avg_done = u.DecayAndAdd(avg_handle, spec.rho, ops->Binary("Mul", u.c(1 - spec.rho), u.g));
    denominator = ops->Binary(
        "Sub", denominator, ops->Unary("Square", ops->GatherRows(avg_handle, u.t, u.ids, avg_done)));
  }
  denominator = ops->Binary("AddV2", denominator, u.c(spec.epsilon));
  // increment = lr g / sqrt(denominator), one row per gradient row
  GraphTensor increment =
      ops->Binary("RealDiv", ops->Binary("Mul", u.lr, u.g), ops->Unary("Sqrt", denominator));
  if (spec.momentum > 0) {
    // m <- momentum m + dense(increment); var -= m
    GraphTensor m_handle = u.Slot("momentum", 0);
    Node* m_done = u.DecayAndAdd(m_handle, spec.momentum, increment);
    u.updates->push_back(ops->Assign("AssignSubVariableOp", u.var.handle,
                                     ReadAfter(ops, m_handle, u.t, m_done), {u.order}));
  } else {
    u.updates->push_back(ops->Scatter("ResourceScatterSub", u.var.handle, u.ids, increment, {u.order}));
  }
}

// RMSprop: velocity <- rho velocity + (1 - rho) g^2 (sparse: each row squared, then summed by
// id); centered, with the average gradient; with momentum, through a momentum slot.
void RmspropUpdate(const VariableUpdate& u) {
  GraphOps* ops = u.ops;
  const OptimizerSpec& spec = u.spec;
  GraphTensor vel_handle = u.Slot("velocity", 0);
  GraphTensor avg_handle;
  if (spec.centered) avg_handle = u.Slot("average_gradient", 0);
  if (u.sparse) return SparseRmspropUpdate(u, vel_handle, avg_handle);
  GraphTensor vel = ReadAfter(ops, vel_handle, u.t, u.ready);
  GraphTensor vel_new = ops->Binary("AddV2", ops->Binary("Mul", u.c(spec.rho), vel),
                                    ops->Binary("Mul", u.c(1 - spec.rho), ops->Unary("Square", u.g)));
  u.updates->push_back(ops->Assign("AssignVariableOp", vel_handle, vel_new));
  GraphTensor denominator;
  if (spec.centered) {
    // average <- rho average + (1 - rho) g; denominator = velocity - average^2 + epsilon
    GraphTensor avg = ReadAfter(ops, avg_handle, u.t, u.ready);
    GraphTensor avg_new = ops->Binary("AddV2", ops->Binary("Mul", u.c(spec.rho), avg),
                                      ops->Binary("Mul", u.c(1 - spec.rho), u.g));
    u.updates->push_back(ops->Assign("AssignVariableOp", avg_handle, avg_new));
    denominator = ops->Binary("AddV2", ops->Binary("Sub", vel_new, ops->Unary("Square", avg_new)),
                              u.c(spec.epsilon));
  } else {
    denominator = ops->Binary("AddV2", vel_new, u.c(spec.epsilon));
  }
  // increment = lr g / sqrt(denominator)
  GraphTensor increment =
      ops->Binary("RealDiv", ops->Binary("Mul", u.lr, u.g), ops->Unary("Sqrt", denominator));
  if (spec.momentum > 0) {
    // m <- momentum m + increment; var -= m
    GraphTensor m_handle = u.Slot("momentum", 0);
    GraphTensor m = ReadAfter(ops, m_handle, u.t, u.ready);
    GraphTensor m_new = ops->Binary("AddV2", ops->Binary("Mul", u.c(spec.momentum), m), increment);
    u.updates->push_back(ops->Assign("AssignVariableOp", m_handle, m_new));
    increment = m_new;
  }
  u.updates->push_back(ops->Assign("AssignSubVariableOp", u.var.handle, increment, {u.order}));
}

// Adagrad: accumulator += g^2; var -= lr g / sqrt(accumulator + epsilon).
void AdagradUpdate(const VariableUpdate& u) {
  GraphOps* ops = u.ops;
  const OptimizerSpec& spec = u.spec;
  GraphTensor acc_handle = u.Slot("accumulator", spec.initial_accumulator_value);
  if (u.sparse) {
    // each row squared and added at its id; then each row divided by its id's accumulator
    Node* added = ops->Scatter("ResourceScatterAdd", acc_handle, u.ids, ops->Unary("Square", u.g),
                               {u.ready});
    u.updates->push_back(added);
    GraphTensor acc_rows = ops->GatherRows(acc_handle, u.t, u.ids, added);
    u.updates->push_back(ops->Scatter(
        "ResourceScatterSub", u.var.handle, u.ids,
        ops->Binary("RealDiv", ops->Binary("Mul", u.lr, u.g),
                    ops->Unary("Sqrt", ops->Binary("AddV2", acc_rows, u.c(spec.epsilon)))),
        {u.order}));
    return;
  }
  GraphTensor acc = ReadAfter(ops, acc_handle, u.t, u.ready);
  GraphTensor acc_new = ops->Binary("AddV2", acc, ops->Unary("Square", u.g));
  u.updates->push_back(ops->Assign("AssignVariableOp", acc_handle, acc_new));
  u.updates->push_back(ops->Assign(
      "AssignSubVariableOp", u.var.handle,
      ops->Binary("RealDiv", ops->Binary("Mul", u.lr, u.g),
                  ops->Unary("Sqrt", ops->Binary("AddV2", acc_new, u.c(spec.epsilon)))),
      {u.order}));
}

}  // namespace

absl::Status AddOptimizer(GraphOps* ops, const OptimizerSpec& spec,
                          const std::vector<TrainableVariable>& variables,
                          const std::vector<Gradient>& gradients, const std::vector<Node*>& after,
                          OptimizerGraph* out) {
  TF_RETURN_IF_ERROR(ValidateOptimizer(spec));
  std::vector<Node*> init;
  Node* ready = ops->Group("ready", after);
  // iterations: int64, 0 at first
  GraphTensor iterations = ops->VarHandle("iterations", DT_INT64, PartialTensorShape({}));
  init.push_back(ops->Assign("AssignVariableOp", iterations, ops->Scalar(DT_INT64, 0)));
  GraphTensor step = ReadAfter(ops, iterations, DT_INT64, ready);
  out->iterations = step;
  out->state.push_back({"iterations", iterations});
  out->state_types.push_back(DT_INT64);
  const std::vector<Gradient> clipped = ClipGradients(ops, spec, variables, gradients);

  std::vector<Node*> updates;
  for (size_t i = 0; i < variables.size(); ++i) {
    const TrainableVariable& var = variables[i];
    VariableUpdate u{ops, spec, var, var.dtype, clipped[i].values, clipped[i].indices,
                     clipped[i].sparse(), GraphTensor(), GraphTensor(), ready, ready, &init,
                     &updates, out};
    u.lr = u.c(spec.learning_rate >= 0 ? spec.learning_rate : DefaultLearningRate(spec.name));
    u.stepf = ops->Cast(step, u.t);
    u.lr = ScheduledLearningRate(u);
    if (spec.name == "adamw") {
      // AdamW's decoupled decay, before the update: var <- var - var * wd * lr
      const double wd = spec.weight_decay >= 0 ? spec.weight_decay : 0.004;
      GraphTensor v = ReadAfter(ops, var.handle, u.t, ready);
      u.order = ops->Assign("AssignVariableOp", var.handle,
                            ops->Binary("Sub", v, ops->Binary("Mul", v, ops->Binary("Mul", u.c(wd), u.lr))));
    }
    if (spec.name == "sgd") {
      SgdUpdate(u);
    } else if (spec.name == "adam" || spec.name == "adamw") {
      AdamUpdate(u);
    } else if (spec.name == "rmsprop") {
      RmspropUpdate(u);
    } else {
      AdagradUpdate(u);
    }
  }
  // iterations += 1, after every update
  // iterations is read before it is incremented, whether an update reads it or not
  if (step.node != nullptr) updates.push_back(step.node);
  Node* increment = ops->Assign("AssignAddVariableOp", iterations, ops->Scalar(DT_INT64, 1), updates);
  out->step = ops->Group("step", {increment});
  out->init = ops->Group("init", init);
  return ops->status();
}

}  // namespace tensorflow::tf_ext::train
