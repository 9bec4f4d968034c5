// Training data for tf_ext::train::Fit (fit.h): batches of a signature's inputs, targets and
// per-example weights, one epoch after another, from an in-memory .npz (npz_data.cc) or from
// TFRecord files of tf.train.Example read by TensorFlow's own tf.data kernels
// (tfrecord_data.cc). OpenData chooses by the path.
#ifndef TF_EXT_TRAIN_DATA_DATA_H_
#define TF_EXT_TRAIN_DATA_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.pb.h"

namespace tensorflow::tf_ext::train {

struct Batch {
  // The signature's inputs, by the input names DataSpec::input_names gives (in that order).
  std::vector<std::pair<std::string, Tensor>> inputs;
  Tensor targets;  // empty without DataSpec::targets_key
  Tensor weights;  // empty without DataSpec::weights_key
  int64_t size = 0;  // examples in this batch
};

// A feature's declared dtype and per-example shape (--features=NAME:DTYPE:SHAPE).
struct FeatureSpec {
  std::string name;
  DataType dtype = DT_INVALID;
  TensorShape shape;  // per example; empty for a scalar
};

// What to read and how to batch it.
struct DataSpec {
  // --inputs: the data's keys (.npz arrays, Example features), in order, and the signature
  // input each feeds (Trainer::ResolveInputs' names).
  std::vector<std::string> input_keys, input_names;
  // The signature inputs' dtypes and shapes, in input_keys' order (Trainer::InputSpec): a
  // TFRecord feature of an input has them unless `features` declares it otherwise.
  std::vector<std::pair<DataType, PartialTensorShape>> input_specs;
  std::string targets_key, weights_key;  // empty: none
  // The dtype the targets and weights are fed as (the trainer's placeholders): a feature read
  // as another dtype is cast (int64 class ids to int32 and the reverse; int to float).
  DataType targets_dtype = DT_INVALID, weights_dtype = DT_FLOAT;
  std::vector<FeatureSpec> features;  // --features
  std::string compression;            // --compression: "", GZIP or ZLIB
  int64_t batch_size = 32;
  bool drop_remainder = false;
  // .npz: a new seeded permutation each epoch. TFRecord: --shuffle_buffer examples, seeded,
  // reshuffled each epoch (0: records in file order).
  bool shuffle = false;
  int64_t shuffle_buffer = 0;
  int64_t seed = 0;
  // TFRecord only: files read in parallel (0: up to 4), parallel parse calls (0: one per core),
  // batches prefetched (0: grown by the prefetch's own autotuner).
  int64_t parallel_reads = 0, parallel_calls = 0, prefetch = 0;
  // TFRecord only: a file truncated inside a record, or with a record whose length or data fails
  // its CRC, is read up to that record, the rest skipped with a warning (file, byte offset,
  // records before it); otherwise it is an error naming the same (tfrecord_check.h).
  bool skip_corrupt_records = false;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Starts epoch `epoch` (from 0): with shuffling, each epoch its own order, determined by the
  // seed and the epoch.
  virtual absl::Status StartEpoch(int64_t epoch) = 0;
  // The epoch's next batch into `batch`; false at the epoch's end.
  virtual absl::StatusOr<bool> Next(Batch* batch) = 0;
  // Examples per epoch, when known before reading (an .npz); -1 otherwise.
  virtual int64_t examples() const = 0;
  // What the source reads, for messages ("train.npz", "3 TFRecord files").
  virtual std::string description() const = 0;
};

// "NAME:DTYPE:SHAPE,..." (SHAPE as 6 or 8x8x3, empty for a scalar; DTYPE as Python names it:
// float32, int64, ...). InvalidArgument naming the item otherwise.
absl::StatusOr<std::vector<FeatureSpec>> ParseFeatures(const std::string& text);

// InvalidArgument "option 'features': 'NAME' is none of the inputs, targets or sample weights
// (those are: ...)" for a declared feature nothing reads (a misspelt name would otherwise be
// ignored, with an .npz too).
absl::Status CheckFeatureNames(const DataSpec& spec);

// True when `path` names TFRecord data: a comma-separated list or glob of files ending in
// .tfrecord or .tfrecords.
bool IsTFRecordPath(const std::string& path);

// The files `path` names: its comma-separated items, each a file or a glob, expanded and
// sorted by name. InvalidArgument when one matches nothing or none ends in .tfrecord(s).
absl::StatusOr<std::vector<std::string>> ExpandTFRecordFiles(const std::string& path);

// An .npz held in memory.
absl::StatusOr<std::unique_ptr<BatchSource>> OpenNpzData(const std::string& path,
                                                         const DataSpec& spec);
// TFRecord files of tf.train.Example through a tf.data pipeline in a Session of its own.
absl::StatusOr<std::unique_ptr<BatchSource>> OpenTFRecordData(const std::string& path,
                                                              const DataSpec& spec);
// One of the two, by IsTFRecordPath.
absl::StatusOr<std::unique_ptr<BatchSource>> OpenData(const std::string& path,
                                                      const DataSpec& spec);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_DATA_DATA_H_
