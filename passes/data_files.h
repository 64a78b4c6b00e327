// The shipped data files, pipelines and hardware profiles, found by name: `-p default`,
// `--hardware h100`, a pass's `hardware=a100` and Python's run_pipeline(gm, "default") all go
// through here. The search rule (docs/passes.md, "Pipelines and profiles by name"):
//
// - A bare name (letters, digits, '-' and '_' only: no '/', no '.json') is NAME.json in the
//   `pipelines/` or `hardware/` folder of the first data directory that has it; anything else is
//   a path, read as given.
// - The data directories, in order: the `configs/` folder of the installed jointfx Python
//   package, found from the binary that holds this code (the Python extension sits in the
//   package folder; the `jointfx` command that pip installs into the environment's scripts folder
//   finds the package through the install schemes' relative layout, as
//   `../lib/python3.11/site-packages/jointfx`), then, in builds from a checkout (not a wheel),
//   the checkout's own `configs/`.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace jfx {

enum class DataKind { Pipeline, Hardware };

// True when `spec` is a bare name: 1 to 64 of [A-Za-z0-9_-]. Such a spec is never a path.
bool isDataName(std::string_view spec);

// The jointfx Python package folders this binary may belong to, in search order; only those
// that exist. Empty for a build from a checkout.
std::vector<std::filesystem::path> installedPackageDirs();

// The data directories (each holding pipelines/ and hardware/), in search order; only those that
// exist.
std::vector<std::filesystem::path> dataDirs();

// The names available for `kind`, sorted, each once (the first directory's file wins).
std::vector<std::string> dataNames(DataKind kind);

// The file NAME stands for; "" when no data directory has it.
std::string findDataFile(DataKind kind, std::string_view name);

// A hardware profile spec as a file path: a bare name is looked up (then, found nowhere, taken
// as a file in the working directory if there is one; else JfxError listing the available
// names), anything else is returned as given.
std::string resolveHardwareProfilePath(const std::string& spec);

// "a100, cpu, h100, h200" and where they were looked for, for error messages.
std::string describeDataNames(DataKind kind);

}  // namespace jfx
