#include "passes/pass.h"

#include <set>

#include "ir/error.h"

namespace jfx {

void Pass::configure(const PassOptions& values) {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : values.values()) {
    bool declared = false;
    for (const OptionBase* o : options_)
      declared = declared || o->name() == key;
    if (!declared) unknown.push_back(key);
  }
  if (!unknown.empty()) {
    std::string keys;
    for (size_t i = 0; i < unknown.size() && i < 10; ++i)
      keys += (i ? ", " : "") + quoteForMessage(unknown[i]);
    if (unknown.size() > 10) keys += " and " + std::to_string(unknown.size() - 10) + " more";
    std::set<std::string_view> names;
    for (const OptionBase* o : options_)
      names.insert(o->name());
    std::string known;
    for (std::string_view n : names)
      known += (known.empty() ? "" : ", ") + std::string(n);
    throw JfxError({}, "pass " + quoteForMessage(name_) + " has no option " + keys +
                           (known.empty() ? " (it takes none)" : " (it takes: " + known + ")"));
  }
  try {
    // In declaration order, so the first bad value reported is the first the pass declares.
    for (OptionBase* o : options_)
      if (auto it = values.values().find(std::string(o->name())); it != values.values().end())
        o->set(it->second);
    initialize();
  } catch (const JfxError& e) {
    // An error located in a file an option names (a hardware profile) is about that file.
    if (!e.location().file.empty()) throw;
    throw JfxError(e.location(), "pass " + quoteForMessage(name_) + ": " + e.message());
  }
}

std::string PassOptions::str() const {
  if (values_.empty()) return "";
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : values_) {
    s += (first ? "" : ", ") + k + "=" + v;
    first = false;
  }
  return s + "}";
}

}  // namespace jfx
