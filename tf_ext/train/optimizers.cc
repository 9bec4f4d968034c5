#include "tf_ext/train/optimizers.h"

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

absl::Status ValidateOptimizer(const OptimizerSpec& spec) {
  const std::string& n = spec.name;
  if (n != "sgd" && n != "adam" && n != "adamw" && n != "rmsprop" && n != "adagrad") {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer: unknown optimizer '", n, "' (sgd, adam, adamw, rmsprop, adagrad)"));
  }
  if (spec.schedule != "constant" && spec.schedule != "exponential" && spec.schedule != "cosine") {
    return absl::InvalidArgumentError(absl::StrCat("trainer: unknown learning-rate schedule '",
                                                   spec.schedule,
                                                   "' (constant, exponential, cosine)"));
  }
  if (spec.schedule != "constant" && spec.decay_steps <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("trainer: schedule '", spec.schedule,
                                                   "' needs decay_steps > 0, got ",
                                                   spec.decay_steps));
  }
  auto finite = [](double v) { return std::isfinite(v); };
  if (!finite(spec.learning_rate) || !finite(spec.momentum) || !finite(spec.epsilon) ||
      !finite(spec.beta_1) || !finite(spec.beta_2) || !finite(spec.rho)) {
    return absl::InvalidArgumentError("trainer: optimizer hyperparameters must be finite");
  }
  if (spec.clipnorm > 0 && spec.global_clipnorm > 0) {
    return absl::InvalidArgumentError("trainer: give clipnorm or global_clipnorm, not both");
  }
  if (!finite(spec.clipnorm) || !finite(spec.global_clipnorm)) {
    return absl::InvalidArgumentError("trainer: clipnorm and global_clipnorm must be finite");
  }
  if (spec.momentum < 0 || spec.momentum > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer: momentum must be in [0, 1], got ", spec.momentum));
  }
  return absl::OkStatus();
}

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

  // Keras's _clip_gradients, before anything else. A sparse gradient's norm is that of its rows
  // (tf.clip_by_norm of an IndexedSlices; Keras's global_norm sums the squared rows), repeated
  // ids not summed first; its rows are scaled (and, by global_clipnorm, made dense by Keras).
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

  std::vector<Node*> updates;
  for (size_t i = 0; i < variables.size(); ++i) {
    const TrainableVariable& var = variables[i];
    const DataType t = var.dtype;
    GraphTensor g = clipped[i].values;
    const bool sparse = clipped[i].sparse();
    GraphTensor ids = clipped[i].indices;
    auto c = [&](double v) { return ops->Scalar(t, v); };
    // The learning rate at this step: lr0, or Keras's schedule of iterations.
    const double lr0 = spec.learning_rate >= 0 ? spec.learning_rate : DefaultLearningRate(spec.name);
    GraphTensor lr = c(lr0);
    GraphTensor stepf = ops->Cast(step, t);
    if (spec.schedule == "exponential") {
      // lr0 * rate^(step / decay_steps)
      lr = ops->Binary("Mul", lr, ops->Binary("Pow", c(spec.decay_rate),
                                              ops->Binary("RealDiv", stepf, c(spec.decay_steps))));
    } else if (spec.schedule == "cosine") {
      // lr0 * 0.5 (1 + cos(pi min(step, decay_steps) / decay_steps))
      GraphTensor s = ops->Binary("Minimum", stepf, c(spec.decay_steps));
      GraphTensor cosine = ops->Unary(
          "Cos", ops->Binary("Mul", c(M_PI), ops->Binary("RealDiv", s, c(spec.decay_steps))));
      lr = ops->Binary("Mul", lr, ops->Binary("Mul", c(0.5), ops->Binary("AddV2", c(1), cosine)));
    }
    Node* decayed = nullptr;
    if (spec.name == "adamw") {
      // AdamW's decoupled decay, before the update: var <- var - var * wd * lr
      const double wd = spec.weight_decay >= 0 ? spec.weight_decay : 0.004;
      GraphTensor v = ReadAfter(ops, var.handle, t, ready);
      decayed = ops->Assign("AssignVariableOp", var.handle,
                            ops->Binary("Sub", v, ops->Binary("Mul", v, ops->Binary("Mul", c(wd), lr))));
    }
    Node* order = decayed != nullptr ? decayed : ready;
    // A sparse gradient's part of a dense slot: slot <- slot * keep, then its rows scattered in
    // (added: repeated ids sum); returns the scatter, after which the slot holds the new value.
    auto decay_and_add = [&](GraphTensor handle, double keep, GraphTensor rows) {
      GraphTensor s = ReadAfter(ops, handle, t, ready);
      Node* scaled = ops->Assign("AssignVariableOp", handle, ops->Binary("Mul", s, c(keep)));
      Node* added = ops->Scatter("ResourceScatterAdd", handle, ids, rows, {scaled});
      updates.push_back(scaled);
      updates.push_back(added);
      return added;
    };
    if (spec.name == "sgd") {
      if (spec.momentum == 0) {
        // var -= g lr (sparse: every row subtracted at its id)
        updates.push_back(sparse ? ops->Scatter("ResourceScatterSub", var.handle, ids,
                                                ops->Binary("Mul", g, lr), {order})
                                 : ops->Assign("AssignSubVariableOp", var.handle,
                                               ops->Binary("Mul", g, lr), {order}));
        continue;
      }
      // m <- m momentum - g lr; var += m (Nesterov: var += m momentum - g lr)
      GraphTensor m_handle = Slot(ops, var, "momentum", 0, &init, out);
      if (sparse) {
        // Keras: m momentum - (g lr densified, repeated ids summed)
        GraphTensor gl = ops->Binary("Mul", g, lr);
        GraphTensor m = ReadAfter(ops, m_handle, t, ready);
        Node* scaled = ops->Assign("AssignVariableOp", m_handle, ops->Binary("Mul", m, c(spec.momentum)));
        Node* sub = ops->Scatter("ResourceScatterSub", m_handle, ids, gl, {scaled});
        updates.push_back(scaled);
        updates.push_back(sub);
        GraphTensor m_new = ReadAfter(ops, m_handle, t, sub);
        if (spec.nesterov) {
          Node* add = ops->Assign("AssignAddVariableOp", var.handle,
                                  ops->Binary("Mul", m_new, c(spec.momentum)), {order});
          updates.push_back(add);
          updates.push_back(ops->Scatter("ResourceScatterSub", var.handle, ids, gl, {add}));
        } else {
          updates.push_back(ops->Assign("AssignAddVariableOp", var.handle, m_new, {order}));
        }
        continue;
      }
      // Dense: TensorFlow's ResourceApplyKerasMomentum computes exactly Keras's formula, in one
      // pass over the variable: m <- m momentum - g lr; var += m (Nesterov: m momentum - g lr).
      AttrValue nesterov;
      nesterov.set_b(spec.nesterov);
      updates.push_back(ops->Update("ResourceApplyKerasMomentum",
                                    {var.handle, m_handle, lr, g, c(spec.momentum)}, {order},
                                    {{"use_nesterov", nesterov}}));
    } else if (spec.name == "adam" || spec.name == "adamw") {
      // t = iterations + 1
      GraphTensor local = ops->Binary("AddV2", stepf, c(1));
      GraphTensor m_handle = Slot(ops, var, "m", 0, &init, out);
      GraphTensor v_handle = Slot(ops, var, "v", 0, &init, out);
      GraphTensor beta_1_power = ops->Binary("Pow", c(spec.beta_1), local);
      GraphTensor beta_2_power = ops->Binary("Pow", c(spec.beta_2), local);
      if (!sparse) {
        // Dense: TensorFlow's ResourceApplyAdam computes exactly Keras's formula, in one pass
        // over the variable instead of a dozen elementwise ops: alpha = lr sqrt(1 - beta_2^t) /
        // (1 - beta_1^t); m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2);
        // var -= m alpha / (sqrt(v) + epsilon).
        updates.push_back(ops->Update("ResourceApplyAdam",
                                      {var.handle, m_handle, v_handle, beta_1_power, beta_2_power,
                                       lr, c(spec.beta_1), c(spec.beta_2), c(spec.epsilon), g},
                                      {order}));
        continue;
      }
      // t = iterations + 1; alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t)
      GraphTensor alpha = ops->Binary(
          "RealDiv", ops->Binary("Mul", lr, ops->Unary("Sqrt", ops->Binary("Sub", c(1), beta_2_power))),
          ops->Binary("Sub", c(1), beta_1_power));
      // m += (dense(g) - m)(1 - beta_1); v += (dense(g^2 per row) - v)(1 - beta_2)
      Node* m_done = decay_and_add(m_handle, spec.beta_1, ops->Binary("Mul", g, c(1 - spec.beta_1)));
      Node* v_done = decay_and_add(
          v_handle, spec.beta_2, ops->Binary("Mul", ops->Unary("Square", g), c(1 - spec.beta_2)));
      GraphTensor m_new = ReadAfter(ops, m_handle, t, m_done);
      GraphTensor v_new = ReadAfter(ops, v_handle, t, v_done);
      // var -= m alpha / (sqrt(v) + epsilon)
      GraphTensor delta = ops->Binary("RealDiv", ops->Binary("Mul", m_new, alpha),
                                      ops->Binary("AddV2", ops->Unary("Sqrt", v_new), c(spec.epsilon)));
      updates.push_back(ops->Assign("AssignSubVariableOp", var.handle, delta, {order}));
    } else if (spec.name == "rmsprop") {
      // velocity <- rho velocity + (1 - rho) g^2 (sparse: each row squared, then summed by id)
      GraphTensor vel_handle = Slot(ops, var, "velocity", 0, &init, out);
      GraphTensor avg_handle;
      if (spec.centered) avg_handle = Slot(ops, var, "average_gradient", 0, &init, out);
      if (sparse) {
        Node* vel_done = decay_and_add(vel_handle, spec.rho,
                                       ops->Binary("Mul", c(1 - spec.rho), ops->Unary("Square", g)));
        // denominator = velocity - average^2 + epsilon at the gradient's rows
        GraphTensor denominator = ops->GatherRows(vel_handle, t, ids, vel_done);
        if (spec.centered) {
          Node* avg_done = decay_and_add(avg_handle, spec.rho, ops->Binary("Mul", c(1 - spec.rho), g));
          denominator = ops->Binary(
              "Sub", denominator, ops->Unary("Square", ops->GatherRows(avg_handle, t, ids, avg_done)));
        }
        denominator = ops->Binary("AddV2", denominator, c(spec.epsilon));
        // increment = lr g / sqrt(denominator), one row per gradient row
        GraphTensor increment =
            ops->Binary("RealDiv", ops->Binary("Mul", lr, g), ops->Unary("Sqrt", denominator));
        if (spec.momentum > 0) {
          // m <- momentum m + dense(increment); var -= m
          GraphTensor m_handle = Slot(ops, var, "momentum", 0, &init, out);
          Node* m_done = decay_and_add(m_handle, spec.momentum, increment);
          updates.push_back(ops->Assign("AssignSubVariableOp", var.handle,
                                        ReadAfter(ops, m_handle, t, m_done), {order}));
        } else {
          updates.push_back(ops->Scatter("ResourceScatterSub", var.handle, ids, increment, {order}));
        }
        continue;
      }
      GraphTensor vel = ReadAfter(ops, vel_handle, t, ready);
      GraphTensor vel_new = ops->Binary("AddV2", ops->Binary("Mul", c(spec.rho), vel),
                                        ops->Binary("Mul", c(1 - spec.rho), ops->Unary("Square", g)));
      updates.push_back(ops->Assign("AssignVariableOp", vel_handle, vel_new));
      GraphTensor denominator;
      if (spec.centered) {
        // average <- rho average + (1 - rho) g; denominator = velocity - average^2 + epsilon
        GraphTensor avg = ReadAfter(ops, avg_handle, t, ready);
        GraphTensor avg_new = ops->Binary("AddV2", ops->Binary("Mul", c(spec.rho), avg),
                                          ops->Binary("Mul", c(1 - spec.rho), g));
        updates.push_back(ops->Assign("AssignVariableOp", avg_handle, avg_new));
        denominator = ops->Binary("AddV2", ops->Binary("Sub", vel_new, ops->Unary("Square", avg_new)),
                                  c(spec.epsilon));
      } else {
        denominator = ops->Binary("AddV2", vel_new, c(spec.epsilon));
      }
      // increment = lr g / sqrt(denominator)
      GraphTensor increment =
          ops->Binary("RealDiv", ops->Binary("Mul", lr, g), ops->Unary("Sqrt", denominator));
      if (spec.momentum > 0) {
        // m <- momentum m + increment; var -= m
        GraphTensor m_handle = Slot(ops, var, "momentum", 0, &init, out);
        GraphTensor m = ReadAfter(ops, m_handle, t, ready);
        GraphTensor m_new = ops->Binary("AddV2", ops->Binary("Mul", c(spec.momentum), m), increment);
        updates.push_back(ops->Assign("AssignVariableOp", m_handle, m_new));
        increment = m_new;
      }
      updates.push_back(ops->Assign("AssignSubVariableOp", var.handle, increment, {order}));
    } else {  // adagrad
      // accumulator += g^2; var -= lr g / sqrt(accumulator + epsilon)
      GraphTensor acc_handle = Slot(ops, var, "accumulator", spec.initial_accumulator_value, &init, out);
      if (sparse) {
        // each row squared and added at its id; then each row divided by its id's accumulator
        Node* added = ops->Scatter("ResourceScatterAdd", acc_handle, ids, ops->Unary("Square", g),
                                   {ready});
        updates.push_back(added);
        GraphTensor acc_rows = ops->GatherRows(acc_handle, t, ids, added);
        updates.push_back(ops->Scatter(
            "ResourceScatterSub", var.handle, ids,
            ops->Binary("RealDiv", ops->Binary("Mul", lr, g),
                        ops->Unary("Sqrt", ops->Binary("AddV2", acc_rows, c(spec.epsilon)))),
            {order}));
        continue;
      }
      GraphTensor acc = ReadAfter(ops, acc_handle, t, ready);
      GraphTensor acc_new = ops->Binary("AddV2", acc, ops->Unary("Square", g));
      updates.push_back(ops->Assign("AssignVariableOp", acc_handle, acc_new));
      updates.push_back(ops->Assign(
          "AssignSubVariableOp", var.handle,
          ops->Binary("RealDiv", ops->Binary("Mul", lr, g),
                      ops->Unary("Sqrt", ops->Binary("AddV2", acc_new, c(spec.epsilon)))),
          {order}));
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
