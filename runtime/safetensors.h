// safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str:
// str}}, then the raw little-endian tensor bytes. Neither Debian nor PyPI ships a C++ reader, and
// the format is small, so this is our own. Torch-free on purpose: the parity checker compares
// files byte for byte without LibTorch; runtime/tensor_io.h converts to and from at::Tensor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/types.h"

namespace jfx::rt {

// "F32", "BF16", "I64", ... <-> our dtypes; nullopt for a dtype the format cannot hold.
std::optional<std::string_view> safetensorsDtypeName(ScalarType t);
std::optional<ScalarType> dtypeFromSafetensorsName(std::string_view name);

struct SafetensorsEntry {
  std::string name;
  ScalarType dtype = ScalarType::Undefined;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Reads and validates a whole file. Throws JfxError naming the file and the problem (truncated
  // file, header too long, bad JSON, unknown dtype, offsets out of range or overlapping, byte count
  // not matching the shape). Never crashes on malformed input.
  static SafetensorsFile read(const std::string& path);
  static SafetensorsFile parse(std::string bytes, const std::string& filename);

  // Entries sorted by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(std::string_view name) const;
  // The raw bytes of one entry.
  std::string_view bytes(const SafetensorsEntry& e) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& filename() const { return filename_; }

 private:
  std::string filename_;
  std::string contents_;
  size_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Collects tensors and writes them in name order (the order Python's safetensors writes), header
// padded with spaces to a multiple of 8 bytes so the data section stays aligned.
class SafetensorsWriter {
 public:
  // Throws JfxError if `name` is taken or the byte count does not match dtype x shape.
  void add(std::string name, ScalarType dtype, std::vector<int64_t> shape, std::string bytes);
  void setMetadata(std::string key, std::string value) {
    metadata_[std::move(key)] = std::move(value);
  }
  std::string serialize() const;
  // Atomic: written beside `path` and renamed into place.
  void write(const std::string& path) const;

 private:
  struct Pending {
    ScalarType dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  std::map<std::string, Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace jfx::rt
