// NumPy .npy / .npz files for tf_ext's tools: feeds from files and gradients saved at full
// precision, readable with numpy.load.
//
// .npy: format versions 1.0-3.0, little-endian (or byte-order-free) C-order arrays of float16,
// float32, float64, int8/16/32/64, uint8/16 and bool. .npz: a zip archive of .npy members as np.savez writes it (stored, not
// compressed: np.savez_compressed archives are rejected with a message saying so).
#ifndef TF_EXT_GRAPH_IO_NPY_IO_H_
#define TF_EXT_GRAPH_IO_NPY_IO_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/core/framework/tensor.h"

namespace tensorflow::tf_ext {

// Parses the bytes of one .npy file.
absl::StatusOr<Tensor> ParseNpy(const std::string& bytes);
// The .npy encoding of `t` (its own dtype; fails for dtypes numpy has no code for).
absl::StatusOr<std::string> EncodeNpy(const Tensor& t);

// Reads a .npy file.
absl::StatusOr<Tensor> ReadNpy(const std::string& path);
// Reads every array of a .npz file, in archive order (names without the ".npy" suffix).
absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> ReadNpz(const std::string& path);
// Writes arrays to a .npz file (np.savez layout: stored members "<name>.npy").
absl::Status WriteNpz(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& arrays);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_IO_NPY_IO_H_
