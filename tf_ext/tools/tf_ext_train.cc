// tf_ext_train: trains a SavedModel from the command line, with no Python (tf_ext/train/trainer.h).
//
//   tf_ext_train --saved_model=DIR --data=FILE.npz --inputs=KEY[,KEY...] --targets=KEY
//                --loss=NAME[:from_logits] --optimizer=sgd|adam|adamw|rmsprop|adagrad
//                --learning_rate=F --batch_size=N --epochs=N [--history=FILE.csv] ...
//
// Batches are taken in file order; one line per epoch (its mean step loss, as Keras's history).
// --save_weights writes the trained variables to an .npz (by the object graph's names); --export
// writes the trained SavedModel (same signatures), only once training has succeeded.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tensorflow/core/framework/tensor_util.h"
#include "tf_ext/graph/export.h"
#include "tf_ext/graph/npy_io.h"
#include "tensorflow/core/platform/env.h"
#include "tf_ext/tools/flags.h"
#include "tf_ext/tools/library_lookup.h"
#include "tf_ext/train/options.h"
#include "tf_ext/train/trainer.h"

namespace tensorflow::tf_ext {
namespace {

constexpr char kDescription[] =
    "Trains a SavedModel's signature function (an inference function: models without BatchNorm\n"
    "or dropout) with Keras 3's losses and optimizers, entirely in C++.\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "tf_ext_train: %s\n", message.c_str());
  return 1;
}

const Tensor* Find(const std::vector<std::pair<std::string, Tensor>>& arrays, const std::string& key) {
  for (const auto& [k, v] : arrays) {
    if (k == key) return &v;
  }
  return nullptr;
}

int Main(int argc, char** argv) {
  std::string saved_model, signature = "serving_default", output, data, inputs, targets_key,
                           weights_key, loss = "mse", optimizer = "sgd", schedule = "constant",
                           history, save_weights;
  double learning_rate = -1, momentum = 0, beta_1 = 0.9, beta_2 = 0.999, epsilon = 1e-7,
         weight_decay = -1, rho = 0.9;
  bool nesterov = false, centered = false;
  int64_t batch_size = 32, epochs = 1;
  tools::FlagParser parser("tf_ext_train", kDescription);
  parser.String("saved_model", &saved_model, "the SavedModel directory").Required();
  parser.String("signature", &signature, "the signature whose function is trained");
  parser.String("output", &output, "the signature output the loss reads (default: the only one)");
  parser.String("data", &data, "training data: an .npz file").Required();
  parser.String("inputs", &inputs, "the .npz keys fed to the signature's inputs, comma-separated "
                                   "(each key is also the input's name)").Required();
  parser.String("targets", &targets_key, "the .npz key of the targets");
  parser.String("sample_weights", &weights_key, "the .npz key of per-example weights");
  parser.String("loss", &loss, "mse, mae, binary_crossentropy, categorical_crossentropy, "
                               "sparse_categorical_crossentropy (':from_logits'), or output");
  parser.String("optimizer", &optimizer, "the optimizer")
      .Choices({"sgd", "adam", "adamw", "rmsprop", "adagrad"});
  parser.Double("learning_rate", &learning_rate, "default: Keras's for the optimizer");
  parser.Double("momentum", &momentum, "sgd, rmsprop");
  parser.Bool("nesterov", &nesterov, "sgd").ImplicitValue("true");
  parser.Double("beta_1", &beta_1, "adam, adamw");
  parser.Double("beta_2", &beta_2, "adam, adamw");
  parser.Double("epsilon", &epsilon, "adam, adamw, rmsprop, adagrad");
  parser.Double("weight_decay", &weight_decay, "adamw (default 0.004)");
  parser.Double("rho", &rho, "rmsprop");
  parser.Bool("centered", &centered, "rmsprop").ImplicitValue("true");
  parser.String("lr_schedule", &schedule,
                "constant, exponential:RATE:STEPS or cosine:STEPS (Keras's ExponentialDecay, CosineDecay)");
  parser.Int("batch_size", &batch_size, "examples per step", int64_t{1});
  parser.Int("epochs", &epochs, "passes over the data", int64_t{1});
  parser.String("history", &history, "a CSV of step,epoch,loss (one row per step)");
  parser.String("save_weights", &save_weights, "an .npz of the trained variables");
  std::string export_dir;
  parser.String("export", &export_dir,
                "write the trained SavedModel here (same signatures, the trained variables)");
  std::string library;
  parser.String("library", &library, "the op library (default: found as tf_ext_grad finds it)");
  if (absl::Status s = parser.Parse(argc, argv); !s.ok()) {
    return Fail(absl::StrCat(s.message(), "\n", parser.Usage()));
  }
  if (parser.help_requested()) {
    std::printf("%s", parser.Usage().c_str());
    return 0;
  }
  // The op library: tf_ext's ops and its gradients of TensorFlow ops Python alone differentiates.
  auto found = tools::FindOpLibrary(tools::LibraryLookupContext::FromProcess(library));
  if (!found.ok()) return Fail(std::string(found.status().message()));
  void* handle = nullptr;
  if (absl::Status s = Env::Default()->LoadDynamicLibrary(found->c_str(), &handle); !s.ok()) {
    return Fail(absl::StrCat("cannot load op library '", *found, "': ", s.message()));
  }
  TrainerOptions options;
  options.signature_key = signature;
  options.output_key = output;
  auto parsed_loss = train::ParseLoss(loss);
  if (!parsed_loss.ok()) return Fail(std::string(parsed_loss.status().message()));
  options.loss = *parsed_loss;
  options.optimizer.name = optimizer;
  options.optimizer.learning_rate = learning_rate;
  options.optimizer.momentum = momentum;
  options.optimizer.nesterov = nesterov;
  options.optimizer.beta_1 = beta_1;
  options.optimizer.beta_2 = beta_2;
  options.optimizer.epsilon = epsilon;
  options.optimizer.weight_decay = weight_decay;
  options.optimizer.rho = rho;
  options.optimizer.centered = centered;
  if (absl::Status s = train::ParseSchedule(schedule, &options.optimizer); !s.ok()) {
    return Fail(absl::StrCat("--", s.message()));
  }
  if (!export_dir.empty()) {
    // Refused before training, not after it.
    if (absl::Status s = CheckExportTarget(export_dir); !s.ok()) return Fail(std::string(s.message()));
  }
  const bool has_targets = train::LossHasTargets(options.loss);
  if (has_targets && targets_key.empty()) return Fail("--targets is required by this loss");
  options.sample_weights = !weights_key.empty();

  // The data: every array must have the same number of examples.
  auto arrays = ReadNpz(data);
  if (!arrays.ok()) return Fail(absl::StrCat("--data=", data, ": ", arrays.status().message()));
  std::vector<std::string> input_keys = absl::StrSplit(inputs, ',');
  std::vector<std::pair<std::string, const Tensor*>> columns;
  for (const std::string& key : input_keys) columns.push_back({key, Find(*arrays, key)});
  Tensor targets_all;
  if (has_targets) {
    const Tensor* t = Find(*arrays, targets_key);
    columns.push_back({targets_key, t});
    if (t != nullptr) targets_all = *t;
  }
  if (options.sample_weights) columns.push_back({weights_key, Find(*arrays, weights_key)});
  int64_t examples = -1;
  for (const auto& [key, t] : columns) {
    if (t == nullptr) return Fail(absl::StrCat("--data=", data, " has no array '", key, "'"));
    if (t->dims() < 1) return Fail(absl::StrCat("array '", key, "' has no examples axis"));
    if (examples >= 0 && t->dim_size(0) != examples) {
      return Fail(absl::StrCat("array '", key, "' has ", t->dim_size(0), " examples; the first has ", examples));
    }
    examples = t->dim_size(0);
  }
  if (batch_size > examples) {
    return Fail(absl::StrCat("--batch_size=", batch_size, " is larger than the data (", examples, " examples)"));
  }
  if (has_targets && options.loss.kind == train::LossKind::kSparseCategoricalCrossentropy &&
      targets_all.dtype() == DT_INT32) {
    Tensor cast(DT_INT64, targets_all.shape());
    auto from = targets_all.flat<int32>();
    auto to = cast.flat<int64_t>();
    for (int64_t i = 0; i < from.size(); ++i) to(i) = from(i);
    targets_all = cast;
    columns[input_keys.size()].second = &targets_all;
  }

  auto trainer = Trainer::Create(saved_model, options);
  if (!trainer.ok()) return Fail(std::string(trainer.status().message()));
  std::ofstream csv;
  if (!history.empty()) {
    csv.open(history);
    if (!csv) return Fail(absl::StrCat("--history=", history, ": cannot write"));
    csv << "step,epoch,loss\n";
  }
  const int64_t steps_per_epoch = (examples + batch_size - 1) / batch_size;
  int64_t step = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    double sum = 0, weight = 0;
    for (int64_t b = 0; b < steps_per_epoch; ++b, ++step) {
      const int64_t start = b * batch_size, limit = std::min(examples, start + batch_size);
      auto batch = [&](const Tensor* t) { return tensor::DeepCopy(t->Slice(start, limit)); };
      std::vector<std::pair<std::string, Tensor>> feeds;
      for (size_t i = 0; i < input_keys.size(); ++i) feeds.push_back({input_keys[i], batch(columns[i].second)});
      Tensor targets = has_targets ? batch(columns[input_keys.size()].second) : Tensor();
      Tensor weights = options.sample_weights ? batch(columns.back().second) : Tensor();
      auto loss_value = (*trainer)->Step(feeds, targets, weights);
      if (!loss_value.ok()) return Fail(absl::StrCat("step ", step, ": ", loss_value.status().message()));
      if (!std::isfinite(*loss_value)) {
        return Fail(absl::StrCat("step ", step, " (epoch ", epoch, "): the loss is ", *loss_value,
                                 "; stopping"));
      }
      if (csv.is_open()) csv << step << "," << epoch << "," << absl::StrFormat("%.9g", *loss_value) << "\n";
      // Keras's epoch loss: the mean of the step losses weighted by batch size
      sum += *loss_value * (limit - start);
      weight += limit - start;
    }
    std::printf("epoch %lld/%lld: loss %.6g\n", static_cast<long long>(epoch + 1),
                static_cast<long long>(epochs), sum / weight);
    std::fflush(stdout);
  }
  if (!export_dir.empty()) {
    if (absl::Status s = (*trainer)->Export(export_dir); !s.ok()) {
      return Fail(absl::StrCat("--export=", export_dir, ": ", s.message()));
    }
    std::printf("exported the trained SavedModel to %s\n", export_dir.c_str());
  }
  if (!save_weights.empty()) {
    auto values = (*trainer)->TrainableValues();
    if (!values.ok()) return Fail(std::string(values.status().message()));
    if (absl::Status s = WriteNpz(save_weights, *values); !s.ok()) return Fail(std::string(s.message()));
  }
  return 0;
}

}  // namespace
}  // namespace tensorflow::tf_ext

int main(int argc, char** argv) { return tensorflow::tf_ext::Main(argc, argv); }
