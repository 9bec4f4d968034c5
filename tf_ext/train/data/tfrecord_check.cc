#include "tf_ext/train/data/tfrecord_check.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tensorflow/core/lib/core/raw_coding.h"
#include "tensorflow/core/lib/hash/crc32c.h"
#include "tensorflow/core/lib/io/buffered_inputstream.h"
#include "tensorflow/core/lib/io/inputstream_interface.h"
#include "tensorflow/core/lib/io/random_inputstream.h"
#include "tensorflow/core/lib/io/record_reader.h"
#include "tensorflow/core/lib/io/zlib_inputstream.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/tstring.h"

namespace tensorflow::tf_ext::train {
namespace {

// A record: uint64 length, uint32 masked CRC of the length, the data, uint32 masked CRC of the
// data (tsl/lib/io/record_writer.h).
constexpr int64_t kHeaderBytes = sizeof(uint64_t) + sizeof(uint32_t);
constexpr int64_t kFooterBytes = sizeof(uint32_t);
constexpr int64_t kChunkBytes = 1 << 20;

bool MaskedCrcIs(const char* masked, uint32_t crc) {
  return crc32c::Unmask(core::DecodeFixed32(masked)) == crc;
}

// Up to `n` bytes into `out`: fewer only where the data ends (a stream's OutOfRange).
absl::Status ReadUpTo(io::InputStreamInterface* in, int64_t n, tstring* out) {
  absl::Status s = in->ReadNBytes(n, out);
  return absl::IsOutOfRange(s) ? absl::OkStatus() : s;
}

// The record's data and footer read from `in`, its CRC checked: `check` says what is wrong, if
// anything; chunks of at most kChunkBytes (a length is only as trustworthy as its CRC).
absl::Status CheckData(io::InputStreamInterface* in, uint64_t length, RecordFileCheck* check) {
  tstring chunk;
  uint32_t crc = 0;
  for (uint64_t read = 0; read < length;) {
    const int64_t n = static_cast<int64_t>(std::min<uint64_t>(length - read, kChunkBytes));
    TF_RETURN_IF_ERROR(ReadUpTo(in, n, &chunk));
    crc = crc32c::Extend(crc, chunk.data(), chunk.size());
    read += chunk.size();
    if (static_cast<int64_t>(chunk.size()) < n) {
      check->truncated = true;
      check->detail = absl::StrCat(kHeaderBytes + read, " of its ", kHeaderBytes + length + kFooterBytes, " bytes");
      return absl::OkStatus();
    }
  }
  TF_RETURN_IF_ERROR(ReadUpTo(in, kFooterBytes, &chunk));
  if (static_cast<int64_t>(chunk.size()) < kFooterBytes) {
    check->truncated = true;
    check->detail = absl::StrCat(kHeaderBytes + length + chunk.size(), " of its ",
                                 kHeaderBytes + length + kFooterBytes, " bytes");
  } else if (!MaskedCrcIs(chunk.data(), crc)) {
    check->detail = "the CRC of its data does not match";
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RecordFileCheck> CheckRecordFile(const std::string& file, const std::string& compression,
                                                bool data_crcs) {
  std::unique_ptr<RandomAccessFile> f;
  TF_RETURN_IF_ERROR(Env::Default()->NewRandomAccessFile(file, &f));
  uint64_t size = 0;
  TF_RETURN_IF_ERROR(Env::Default()->GetFileSize(file, &size));
  const bool compressed = !compression.empty();
  data_crcs = data_crcs || compressed;
  auto file_stream = std::make_unique<io::RandomAccessInputStream>(f.get());
  io::RandomAccessInputStream* seekable = file_stream.get();  // header-only reads jump over data
  std::unique_ptr<io::InputStreamInterface> in;
  if (compressed) {
    const io::ZlibCompressionOptions zlib =
        io::RecordReaderOptions::CreateRecordReaderOptions(compression).zlib_options;
    in = std::make_unique<io::ZlibInputStream>(file_stream.release(), zlib.input_buffer_size,
                                               zlib.output_buffer_size, zlib, /*owns_input_stream=*/true);
  } else if (data_crcs) {
    in = std::make_unique<io::BufferedInputStream>(file_stream.release(), kChunkBytes, /*owns_input_stream=*/true);
  } else {
    in = std::move(file_stream);
  }
  RecordFileCheck check;
  tstring header;
  for (;; ++check.records) {
    check.offset = in->Tell();
    TF_RETURN_IF_ERROR(ReadUpTo(in.get(), kHeaderBytes, &header));
    if (header.empty()) return check;  // the end, between records
    if (static_cast<int64_t>(header.size()) < kHeaderBytes) {
      check.truncated = true;
      check.detail = absl::StrCat(header.size(), " of its ", kHeaderBytes, " header bytes");
      return check;
    }
    if (!MaskedCrcIs(header.data() + sizeof(uint64_t), crc32c::Value(header.data(), sizeof(uint64_t)))) {
      check.detail = "the CRC of its length does not match";
      return check;
    }
    const uint64_t length = core::DecodeFixed64(header.data());
    if (!compressed) {
      const uint64_t left = size - static_cast<uint64_t>(check.offset);  // >= kHeaderBytes
      if (length > left - kHeaderBytes || left - kHeaderBytes - length < kFooterBytes) {
        check.truncated = true;
        check.detail = absl::StrCat(left, " of its ", kHeaderBytes + length + kFooterBytes, " bytes");
        return check;
      }
      if (!data_crcs) {
        TF_RETURN_IF_ERROR(seekable->Seek(check.offset + kHeaderBytes + static_cast<int64_t>(length) + kFooterBytes));
        continue;
      }
    }
    TF_RETURN_IF_ERROR(CheckData(in.get(), length, &check));
    if (!check.ok()) return check;
  }
}

std::string DescribeRecordProblem(const std::string& file, const std::string& compression,
                                  const RecordFileCheck& check) {
  const std::string at = absl::StrCat("byte offset ", check.offset, compression.empty() ? "" : " of its decompressed data");
  const std::string read = absl::StrCat("after ", check.records, check.records == 1 ? " record" : " records", " read from it");
  if (check.truncated) {
    return absl::StrCat("TFRecord file '", file, "' is truncated: it ends inside the record at ", at, " (",
                        check.detail, "), ", read);
  }
  // A first record's length that fails its CRC: rather no TFRecord file, or a compressed one.
  const char* hint = check.offset == 0 && compression.empty()
                         ? ": is it a TFRecord file, or one compressed without option 'compression'?"
                         : "";
  return absl::StrCat("TFRecord file '", file, "' has a corrupt record at ", at, " (", check.detail, hint, "), ", read);
}

}  // namespace tensorflow::tf_ext::train
