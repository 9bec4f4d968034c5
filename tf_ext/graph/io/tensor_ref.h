// A tensor of a graph named as on the command line: "node" or "node:index".
#ifndef TF_EXT_GRAPH_IO_TENSOR_REF_H_
#define TF_EXT_GRAPH_IO_TENSOR_REF_H_

#include <string>

#include "absl/status/statusor.h"

namespace tensorflow::tf_ext {

struct TensorRef {
  std::string node;
  int index = 0;
  std::string ToString() const;
  static absl::StatusOr<TensorRef> Parse(const std::string& s);
};

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_IO_TENSOR_REF_H_
