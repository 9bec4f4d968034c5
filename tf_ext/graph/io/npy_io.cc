#include "tf_ext/graph/io/npy_io.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tensorflow/core/platform/env.h"

namespace tensorflow::tf_ext {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

struct DtypeCode {
  const char* code;  // without the byte-order character
  DataType dtype;
};
constexpr DtypeCode kCodes[] = {
    {"f2", DT_HALF},  {"f4", DT_FLOAT}, {"f8", DT_DOUBLE}, {"i1", DT_INT8},  {"i2", DT_INT16},
    {"i4", DT_INT32}, {"i8", DT_INT64}, {"u1", DT_UINT8},  {"u2", DT_UINT16}, {"b1", DT_BOOL},
};

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("not a supported .npy array: ", what));
}

// The value of `key` in the header dict "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".
absl::StatusOr<std::string> HeaderValue(const std::string& header, const std::string& key) {
  const std::string quoted = absl::StrCat("'", key, "':");
  size_t p = header.find(quoted);
  if (p == std::string::npos) return Bad(absl::StrCat("header has no '", key, "'"));
  p += quoted.size();
  while (p < header.size() && header[p] == ' ') ++p;
  size_t end;
  if (header[p] == '(') {
    end = header.find(')', p);
    if (end == std::string::npos) return Bad("unterminated shape");
    return header.substr(p + 1, end - p - 1);
  }
  if (header[p] == '\'') {
    end = header.find('\'', p + 1);
    if (end == std::string::npos) return Bad("unterminated string");
    return header.substr(p + 1, end - p - 1);
  }
  end = header.find_first_of(",}", p);
  return std::string(absl::StripAsciiWhitespace(header.substr(p, end - p)));
}

bool LittleEndianHost() {
  const uint16_t one = 1;
  unsigned char b;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

uint32_t Crc32(const std::string& data) {
  static uint32_t table[256];
  static const bool init = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)init;
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t Le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}
uint16_t Le16(const std::string& s, size_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(s[at]) |
                               (static_cast<unsigned char>(s[at + 1]) << 8));
}
void Put32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void Put16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v & 0xFF));
  s->push_back(static_cast<char>(v >> 8));
}

}  // namespace

absl::StatusOr<Tensor> ParseNpy(const std::string& bytes) {
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0) return Bad("no NUMPY magic");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, header_at;
  if (major == 1) {
    header_len = Le16(bytes, 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad("truncated header");
    header_len = Le32(bytes, 8);
    header_at = 12;
  } else {
    return Bad(absl::StrCat("format version ", major));
  }
  if (bytes.size() < header_at + header_len) return Bad("truncated header");
  const std::string header = bytes.substr(header_at, header_len);
  auto descr = HeaderValue(header, "descr");
  auto fortran = HeaderValue(header, "fortran_order");
  auto shape_text = HeaderValue(header, "shape");
  if (!descr.ok()) return descr.status();
  if (!fortran.ok()) return fortran.status();
  if (!shape_text.ok()) return shape_text.status();
  if (*fortran != "False") return Bad("Fortran-order arrays (use np.ascontiguousarray)");
  if (descr->size() != 3) return Bad(absl::StrCat("dtype '", *descr, "'"));
  const char order = (*descr)[0];
  const std::string code = descr->substr(1);
  if (order == '>' && code[1] != '1') return Bad(absl::StrCat("big-endian dtype '", *descr, "'"));
  DataType dtype = DT_INVALID;
  for (const DtypeCode& c : kCodes) {
    if (code == c.code) dtype = c.dtype;
  }
  if (dtype == DT_INVALID) return Bad(absl::StrCat("dtype '", *descr, "'"));
  TensorShape shape;
  for (absl::string_view d : absl::StrSplit(*shape_text, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(d), &v) || v < 0) {
      return Bad(absl::StrCat("shape (", *shape_text, ")"));
    }
    if (absl::Status s = shape.AddDimWithStatus(v); !s.ok()) return Bad(std::string(s.message()));
  }
  Tensor t(dtype, shape);
  const size_t data_at = header_at + header_len;
  const size_t nbytes = t.TotalBytes();
  if (bytes.size() - data_at != nbytes) {
    return Bad(absl::StrCat("expected ", nbytes, " data bytes for ", *descr, " ",
                            shape.DebugString(), ", found ", bytes.size() - data_at));
  }
  if (!LittleEndianHost()) return Bad("big-endian hosts are not supported");
  if (nbytes > 0) std::memcpy(t.data(), bytes.data() + data_at, nbytes);
  return t;
}

absl::StatusOr<std::string> EncodeNpy(const Tensor& t) {
  const char* code = nullptr;
  for (const DtypeCode& c : kCodes) {
    if (c.dtype == t.dtype()) code = c.code;
  }
  if (code == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", DataTypeString(t.dtype()), " tensors as .npy"));
  }
  // "()", "(5,)", "(2, 3)"
  std::vector<std::string> dims;
  for (int i = 0; i < t.dims(); ++i) dims.push_back(absl::StrCat(t.dim_size(i)));
  std::string shape = absl::StrJoin(dims, ", ");
  if (t.dims() == 1) shape += ",";
  std::string header = absl::StrCat("{'descr': '", code[1] == '1' ? "|" : "<", code,
                                    "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Pad so that the data starts on a 64-byte boundary, header ending in '\n'.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, 6);
  out.push_back('\x01');
  out.push_back('\x00');
  Put16(&out, static_cast<uint16_t>(header.size()));
  out += header;
  out.append(static_cast<const char*>(t.data()), t.TotalBytes());
  return out;
}

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  std::string bytes;
  TF_RETURN_IF_ERROR(ReadFileToString(Env::Default(), path, &bytes));
  auto t = ParseNpy(bytes);
  if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", t.status().message()));
  return t;
}

absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> ReadNpz(const std::string& path) {
  std::string z;
  TF_RETURN_IF_ERROR(ReadFileToString(Env::Default(), path, &z));
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a readable .npz: ", what));
  };
  // End of central directory: the last "PK\5\6" record.
  const size_t eocd = z.rfind(std::string("PK\x05\x06", 4));
  if (eocd == std::string::npos || z.size() < eocd + 22) return bad("no zip directory");
  const uint16_t entries = Le16(z, eocd + 10);
  size_t at = Le32(z, eocd + 16);
  std::vector<std::pair<std::string, Tensor>> arrays;
  for (int e = 0; e < entries; ++e) {
    if (z.size() < at + 46 || Le32(z, at) != 0x02014b50u) return bad("corrupt directory");
    const uint16_t method = Le16(z, at + 10);
    const uint32_t size = Le32(z, at + 20);
    const uint16_t name_len = Le16(z, at + 28), extra_len = Le16(z, at + 30),
                   comment_len = Le16(z, at + 32);
    const uint32_t local = Le32(z, at + 42);
    if (z.size() < at + 46 + name_len) return bad("corrupt directory");
    std::string name = z.substr(at + 46, name_len);
    at += 46 + name_len + extra_len + comment_len;
    if (method != 0) {
      return bad(absl::StrCat("member '", name,
                              "' is compressed (np.savez_compressed); write it with np.savez"));
    }
    if (size == 0xFFFFFFFFu || local == 0xFFFFFFFFu) return bad("zip64 archives are not supported");
    if (z.size() < local + 30 || Le32(z, local) != 0x04034b50u) return bad("corrupt member");
    const size_t data = local + 30 + Le16(z, local + 26) + Le16(z, local + 28);
    if (z.size() < data + size) return bad(absl::StrCat("member '", name, "' is truncated"));
    auto t = ParseNpy(z.substr(data, size));
    if (!t.ok()) return bad(absl::StrCat("member '", name, "': ", t.status().message()));
    if (absl::EndsWith(name, ".npy")) name.resize(name.size() - 4);
    arrays.emplace_back(name, *t);
  }
  return arrays;
}

absl::Status WriteNpz(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& arrays) {
  std::string zip, directory;
  for (const auto& [name, tensor] : arrays) {
    auto npy = EncodeNpy(tensor);
    if (!npy.ok()) return npy.status();
    const std::string member = name + ".npy";
    const uint32_t crc = Crc32(*npy);
    if (npy->size() >= 0xFFFFFFFFu || zip.size() >= 0xFFFFFFFFu) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": arrays over 4 GiB"));
    }
    const uint32_t offset = static_cast<uint32_t>(zip.size());
    std::string common;  // version needed .. name length, shared by both headers
    Put16(&common, 20);  // version needed
    Put16(&common, 0);   // flags
    Put16(&common, 0);   // method: stored
    Put16(&common, 0);   // time
    Put16(&common, 0x21);  // date: 1980-01-01
    Put32(&common, crc);
    Put32(&common, static_cast<uint32_t>(npy->size()));
    Put32(&common, static_cast<uint32_t>(npy->size()));
    Put16(&common, static_cast<uint16_t>(member.size()));
    Put32(&zip, 0x04034b50u);
    zip += common;
    Put16(&zip, 0);  // extra length
    zip += member;
    zip += *npy;
    Put32(&directory, 0x02014b50u);
    Put16(&directory, 20);  // version made by
    directory += common;
    Put16(&directory, 0);  // extra length
    Put16(&directory, 0);  // comment length
    Put16(&directory, 0);  // disk
    Put16(&directory, 0);  // internal attributes
    Put32(&directory, 0);  // external attributes
    Put32(&directory, offset);
    directory += member;
  }
  const uint32_t dir_at = static_cast<uint32_t>(zip.size());
  zip += directory;
  Put32(&zip, 0x06054b50u);
  Put16(&zip, 0);
  Put16(&zip, 0);
  Put16(&zip, static_cast<uint16_t>(arrays.size()));
  Put16(&zip, static_cast<uint16_t>(arrays.size()));
  Put32(&zip, static_cast<uint32_t>(directory.size()));
  Put32(&zip, dir_at);
  Put16(&zip, 0);
  return WriteStringToFile(Env::Default(), path, zip);
}

}  // namespace tensorflow::tf_ext
