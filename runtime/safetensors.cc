#include "runtime/safetensors.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ir/error.h"
#include "ir/io.h"

namespace jfx::rt {
namespace {

struct DtypeName {
  ScalarType type;
  std::string_view name;
};

constexpr std::array<DtypeName, 18> kNames{{
    {ScalarType::Bool, "BOOL"},
    {ScalarType::UInt8, "U8"},
    {ScalarType::Int8, "I8"},
    {ScalarType::Int16, "I16"},
    {ScalarType::Int32, "I32"},
    {ScalarType::Int64, "I64"},
    {ScalarType::Float16, "F16"},
    {ScalarType::BFloat16, "BF16"},
    {ScalarType::Float32, "F32"},
    {ScalarType::Float64, "F64"},
    {ScalarType::Float8_e4m3fn, "F8_E4M3"},
    {ScalarType::Float8_e5m2, "F8_E5M2"},
    {ScalarType::UInt16, "U16"},
    {ScalarType::UInt32, "U32"},
    {ScalarType::UInt64, "U64"},
    {ScalarType::Complex64, "C64"},
    {ScalarType::Float8_e4m3fnuz, "F8_E4M3FNUZ"},
    {ScalarType::Float8_e5m2fnuz, "F8_E5M2FNUZ"},
}};

// A header larger than this is a corrupt length field, not a real file (Python's reader uses
// the same bound).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

[[noreturn]] void fail(const std::string& file, const std::string& message) {
  SourceLocation loc;
  loc.file = file;
  throw JfxError(loc, message);
}

// numel * item size, or nullopt on overflow or a negative dimension.
std::optional<uint64_t> byteCount(ScalarType t, const std::vector<int64_t>& shape) {
  uint64_t n = static_cast<uint64_t>(dtypeItemSize(t));
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
      return std::nullopt;
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

std::string shapeStr(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::optional<std::string_view> safetensorsDtypeName(ScalarType t) {
  for (const auto& n : kNames)
    if (n.type == t) return n.name;
  return std::nullopt;
}

std::optional<ScalarType> dtypeFromSafetensorsName(std::string_view name) {
  for (const auto& n : kNames)
    if (n.name == name) return n.type;
  return std::nullopt;
}

int64_t SafetensorsEntry::numel() const {
  // parse() checked that the byte count fits, but beside a zero dimension the others may
  // multiply past int64 on their own ([2^31, 2^31, 2, 0]); the answer is 0 anyway.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

namespace {

// One tensor's header entry, checked against the data section of `data_len` bytes.
SafetensorsEntry parseEntry(const std::string& filename, const std::string& name,
                            const nlohmann::json& v, uint64_t data_len) {
  auto where = "tensor " + quoteForMessage(name) + ": ";
  if (!v.is_object()) fail(filename, where + "entry must be an object");
  auto dt = v.find("dtype");
  auto sh = v.find("shape");
  auto off = v.find("data_offsets");
  if (dt == v.end() || !dt->is_string()) fail(filename, where + "missing string 'dtype'");
  if (sh == v.end() || !sh->is_array()) fail(filename, where + "missing array 'shape'");
  if (off == v.end() || !off->is_array() || off->size() != 2)
    fail(filename, where + "'data_offsets' must be [begin, end]");
  SafetensorsEntry e;
  e.name = name;
  auto dtype = dtypeFromSafetensorsName(dt->get<std::string>());
  if (!dtype)
    fail(filename, where + "unsupported dtype " + quoteForMessage(dt->get<std::string>()));
  e.dtype = *dtype;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned()) fail(filename, where + "shape must hold non-negative integers");
    uint64_t dim = d.get<uint64_t>();
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(filename, where + "dimension too large");
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
    fail(filename, where + "data_offsets must be non-negative integers");
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_len)
    fail(filename, where + "data_offsets [" + std::to_string(e.begin) + ", " +
                       std::to_string(e.end) + "] outside the data section (" +
                       std::to_string(data_len) + " bytes)");
  auto want = byteCount(e.dtype, e.shape);
  if (!want || *want != e.end - e.begin)
    fail(filename, where + "shape " + shapeStr(e.shape) + " needs " +
                       (want ? std::to_string(*want) : std::string("too many")) +
                       " bytes but data_offsets span " + std::to_string(e.end - e.begin));
  return e;
}

// Overlapping tensors would alias each other's bytes: reject them like the reference reader.
void rejectOverlaps(const std::string& filename, const std::vector<SafetensorsEntry>& entries) {
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : entries)
    by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end && by_offset[i]->begin != by_offset[i]->end)
      fail(filename, "tensors " + quoteForMessage(by_offset[i - 1]->name) + " and " +
                         quoteForMessage(by_offset[i]->name) + " overlap");
}

}  // namespace

SafetensorsFile SafetensorsFile::read(const std::string& path) {
  // Capped like every input (ir/io.h): a wrong path such as /dev/zero ends with an error.
  return parse(readInputFile(path, "safetensors file", /*binary=*/true), path);
}

SafetensorsFile SafetensorsFile::parse(std::string bytes, const std::string& filename) {
  SafetensorsFile f;
  f.filename_ = filename;
  f.contents_ = std::move(bytes);
  const std::string& c = f.contents_;
  if (c.size() < 8)
    fail(filename,
         "file too short for a safetensors header (" + std::to_string(c.size()) + " bytes)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | static_cast<uint8_t>(c[i]);
  if (header_len > kMaxHeaderBytes || header_len > c.size() - 8)
    fail(filename, "header length " + std::to_string(header_len) + " exceeds the file (" +
                       std::to_string(c.size()) + " bytes)");
  f.data_start_ = 8 + header_len;
  const uint64_t data_len = c.size() - f.data_start_;

  auto header =
      nlohmann::json::parse(c.begin() + 8, c.begin() + static_cast<std::ptrdiff_t>(f.data_start_),
                            nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) fail(filename, "header is not a JSON object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(filename, "__metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(filename, "__metadata__[" + quoteForMessage(m.key()) + "] must be a string");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    f.entries_.push_back(parseEntry(filename, name, v, data_len));
  }

  rejectOverlaps(filename, f.entries_);

  std::sort(f.entries_.begin(), f.entries_.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  auto it =
      std::lower_bound(entries_.begin(), entries_.end(), name,
                       [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

std::string_view SafetensorsFile::bytes(const SafetensorsEntry& e) const {
  return std::string_view(contents_).substr(data_start_ + e.begin, e.end - e.begin);
}

void SafetensorsWriter::add(std::string name, ScalarType dtype, std::vector<int64_t> shape,
                            std::string bytes) {
  if (name.empty() || name == "__metadata__")
    fail("<safetensors writer>", "invalid tensor name " + quoteForMessage(name));
  if (tensors_.count(name))
    fail("<safetensors writer>", "duplicate tensor name " + quoteForMessage(name));
  if (!safetensorsDtypeName(dtype))
    fail("<safetensors writer>", "tensor " + quoteForMessage(name) + ": dtype " +
                                     std::string(dtypeName(dtype)) + " has no safetensors name");
  auto want = byteCount(dtype, shape);
  if (!want || *want != bytes.size())
    fail("<safetensors writer>", "tensor " + quoteForMessage(name) + ": " +
                                     std::to_string(bytes.size()) + " bytes do not match shape " +
                                     shapeStr(shape));
  tensors_.emplace(std::move(name), Pending{dtype, std::move(shape), std::move(bytes)});
}

std::string SafetensorsWriter::serialize() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_)
      meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = std::string(*safetensorsDtypeName(t.dtype));
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + t.bytes.size()};
    header[name] = std::move(e);
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.reserve(8 + h.size() + offset);
  out += h;
  for (const auto& [name, t] : tensors_)
    out += t.bytes;
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  writeFileAtomic(path, serialize());
}

}  // namespace jfx::rt
