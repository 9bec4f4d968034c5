// Keras's logs: the named values (loss, metrics, validation's) a training loop reports after
// each batch and epoch, to its front ends and callbacks.
#ifndef TF_EXT_TRAIN_LOOP_LOGS_H_
#define TF_EXT_TRAIN_LOOP_LOGS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tensorflow::tf_ext::train {

// Named values in order, as Keras's logs: "loss", each metric, then "val_loss", "val_<metric>".
using Logs = std::vector<std::pair<std::string, double>>;

// The value of `name` in `logs`; nullptr when absent.
const double* FindLog(const Logs& logs, const std::string& name);

// The one-line summary of epoch `epoch` (from 0) of `epochs`: "epoch 2/5: loss 0.31, mae 0.4".
std::string EpochSummary(int64_t epoch, int64_t epochs, const Logs& logs);

struct EpochLogs {
  int64_t epoch = 0;  // from 0, as Keras's history
  Logs logs;
};

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_LOOP_LOGS_H_
