// Where a writer hands its output over in pieces: a file being written (saveGraph streams a graph
// into its temporary file instead of building the whole document in memory first), or a string.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace jfx {

using ChunkSink = std::function<void(std::string_view)>;

// Writers that stream hand over pieces of about this size.
inline constexpr size_t kSinkChunkBytes = size_t{1} << 20;

}  // namespace jfx
