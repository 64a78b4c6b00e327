// What a collective node says about itself: its kind, the process group it runs on and that
// group's size. The op table (ir/op_info.h) gives the argument positions; these read them. Passes,
// analyses and the runtime all ask these questions, so they live beside the graph rather than in
// any one of them.
#pragma once

#include <cstdint>
#include <string_view>

#include "ir/graph.h"

namespace jfx {

// The node's collective kind; CollectiveKind::None for a node that is not a collective.
CollectiveKind collectiveKind(const Node& n);

// The group name a collective runs on: its group_name argument when it is a positional string,
// "" otherwise (absent, or given as a keyword).
std::string_view collectiveGroupName(const Node& n);

// The group size of a collective: its group_size argument, else the header's size for its group
// name, else 1.
int64_t collectiveGroupSize(const Node& n, const Graph& g);

}  // namespace jfx
