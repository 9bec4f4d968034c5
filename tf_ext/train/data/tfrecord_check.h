// One TFRecord file's framing and checksums, read by tfrecord_data.cc before tf.data reads the
// file. TensorFlow's RecordReader takes a file that ends inside a record's 12-byte header for
// one that ends there (OutOfRange, which TFRecordDataset treats as the file's end): a file cut
// there trains on the records before the cut, silently. This reader tells that apart, and says
// where a file goes bad and how many good records come before, for one error (or, with
// DataSpec::skip_corrupt_records, one warning) naming all three. Tested by //tests:fit_data_test.
#ifndef TF_EXT_TRAIN_DATA_TFRECORD_CHECK_H_
#define TF_EXT_TRAIN_DATA_TFRECORD_CHECK_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tensorflow::tf_ext::train {

struct RecordFileCheck {
  int64_t records = 0;  // the good records before the bad one (every record of a good file)
  // The bad record's first byte: in the file, or in its decompressed data with compression.
  int64_t offset = 0;
  bool truncated = false;  // the file ends inside the record; else its length or data's CRC fails
  std::string detail;      // "3 of its 12 header bytes", "the CRC of its data does not match"
  bool ok() const { return detail.empty(); }
};

// Reads `file` record by record (`compression` "", GZIP or ZLIB). Uncompressed and without
// `data_crcs`, only each record's header is read (its length and the length's CRC) and the
// file's size is compared with the records' ends: a truncated file or a corrupt length is found
// without reading the data. With `data_crcs` (always with compression, whose data must be
// decompressed anyway) each record's data is read and its CRC checked too, in chunks of at most
// 1 MiB. An error only where the file cannot be read at all.
absl::StatusOr<RecordFileCheck> CheckRecordFile(const std::string& file, const std::string& compression,
                                                bool data_crcs);

// "TFRecord file 'F' is truncated: it ends inside the record at byte offset 52 (3 of its 12
// header bytes), after 2 records read from it", or "TFRecord file 'F' has a corrupt record at
// byte offset 26 (the CRC of its data does not match), after 1 record read from it". For a bad
// `check` only.
std::string DescribeRecordProblem(const std::string& file, const std::string& compression,
                                  const RecordFileCheck& check);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_DATA_TFRECORD_CHECK_H_
