// TFRecord files of tf.train.Example through TensorFlow's own tf.data kernels (data.h).
#include "absl/status/status.h"
#include "tf_ext/train/data.h"

namespace tensorflow::tf_ext::train {

absl::StatusOr<std::unique_ptr<BatchSource>> OpenTFRecordData(const std::string& path,
                                                              const DataSpec& spec) {
  return absl::UnimplementedError("TFRecord data: not yet");
}

}  // namespace tensorflow::tf_ext::train
