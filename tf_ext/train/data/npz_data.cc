// An .npz held in memory as training data (data.h): every array read at once, batches sliced
// from it in file order or, with DataSpec::shuffle, in a seeded permutation per epoch.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/tensor_util.h"
#include "tf_ext/graph/io/npy_io.h"
#include "tf_ext/train/data/data.h"

namespace tensorflow::tf_ext::train {
namespace {

const Tensor* Find(const std::vector<std::pair<std::string, Tensor>>& arrays, const std::string& key) {
  for (const auto& [k, v] : arrays) {
    if (k == key) return &v;
  }
  return nullptr;
}

template <typename From, typename To>
void CastValues(const Tensor& from, Tensor* to) {
  auto f = from.flat<From>();
  auto t = to->flat<To>();
  for (int64_t i = 0; i < f.size(); ++i) t(i) = static_cast<To>(f(i));
}

// `t` as `dtype` (integers and floating point, as the trainer's placeholders take them).
absl::StatusOr<Tensor> Cast(const Tensor& t, DataType dtype, const std::string& what) {
  if (dtype == DT_INVALID || t.dtype() == dtype) return t;
  Tensor out(dtype, t.shape());
#define TF_EXT_CAST_TO(FROM, TO_TYPE, TO)                             \
  if (t.dtype() == FROM && dtype == TO_TYPE) {                        \
    CastValues<EnumToDataType<FROM>::Type, TO>(t, &out);              \
    return out;                                                       \
  }
#define TF_EXT_CAST_FROM(FROM)                 \
  TF_EXT_CAST_TO(FROM, DT_INT32, int32_t)      \
  TF_EXT_CAST_TO(FROM, DT_INT64, int64_t)      \
  TF_EXT_CAST_TO(FROM, DT_FLOAT, float)        \
  TF_EXT_CAST_TO(FROM, DT_DOUBLE, double)
  TF_EXT_CAST_FROM(DT_INT32)
  TF_EXT_CAST_FROM(DT_INT64)
  TF_EXT_CAST_FROM(DT_FLOAT)
  TF_EXT_CAST_FROM(DT_DOUBLE)
  TF_EXT_CAST_FROM(DT_UINT8)
  TF_EXT_CAST_FROM(DT_BOOL)
#undef TF_EXT_CAST_FROM
#undef TF_EXT_CAST_TO
  return absl::InvalidArgumentError(absl::StrCat("array '", what, "' is ", DataTypeString(t.dtype()),
                                                 "; cannot feed it as ", DataTypeString(dtype)));
}

// `t`'s rows in `order`.
Tensor Rows(const Tensor& t, const std::vector<int64_t>& order) {
  Tensor out(t.dtype(), t.shape());
  const int64_t row = t.TotalBytes() / t.dim_size(0);
  const char* from = t.tensor_data().data();
  char* to = const_cast<char*>(out.tensor_data().data());
  for (size_t i = 0; i < order.size(); ++i) std::memcpy(to + i * row, from + order[i] * row, row);
  return out;
}

class NpzSource : public BatchSource {
 public:
  NpzSource(std::string path, const DataSpec& spec)
      : path_(std::move(path)), spec_(spec), rng_(static_cast<uint64_t>(spec.seed)) {}

  absl::Status Load() {
    auto arrays = ReadNpz(path_);
    if (!arrays.ok()) return absl::InvalidArgumentError(absl::StrCat(path_, ": ", arrays.status().message()));
    // Each key with the option that names it.
    std::vector<std::pair<const char*, std::string>> keys;
    for (const std::string& key : spec_.input_keys) keys.emplace_back("inputs", key);
    if (!spec_.targets_key.empty()) keys.emplace_back("targets", spec_.targets_key);
    if (!spec_.weights_key.empty()) keys.emplace_back("sample_weights", spec_.weights_key);
    for (const auto& [option, key] : keys) {
      const Tensor* t = Find(*arrays, key);
      if (t == nullptr) {
        std::vector<std::string> names;
        for (const auto& [name, array] : *arrays) names.push_back(name);
        std::sort(names.begin(), names.end());
        return absl::InvalidArgumentError(absl::StrCat("option '", option, "': ", path_, " has no array '", key,
                                                       "' (it has: ", absl::StrJoin(names, ", "), ")"));
      }
      if (t->dims() < 1) return absl::InvalidArgumentError(absl::StrCat("array '", key, "' has no examples axis"));
      if (examples_ >= 0 && t->dim_size(0) != examples_) {
        return absl::InvalidArgumentError(absl::StrCat("array '", key, "' has ", t->dim_size(0),
                                                       " examples; the first has ", examples_));
      }
      examples_ = t->dim_size(0);
      columns_.push_back(*t);
    }
    TF_RETURN_IF_ERROR(CheckFeatureNames(spec_));  // after the keys: a misspelt key comes first
    if (examples_ == 0) return absl::InvalidArgumentError(absl::StrCat(path_, " has no examples"));
    const size_t n = spec_.input_keys.size();
    if (!spec_.targets_key.empty()) {
      auto cast = Cast(columns_[n], spec_.targets_dtype, spec_.targets_key);
      if (!cast.ok()) return cast.status();
      columns_[n] = *cast;
    }
    return absl::OkStatus();
  }

  absl::Status StartEpoch(int64_t epoch) override {
    start_ = 0;
    if (!spec_.shuffle) {
      epoch_columns_ = columns_;
      return absl::OkStatus();
    }
    // One generator over the epochs: epoch e's order is the (e+1)-th permutation drawn from the
    // seed, whichever epoch training starts at (a resumed run sees the order it would have).
    if (epoch < next_epoch_) {
      rng_.seed(static_cast<uint64_t>(spec_.seed));
      next_epoch_ = 0;
    }
    std::vector<int64_t> order(examples_);
    for (; next_epoch_ <= epoch; ++next_epoch_) {
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng_);
    }
    epoch_columns_.clear();
    for (const Tensor& t : columns_) epoch_columns_.push_back(Rows(t, order));
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Next(Batch* batch) override {
    if (start_ >= examples_) return false;
    int64_t limit = std::min(examples_, start_ + spec_.batch_size);
    if (limit - start_ < spec_.batch_size && spec_.drop_remainder) return false;
    auto slice = [&](const Tensor& t) { return tensor::DeepCopy(t.Slice(start_, limit)); };
    *batch = Batch();
    batch->size = limit - start_;
    const size_t n = spec_.input_keys.size();
    for (size_t i = 0; i < n; ++i) batch->inputs.push_back({spec_.input_names[i], slice(epoch_columns_[i])});
    size_t next = n;
    if (!spec_.targets_key.empty()) batch->targets = slice(epoch_columns_[next++]);
    if (!spec_.weights_key.empty()) batch->weights = slice(epoch_columns_[next++]);
    start_ = limit;
    return true;
  }

  int64_t examples() const override { return examples_; }
  std::string description() const override { return path_; }

 private:
  std::string path_;
  DataSpec spec_;
  std::vector<Tensor> columns_;  // inputs, targets, weights
  std::vector<Tensor> epoch_columns_;
  int64_t examples_ = -1;
  int64_t start_ = 0;
  std::mt19937_64 rng_;
  int64_t next_epoch_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BatchSource>> OpenNpzData(const std::string& path, const DataSpec& spec) {
  if (spec.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch size ", spec.batch_size, " is not positive"));
  }
  auto source = std::make_unique<NpzSource>(path, spec);
  TF_RETURN_IF_ERROR(source->Load());
  return std::unique_ptr<BatchSource>(std::move(source));
}

absl::StatusOr<std::unique_ptr<BatchSource>> OpenData(const std::string& path, const DataSpec& spec) {
  if (IsTFRecordPath(path)) return OpenTFRecordData(path, spec);
  return OpenNpzData(path, spec);
}

}  // namespace tensorflow::tf_ext::train
