// The on-disk cache of cuDNN convolution autotuning results (issue 11): plan key -> the engine that won.
//
// One file per (GPU model, cuDNN version, frontend version), e.g.
// $TR_CACHE_DIR/cudnn_plans-NVIDIA_H200-sm90-cudnn92400-fe13200.tsv (default dir ~/.cache/tr;
// TR_CUDNN_CACHE=0 turns it off). Text: a version line, an identity line, then one `key<TAB>engine` per plan.
// A warm entry lets conv_cudnn.cpp build only that engine's plan instead of building and timing the
// heuristics' first candidates; an entry whose engine the heuristics no longer offer is searched again.
//
// Writes are atomic (a temp file in the same directory, fsync, rename) and merge what other processes wrote
// meanwhile, under an flock on `<file>.lock` (data-parallel ranks tune at the same time). A cache that cannot
// be read, parsed or written is ignored with a warning (take_warnings(): the Python side logs them); nothing
// here throws. No CUDA or cuDNN in this file, so its format is tested without a GPU (bind/ops.cpp hooks); nor
// in conv_plan_cache.cpp's other part, the plans' keys and engine pins declared in conv_cudnn.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tr::native::plan_cache {

using Entries = std::map<std::string, std::string>;  // plan key -> engine name (the frontend's plan tag)

// An engine name "eng<id>_k<knob type>=<value>..." (the frontend's get_engine_tag: the knob types as cuDNN's
// backend numbers them, cudnnBackendKnobType_t, in increasing order) split into its id and knobs. False when
// `name` is not of that form.
bool parse_engine_name(const std::string& name, std::int64_t& id,
                       std::vector<std::pair<std::int64_t, std::int64_t>>& knobs);

// The text of a cache file for `ident` (one line naming the GPU, cuDNN and frontend versions).
std::string format(const std::string& ident, const Entries& entries);

// Reads a cache file's text. False (with `why`) when it is not a cache file for `ident`: then `out` is left
// empty. Malformed entry lines are skipped and described in `why`, still returning true.
bool parse(const std::string& text, const std::string& ident, Entries& out, std::string& why);

// "cudnn_plans-<gpu>-sm<major><minor>-cudnn<version>-fe<version>.tsv", the GPU name reduced to [A-Za-z0-9._-].
std::string file_name(const std::string& gpu, int major, int minor, long cudnn_version, long frontend_version);

// The identity line of that file (unsanitised: two GPU names that sanitise alike do not share entries).
std::string ident(const std::string& gpu, int major, int minor, long cudnn_version, long frontend_version);

// $TR_CACHE_DIR, else $HOME/.cache/tr; "" when TR_CUDNN_CACHE turns the cache off or neither is set.
std::string directory();

// Warnings since the last call (corrupt or unwritable cache, stale entries), oldest first.
void warn(const std::string& message);
std::vector<std::string> take_warnings();

// One cache file, shared by the threads of a process: read on first lookup, written through on each store.
class File {
 public:
  File(std::string path, std::string ident) : path_(std::move(path)), ident_(std::move(ident)) {}

  const std::string& path() const { return path_; }
  bool lookup(const std::string& key, std::string& engine);
  // Records an entry and rewrites the file merged with the entries on disk now; failures only warn.
  void store(const std::string& key, const std::string& engine);
  Entries entries();

 private:
  void load_locked();
  std::string path_, ident_;
  std::mutex mutex_;
  bool loaded_ = false;
  bool write_failed_ = false;  // warned once; later stores keep their entries in memory only
  Entries entries_;            // what this process knows: the file as read, merged, plus its own results
  Entries mine_;               // results this process measured: they win over the file's on a merge
};

// The process's File for `path` (created on first use, lives as long as the process).
File& open(const std::string& path, const std::string& ident);

}  // namespace tr::native::plan_cache
