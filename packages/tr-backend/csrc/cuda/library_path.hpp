// Where the run-time loaders (cuBLASLt, NCCL, cuDNN) look for their library, in one order for all three.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

namespace tr::native::cuda {

// The file named by `env_var`, then `added` (the wheels' libraries Python found), then `built` (the one the
// build found; "" if none), then `system_names` for the system loader (LD_LIBRARY_PATH, ld.so.cache, or a
// copy another library such as torch already loaded).
inline std::vector<std::string> library_candidates(const char* env_var, const std::vector<std::string>& added,
                                                   const std::string& built,
                                                   const std::vector<std::string>& system_names) {
  std::vector<std::string> out;
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') out.emplace_back(env);
  out.insert(out.end(), added.begin(), added.end());
  if (!built.empty()) out.push_back(built);
  out.insert(out.end(), system_names.begin(), system_names.end());
  return out;
}

}  // namespace tr::native::cuda
