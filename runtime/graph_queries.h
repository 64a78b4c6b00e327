// What a rank asks of the graph about its inputs, beyond ir/'s queries (ir/collectives.h,
// ir/fsdp_chains.h): the group a collective runs on whichever way it names it, and the range of
// an integer input.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace jfx::rt {

// The positional group name (ir/collectives.h), else a group_name keyword: the executor binds
// either to the schema, so a rank must find the group both ways.
std::string groupNameOf(const Node* collective);

// Exclusive upper bound for an integer input: an embedding's row count, or the class count of a
// loss it is the target of (unless `embeddings_only`: a loss target may hold its ignore_index).
// 0 when the graph does not say.
int64_t inferIntBound(const Node* ph, bool embeddings_only = false);

}  // namespace jfx::rt
