// TFRecord training data (tf_ext/train/data/data.h, tfrecord_data.cc): --features parsing, file
// lists and globs, record order across files with parallel reads and parses, partial last
// batches, seeded shuffles (reproducible per epoch, each example once), GZIP, the casts to the
// fed dtypes, and each kind of bad input with an error naming it.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/example/example.pb.h"
#include "tensorflow/core/example/feature.pb.h"
#include "tensorflow/core/lib/io/record_writer.h"
#include "tensorflow/core/lib/io/zlib_compression_options.h"
#include "tensorflow/core/lib/io/zlib_outputbuffer.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/file_system.h"
#include "tf_ext/train/data/data.h"
#include "tf_ext/train/data/tfrecord_check.h"

namespace tensorflow::tf_ext::train {
namespace {

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/fit_data_", name);
  int64_t files = 0, dirs = 0;
  Env::Default()->DeleteRecursively(dir, &files, &dirs).IgnoreError();
  TF_CHECK_OK(Env::Default()->RecursivelyCreateDir(dir));
  return dir;
}

// Example `id`: x = [id, id + 0.5] (float), y = id (int64), w = 1 + id / 100 (float).
std::string ExampleBytes(int64_t id) {
  Example e;
  auto& f = *e.mutable_features()->mutable_feature();
  f["x"].mutable_float_list()->add_value(static_cast<float>(id));
  f["x"].mutable_float_list()->add_value(static_cast<float>(id) + 0.5f);
  f["y"].mutable_int64_list()->add_value(id);
  f["w"].mutable_float_list()->add_value(1.0f + static_cast<float>(id) / 100.0f);
  std::string bytes;
  e.SerializeToString(&bytes);
  return bytes;
}

void WriteRecords(const std::string& path, int64_t first, int64_t count, const std::string& compression = "") {
  std::unique_ptr<WritableFile> file;
  TF_CHECK_OK(Env::Default()->NewWritableFile(path, &file));
  io::RecordWriter writer(file.get(), io::RecordWriterOptions::CreateRecordWriterOptions(compression));
  for (int64_t id = first; id < first + count; ++id) TF_CHECK_OK(writer.WriteRecord(ExampleBytes(id)));
  TF_CHECK_OK(writer.Close());
  TF_CHECK_OK(file->Close());
}

DataSpec XYSpec(int64_t batch_size) {
  DataSpec spec;
  spec.input_keys = {"x"};
  spec.input_names = {"x"};
  spec.input_specs = {{DT_FLOAT, PartialTensorShape({-1, 2})}};
  spec.targets_key = "y";
  spec.targets_dtype = DT_INT64;
  spec.features = {{"y", DT_INT64, TensorShape({})}};
  spec.batch_size = batch_size;
  return spec;
}

// One epoch's batches: the ids (targets) of each.
std::vector<std::vector<int64_t>> Epoch(BatchSource* source, int64_t epoch) {
  TF_CHECK_OK(source->StartEpoch(epoch));
  std::vector<std::vector<int64_t>> batches;
  Batch batch;
  while (true) {
    absl::StatusOr<bool> more = source->Next(&batch);
    TF_CHECK_OK(more.status());
    if (!*more) break;
    std::vector<int64_t> ids;
    EXPECT_EQ(batch.targets.dim_size(0), batch.size);
    const Tensor& x = batch.inputs.at(0).second;
    for (int64_t i = 0; i < batch.size; ++i) {
      const int64_t id = batch.targets.flat<int64_t>()(i);
      EXPECT_EQ(x.matrix<float>()(i, 0), static_cast<float>(id));
      EXPECT_EQ(x.matrix<float>()(i, 1), static_cast<float>(id) + 0.5f);
      ids.push_back(id);
    }
    batches.push_back(ids);
  }
  return batches;
}

std::vector<int64_t> Flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> ids;
  for (const auto& b : batches) ids.insert(ids.end(), b.begin(), b.end());
  return ids;
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

TEST(ParseFeaturesTest, NamesDtypesAndShapes) {
  auto f = ParseFeatures("image:float32:8x8x3, y:int64:,w:float64:1");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->size(), 3u);
  EXPECT_EQ((*f)[0].name, "image");
  EXPECT_EQ((*f)[0].dtype, DT_FLOAT);
  EXPECT_EQ((*f)[0].shape, TensorShape({8, 8, 3}));
  EXPECT_EQ((*f)[1].name, "y");
  EXPECT_EQ((*f)[1].dtype, DT_INT64);
  EXPECT_EQ((*f)[1].shape.dims(), 0);
  EXPECT_EQ((*f)[2].dtype, DT_DOUBLE);
  EXPECT_EQ((*f)[2].shape, TensorShape({1}));
  auto i32 = ParseFeatures("a:int32:2,s:string:");
  ASSERT_TRUE(i32.ok()) << i32.status();
  EXPECT_EQ((*i32)[0].dtype, DT_INT32);
  EXPECT_EQ((*i32)[1].dtype, DT_STRING);
  auto none = ParseFeatures("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(ParseFeaturesTest, ErrorsNameTheItem) {
  for (const std::string bad : {"x:float32", "x:float99:3", "x:float32:3xa", ":float32:3", "x:float32:0",
                                "x:float32:3:4"}) {
    auto f = ParseFeatures(absl::StrCat("ok:int64:,", bad));
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(f.status().message().find(absl::StrCat("'", bad, "'")), std::string::npos) << f.status();
  }
  auto twice = ParseFeatures("y:int64:,y:float32:");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("declared twice"), std::string::npos) << twice.status();
  auto dtype = ParseFeatures("x:float99:3");
  EXPECT_NE(dtype.status().message().find("float99"), std::string::npos) << dtype.status();
}

TEST(TFRecordFilesTest, PathsGlobsAndSorting) {
  EXPECT_TRUE(IsTFRecordPath("a.tfrecord"));
  EXPECT_TRUE(IsTFRecordPath("d/a.tfrecords"));
  EXPECT_TRUE(IsTFRecordPath("d/*.tfrecord,e/b.tfrecord"));
  EXPECT_FALSE(IsTFRecordPath("train.npz"));
  EXPECT_FALSE(IsTFRecordPath("a.tfrecord,b.npz"));
  EXPECT_FALSE(IsTFRecordPath(""));

  const std::string dir = TempDir("glob");
  for (const char* name : {"c", "a", "b"}) WriteRecords(absl::StrCat(dir, "/", name, ".tfrecord"), 0, 1);
  WriteRecords(dir + "/z.tfrecords", 0, 1);
  auto files = ExpandTFRecordFiles(dir + "/*.tfrecord");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, (std::vector<std::string>{dir + "/a.tfrecord", dir + "/b.tfrecord", dir + "/c.tfrecord"}));
  // Listed files and globs' matches together, sorted by name, each file once.
  auto listed = ExpandTFRecordFiles(absl::StrCat(dir, "/z.tfrecords,", dir, "/[bc].tfrecord"));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, (std::vector<std::string>{dir + "/b.tfrecord", dir + "/c.tfrecord", dir + "/z.tfrecords"}));
  auto twice = ExpandTFRecordFiles(absl::StrCat(dir, "/c.tfrecord,", dir, "/[bc].tfrecord"));
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_EQ(*twice, (std::vector<std::string>{dir + "/b.tfrecord", dir + "/c.tfrecord"}));

  auto nothing = ExpandTFRecordFiles(absl::StrCat(dir, "/a.tfrecord,", dir, "/nope*.tfrecord"));
  ASSERT_FALSE(nothing.ok());
  EXPECT_EQ(nothing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nothing.status().message().find(dir + "/nope*.tfrecord' matches no file"), std::string::npos)
      << nothing.status();
  auto missing = ExpandTFRecordFiles(dir + "/missing.tfrecord");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.tfrecord"), std::string::npos) << missing.status();
  auto npz = ExpandTFRecordFiles(dir + "/a.tfrecord," + dir + "/x.npz");
  ASSERT_FALSE(npz.ok());
  EXPECT_NE(npz.status().message().find("x.npz"), std::string::npos) << npz.status();
}

// Files of 7, 0, 3, 11 and 5 records (ids 0..25 in order), written under names whose sorted
// order is the ids' order.
std::string FiveFiles(const std::string& name, const std::string& compression = "") {
  const std::string dir = TempDir(name);
  const int64_t counts[] = {7, 0, 3, 11, 5};
  int64_t first = 0;
  for (int i = 0; i < 5; ++i) {
    WriteRecords(absl::StrCat(dir, "/part-", i, ".tfrecord"), first, counts[i], compression);
    first += counts[i];
  }
  return dir + "/part-*.tfrecord";
}

TEST(TFRecordDataTest, FileOrderWhateverTheParallelism) {
  const std::string files = FiveFiles("order");
  for (int64_t reads : {1, 2, 4, 8}) {
    for (int64_t calls : {0, 1, 3}) {
      DataSpec spec = XYSpec(4);
      spec.parallel_reads = reads;
      spec.parallel_calls = calls;
      spec.prefetch = 2;
      auto source = OpenTFRecordData(files, spec);
      ASSERT_TRUE(source.ok()) << source.status();
      EXPECT_EQ((*source)->description(), "5 TFRecord files");
      EXPECT_EQ((*source)->examples(), -1);
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        auto batches = Epoch(source->get(), epoch);
        EXPECT_EQ(Flat(batches), Range(26)) << "reads " << reads << " calls " << calls;
        ASSERT_EQ(batches.size(), 7u);
        for (size_t b = 0; b + 1 < batches.size(); ++b) EXPECT_EQ(batches[b].size(), 4u);
        EXPECT_EQ(batches.back().size(), 2u);  // the partial last batch is kept
      }
    }
  }
}

TEST(TFRecordDataTest, DropRemainder) {
  DataSpec spec = XYSpec(4);
  spec.drop_remainder = true;
  auto source = OpenTFRecordData(FiveFiles("drop"), spec);
  ASSERT_TRUE(source.ok()) << source.status();
  auto batches = Epoch(source->get(), 0);
  ASSERT_EQ(batches.size(), 6u);
  for (const auto& b : batches) EXPECT_EQ(b.size(), 4u);
  EXPECT_EQ(Flat(batches), Range(24));
}

TEST(TFRecordDataTest, ShuffleIsSeededPerEpoch) {
  const std::string files = FiveFiles("shuffle");
  auto open = [&](int64_t seed) {
    DataSpec spec = XYSpec(5);
    spec.shuffle_buffer = 8;
    spec.seed = seed;
    spec.parallel_reads = 3;
    auto source = OpenTFRecordData(files, spec);
    TF_CHECK_OK(source.status());
    return std::move(*source);
  };
  auto a = open(7);
  const std::vector<int64_t> e0 = Flat(Epoch(a.get(), 0)), e1 = Flat(Epoch(a.get(), 1)),
                             e2 = Flat(Epoch(a.get(), 2));
  for (const auto& order : {e0, e1, e2}) {
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, Range(26));  // every example exactly once
  }
  EXPECT_NE(e0, Range(26));
  EXPECT_NE(e0, e1);
  EXPECT_NE(e1, e2);
  // The same seed and epoch give the same order, whichever epochs ran before.
  auto b = open(7);
  EXPECT_EQ(Flat(Epoch(b.get(), 1)), e1);
  EXPECT_EQ(Flat(Epoch(b.get(), 0)), e0);
  EXPECT_EQ(Flat(Epoch(b.get(), 2)), e2);
  auto c = open(8);
  EXPECT_NE(Flat(Epoch(c.get(), 0)), e0);
  // Seed 0 is a seed too.
  auto z = open(0), z2 = open(0);
  EXPECT_EQ(Flat(Epoch(z.get(), 0)), Flat(Epoch(z2.get(), 0)));
}

// The next epoch's iterator is made ahead (in the last batches of an epoch, once one epoch
// has been counted): each epoch still gets its own order, as from a source started at it, when
// epochs run in turn, are skipped, are left part read, or are repeated (validation's epoch 0).
TEST(TFRecordDataTest, EpochsMadeAheadKeepTheirOrder) {
  const std::string files = FiveFiles("ahead");
  for (int64_t batch : {2, 5}) {  // 13 batches an epoch (made ahead mid-epoch), 6 (at its start)
    auto open = [&](int64_t shuffle_buffer) {
      DataSpec spec = XYSpec(batch);
      spec.shuffle_buffer = shuffle_buffer;
      spec.seed = 3;
      auto source = OpenTFRecordData(files, spec);
      TF_CHECK_OK(source.status());
      return std::move(*source);
    };
    std::vector<std::vector<int64_t>> fresh;
    for (int64_t epoch = 0; epoch < 5; ++epoch) fresh.push_back(Flat(Epoch(open(8).get(), epoch)));
    auto a = open(8);
    for (int64_t epoch = 0; epoch < 4; ++epoch) EXPECT_EQ(Flat(Epoch(a.get(), epoch)), fresh[epoch]) << batch;
    // Epoch 4 was made ahead; epoch 2 asked instead.
    EXPECT_EQ(Flat(Epoch(a.get(), 2)), fresh[2]) << batch;
    // Epoch 3, part read: three batches, then epoch 4.
    ASSERT_TRUE(a->StartEpoch(3).ok());
    for (int i = 0; i < 3; ++i) {
      Batch b;
      ASSERT_TRUE(*a->Next(&b));
    }
    EXPECT_EQ(Flat(Epoch(a.get(), 4)), fresh[4]) << batch;
    // Without a shuffle buffer every epoch is the files' order, epoch 0 repeated included.
    auto plain = open(0);
    for (int64_t epoch : {0, 0, 1, 0, 0}) EXPECT_EQ(Flat(Epoch(plain.get(), epoch)), Range(26)) << batch;
  }
}

TEST(TFRecordDataTest, Gzip) {
  const std::string files = FiveFiles("gzip", "GZIP");
  DataSpec spec = XYSpec(6);
  spec.compression = "GZIP";
  spec.parallel_reads = 2;
  auto source = OpenTFRecordData(files, spec);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(Flat(Epoch(source->get(), 0)), Range(26));
  // Read uncompressed, the same files are corrupt records: an error before reading, no crash,
  // with a hint at the compression.
  DataSpec plain = XYSpec(6);
  auto wrong = OpenTFRecordData(files, plain);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kDataLoss) << wrong.status();
  EXPECT_NE(wrong.status().message().find("part-0.tfrecord' has a corrupt record at byte offset 0"), std::string::npos)
      << wrong.status();
  EXPECT_NE(wrong.status().message().find("option 'compression'"), std::string::npos) << wrong.status();
}

TEST(TFRecordDataTest, CastsToTheFedDtypes) {
  const std::string dir = TempDir("cast");
  WriteRecords(dir + "/d.tfrecord", 0, 10);
  DataSpec spec;
  spec.input_keys = {"x", "y"};
  spec.input_names = {"features", "ids"};
  // An int32 input fed by an int64 feature; a float64 input by a float feature.
  spec.input_specs = {{DT_DOUBLE, PartialTensorShape({-1, 2})}, {DT_INT32, PartialTensorShape({-1})}};
  spec.targets_key = "y";
  spec.targets_dtype = DT_FLOAT;
  spec.weights_key = "w";
  spec.weights_dtype = DT_FLOAT;
  spec.features = {{"y", DT_INT64, TensorShape({})}, {"w", DT_FLOAT, TensorShape({})}};
  spec.batch_size = 4;
  auto source = OpenTFRecordData(dir + "/d.tfrecord", spec);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->description(), dir + "/d.tfrecord");
  ASSERT_TRUE((*source)->StartEpoch(0).ok());
  Batch batch;
  auto more = (*source)->Next(&batch);
  ASSERT_TRUE(more.ok()) << more.status();
  ASSERT_TRUE(*more);
  ASSERT_EQ(batch.inputs.size(), 2u);
  EXPECT_EQ(batch.inputs[0].first, "features");
  EXPECT_EQ(batch.inputs[0].second.dtype(), DT_DOUBLE);
  EXPECT_EQ(batch.inputs[0].second.matrix<double>()(3, 1), 3.5);
  EXPECT_EQ(batch.inputs[1].first, "ids");
  EXPECT_EQ(batch.inputs[1].second.dtype(), DT_INT32);
  EXPECT_EQ(batch.inputs[1].second.flat<int32_t>()(2), 2);
  EXPECT_EQ(batch.targets.dtype(), DT_FLOAT);
  EXPECT_EQ(batch.targets.flat<float>()(3), 3.0f);
  EXPECT_EQ(batch.weights.dtype(), DT_FLOAT);
  EXPECT_FLOAT_EQ(batch.weights.flat<float>()(1), 1.01f);
  EXPECT_EQ(batch.size, 4);

  // A declared int32 feature (stored as int64) is cast too, and the declaration overrides the
  // signature's dtype for the parse.
  DataSpec declared = spec;
  declared.targets_dtype = DT_INT32;
  declared.features = {{"y", DT_INT32, TensorShape({})}, {"w", DT_FLOAT, TensorShape({})}};
  auto d = OpenTFRecordData(dir + "/d.tfrecord", declared);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE((*d)->StartEpoch(0).ok());
  ASSERT_TRUE(*(*d)->Next(&batch));
  EXPECT_EQ(batch.targets.dtype(), DT_INT32);
  EXPECT_EQ(batch.targets.flat<int32_t>()(3), 3);
}

// The error of the epoch's first batch.
absl::Status FirstBatchError(const std::string& path, const DataSpec& spec) {
  auto source = OpenTFRecordData(path, spec);
  if (!source.ok()) return source.status();
  absl::Status s = (*source)->StartEpoch(0);
  if (!s.ok()) return s;
  Batch batch;
  while (true) {
    auto more = (*source)->Next(&batch);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
  }
}

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::vector<std::string>& words) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s;
  for (const std::string& w : words) EXPECT_NE(s.message().find(w), std::string::npos) << w << " in " << s;
}

TEST(TFRecordDataTest, BadInputErrorsNameIt) {
  const std::string dir = TempDir("bad");
  const std::string good = dir + "/good.tfrecord";
  WriteRecords(good, 0, 40);
  // A corrupt record: a byte of the third record's data flipped (its CRC no longer matches).
  const std::string corrupt = dir + "/corrupt.tfrecord";
  {
    std::string bytes;
    TF_CHECK_OK(ReadFileToString(Env::Default(), good, &bytes));
    bytes[bytes.size() / 2] ^= 0x55;
    TF_CHECK_OK(WriteStringToFile(Env::Default(), corrupt, bytes));
  }
  ExpectError(FirstBatchError(corrupt, XYSpec(4)), absl::StatusCode::kDataLoss, {corrupt, "corrupt"});
  // Among several files, the corrupt one is named.
  ExpectError(FirstBatchError(absl::StrCat(good, ",", corrupt), XYSpec(4)), absl::StatusCode::kDataLoss,
              {"'" + corrupt + "'"});
  // Truncated mid-record.
  const std::string truncated = dir + "/truncated.tfrecord";
  {
    std::string bytes;
    TF_CHECK_OK(ReadFileToString(Env::Default(), good, &bytes));
    TF_CHECK_OK(WriteStringToFile(Env::Default(), truncated, bytes.substr(0, bytes.size() - 7)));
  }
  EXPECT_FALSE(FirstBatchError(truncated, XYSpec(4)).ok());

  // A feature the records lack.
  DataSpec missing = XYSpec(4);
  missing.targets_key = "label";
  missing.features = {{"label", DT_INT64, TensorShape({})}};
  ExpectError(FirstBatchError(good, missing), absl::StatusCode::kInvalidArgument, {"label"});
  // A feature of another shape than declared (x has 2 values per example).
  DataSpec shape = XYSpec(4);
  shape.input_specs = {{DT_FLOAT, PartialTensorShape({-1, -1})}};
  shape.features.push_back({"x", DT_FLOAT, TensorShape({3})});
  ExpectError(FirstBatchError(good, shape), absl::StatusCode::kInvalidArgument, {"x"});
  // A declaration the signature contradicts, refused before reading.
  DataSpec contradicts = XYSpec(4);
  contradicts.features.push_back({"x", DT_FLOAT, TensorShape({3})});
  ExpectError(OpenTFRecordData(good, contradicts).status(), absl::StatusCode::kInvalidArgument,
              {"--features", "'x'", "3", "2"});
  // Targets not declared.
  DataSpec undeclared = XYSpec(4);
  undeclared.features.clear();
  ExpectError(OpenTFRecordData(good, undeclared).status(), absl::StatusCode::kInvalidArgument,
              {"'y'", "--features=y:DTYPE:SHAPE"});
  // An input of unknown shape with no declaration.
  DataSpec unknown = XYSpec(4);
  unknown.input_specs = {{DT_FLOAT, PartialTensorShape({-1, -1})}};
  ExpectError(OpenTFRecordData(good, unknown).status(), absl::StatusCode::kInvalidArgument,
              {"'x'", "--features=x:float32:SHAPE"});
  // A declaration of nothing fed.
  DataSpec extra = XYSpec(4);
  extra.features.push_back({"z", DT_FLOAT, TensorShape({})});
  ExpectError(OpenTFRecordData(good, extra).status(), absl::StatusCode::kInvalidArgument,
              {"option 'features': 'z' is none of the inputs, targets or sample weights (those are: x, y)"});
  // Keys the records lack, each error naming its option and the first record's features.
  DataSpec no_input = XYSpec(4);
  no_input.input_keys = {"nope"};
  ExpectError(OpenTFRecordData(good, no_input).status(), absl::StatusCode::kInvalidArgument,
              {"option 'inputs': the records of " + good + " have no feature 'nope' (the first has: w, x, y)"});
  DataSpec no_weights = XYSpec(4);
  no_weights.weights_key = "weight";
  ExpectError(OpenTFRecordData(good, no_weights).status(), absl::StatusCode::kInvalidArgument,
              {"option 'sample_weights'", "'weight'", "w, x, y"});
  // A glob matching nothing; an unknown compression.
  ExpectError(OpenTFRecordData(dir + "/none-*.tfrecord", XYSpec(4)).status(), absl::StatusCode::kInvalidArgument,
              {"none-*.tfrecord"});
  DataSpec zip = XYSpec(4);
  zip.compression = "ZIP";
  ExpectError(OpenTFRecordData(good, zip).status(), absl::StatusCode::kInvalidArgument, {"ZIP"});
  // After an error the source is still usable from the next epoch.
  auto source = OpenTFRecordData(good, XYSpec(8));
  ASSERT_TRUE(source.ok());
  EXPECT_EQ(Flat(Epoch(source->get(), 0)), Range(40));
}

// Records 0..n-1's first bytes in a file WriteRecords(path, 0, n) wrote (a record is its data and
// 16 bytes of length and CRCs), and that file's size last.
std::vector<int64_t> RecordOffsets(int64_t n) {
  std::vector<int64_t> offsets = {0};
  for (int64_t id = 0; id < n; ++id) offsets.push_back(offsets.back() + 16 + static_cast<int64_t>(ExampleBytes(id).size()));
  return offsets;
}

std::string ReadBytes(const std::string& path) {
  std::string bytes;
  TF_CHECK_OK(ReadFileToString(Env::Default(), path, &bytes));
  return bytes;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  TF_CHECK_OK(WriteStringToFile(Env::Default(), path, bytes));
}

// `bytes` GZIP-compressed, whole (a gzip of a file truncated before it was compressed).
void WriteGzip(const std::string& path, const std::string& bytes) {
  std::unique_ptr<WritableFile> file;
  TF_CHECK_OK(Env::Default()->NewWritableFile(path, &file));
  io::ZlibOutputBuffer out(file.get(), 1 << 16, 1 << 16, io::ZlibCompressionOptions::GZIP());
  TF_CHECK_OK(out.Init());
  TF_CHECK_OK(out.Append(bytes));
  TF_CHECK_OK(out.Close());
  TF_CHECK_OK(file->Close());
}

void ExpectBad(const std::string& path, const std::string& compression, bool data_crcs, int64_t records,
               int64_t offset, bool truncated, const std::string& detail) {
  SCOPED_TRACE(absl::StrCat(path, " data_crcs=", data_crcs));
  auto check = CheckRecordFile(path, compression, data_crcs);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_FALSE(check->ok());
  EXPECT_EQ(check->records, records);
  EXPECT_EQ(check->offset, offset);
  EXPECT_EQ(check->truncated, truncated);
  EXPECT_EQ(check->detail, detail);
}

// TensorFlow's reader takes a file cut inside a record's 12-byte header for one ending there
// (tf.data trains on the records before the cut): the check finds every cut, in the header, the
// data and the trailing CRC, and each CRC that fails, with the records before it.
TEST(TFRecordCheckTest, FindsEachTruncationAndCrcFailure) {
  const std::string dir = TempDir("check");
  const std::string good = dir + "/good.tfrecord";
  WriteRecords(good, 0, 10);
  const std::string bytes = ReadBytes(good);
  const std::vector<int64_t> at = RecordOffsets(10);
  ASSERT_EQ(at.back(), static_cast<int64_t>(bytes.size()));
  const int64_t whole = at[7] - at[6];  // record 6's bytes
  for (bool data_crcs : {false, true}) {
    auto check = CheckRecordFile(good, "", data_crcs);
    ASSERT_TRUE(check.ok()) << check.status();
    EXPECT_TRUE(check->ok()) << check->detail;
    EXPECT_EQ(check->records, 10);
    // Cut inside record 6: its header (5 bytes, all 12), its data, its trailing CRC.
    for (int64_t kept : {int64_t{5}, int64_t{12}, int64_t{20}, whole - 2}) {
      const std::string cut = absl::StrCat(dir, "/cut", kept, ".tfrecord");
      WriteBytes(cut, bytes.substr(0, at[6] + kept));
      const std::string detail = kept < 12 ? absl::StrCat(kept, " of its 12 header bytes")
                                           : absl::StrCat(kept, " of its ", whole, " bytes");
      ExpectBad(cut, "", data_crcs, 6, at[6], true, detail);
    }
    // Cut between records: a whole file of fewer records.
    WriteBytes(dir + "/six.tfrecord", bytes.substr(0, at[6]));
    auto six = CheckRecordFile(dir + "/six.tfrecord", "", data_crcs);
    ASSERT_TRUE(six.ok());
    EXPECT_TRUE(six->ok());
    EXPECT_EQ(six->records, 6);
  }
  // A byte of record 3's length, of its length's CRC: the length's CRC fails, found from the
  // header alone.
  for (int64_t byte : {1, 9}) {
    std::string flipped = bytes;
    flipped[at[3] + byte] ^= 0x10;
    WriteBytes(dir + "/length.tfrecord", flipped);
    for (bool data_crcs : {false, true}) {
      ExpectBad(dir + "/length.tfrecord", "", data_crcs, 3, at[3], false, "the CRC of its length does not match");
    }
  }
  // A byte of record 3's data, of its data's CRC: found reading the data.
  for (int64_t byte : {int64_t{12 + 3}, at[4] - at[3] - 1}) {
    std::string flipped = bytes;
    flipped[at[3] + byte] ^= 0x10;
    WriteBytes(dir + "/data.tfrecord", flipped);
    auto headers = CheckRecordFile(dir + "/data.tfrecord", "", /*data_crcs=*/false);
    ASSERT_TRUE(headers.ok());
    EXPECT_TRUE(headers->ok());
    ExpectBad(dir + "/data.tfrecord", "", true, 3, at[3], false, "the CRC of its data does not match");
  }
  // Compressed, the offsets are the decompressed data's; whole gzip streams of cut records.
  WriteGzip(dir + "/header.tfrecord.gz", bytes.substr(0, at[6] + 5));
  ExpectBad(dir + "/header.tfrecord.gz", "GZIP", false, 6, at[6], true, "5 of its 12 header bytes");
  WriteGzip(dir + "/data.tfrecord.gz", bytes.substr(0, at[6] + 20));
  ExpectBad(dir + "/data.tfrecord.gz", "GZIP", false, 6, at[6], true, absl::StrCat("20 of its ", whole, " bytes"));
  WriteGzip(dir + "/whole.tfrecord.gz", bytes);
  auto gz = CheckRecordFile(dir + "/whole.tfrecord.gz", "GZIP", false);
  ASSERT_TRUE(gz.ok()) << gz.status();
  EXPECT_TRUE(gz->ok()) << gz->detail;
  EXPECT_EQ(gz->records, 10);
  EXPECT_FALSE(CheckRecordFile(dir + "/none.tfrecord", "", false).ok());

  RecordFileCheck cut;
  cut.records = 6;
  cut.offset = 408;
  cut.truncated = true;
  cut.detail = "5 of its 12 header bytes";
  EXPECT_EQ(DescribeRecordProblem("a.tfrecord", "", cut),
            "TFRecord file 'a.tfrecord' is truncated: it ends inside the record at byte offset 408 (5 of its 12 "
            "header bytes), after 6 records read from it");
  RecordFileCheck crc;
  crc.records = 1;
  crc.offset = 26;
  crc.detail = "the CRC of its data does not match";
  EXPECT_EQ(DescribeRecordProblem("a.tfrecord", "GZIP", crc),
            "TFRecord file 'a.tfrecord' has a corrupt record at byte offset 26 of its decompressed data (the CRC of "
            "its data does not match), after 1 record read from it");
}

// A bad file stops training with one error (file, offset, records before it); with
// skip_corrupt_records its records before the bad one are read, the rest skipped, through one
// reader and several.
TEST(TFRecordDataTest, CorruptRecordsAreAnErrorOrSkipped) {
  const std::string dir = TempDir("skip");
  WriteRecords(dir + "/a.tfrecord", 0, 10);
  WriteRecords(dir + "/c.tfrecord", 20, 10);
  WriteRecords(dir + "/d.tfrecord", 30, 10);
  const std::vector<int64_t> at = RecordOffsets(10);
  // b: 10 records cut inside record 6's header; c: record 3's data flipped (ids 20..29 are the
  // same size as 0..9); d: its first record's length flipped.
  WriteRecords(dir + "/b.tfrecord", 10, 10);
  WriteBytes(dir + "/b.tfrecord", ReadBytes(dir + "/b.tfrecord").substr(0, at[6] + 5));
  std::string c = ReadBytes(dir + "/c.tfrecord");
  c[at[3] + 12 + 3] ^= 0x10;
  WriteBytes(dir + "/c.tfrecord", c);
  std::string d = ReadBytes(dir + "/d.tfrecord");
  d[2] ^= 0x10;
  WriteBytes(dir + "/d.tfrecord", d);

  const std::string a = dir + "/a.tfrecord", b = dir + "/b.tfrecord";
  ExpectError(OpenTFRecordData(absl::StrCat(a, ",", b), XYSpec(4)).status(), absl::StatusCode::kDataLoss,
              {absl::StrCat("TFRecord file '", b, "' is truncated: it ends inside the record at byte offset ", at[6],
                            " (5 of its 12 header bytes), after 6 records read from it (option "
                            "'skip_corrupt_records' trains on the records before it and skips the rest of the file)")});
  // A data CRC is found by tf.data, then named the same way.
  ExpectError(FirstBatchError(absl::StrCat(a, ",", dir, "/c.tfrecord"), XYSpec(4)), absl::StatusCode::kDataLoss,
              {absl::StrCat("TFRecord file '", dir, "/c.tfrecord' has a corrupt record at byte offset ", at[3],
                            " (the CRC of its data does not match), after 3 records read from it")});

  std::vector<int64_t> expected = Range(10);
  for (int64_t id : {10, 11, 12, 13, 14, 15, 20, 21, 22}) expected.push_back(id);
  for (int64_t readers : {1, 2}) {
    DataSpec spec = XYSpec(4);
    spec.skip_corrupt_records = true;
    spec.parallel_reads = readers;
    auto source = OpenTFRecordData(dir + "/*.tfrecord", spec);
    ASSERT_TRUE(source.ok()) << source.status();
    EXPECT_EQ(Flat(Epoch(source->get(), 0)), expected) << readers;
    EXPECT_EQ(Flat(Epoch(source->get(), 1)), expected) << readers;
    // One bad file alone, through the interleave that takes its good records.
    spec.parallel_reads = 0;
    auto alone = OpenTFRecordData(b, spec);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ(Flat(Epoch(alone->get(), 0)), std::vector<int64_t>({10, 11, 12, 13, 14, 15}));
  }
}

}  // namespace
}  // namespace tensorflow::tf_ext::train
