// The cuDNN plans' identity, without CUDA or cuDNN (see conv_plan_cache.hpp): plan keys, engine names and pins
// (declared in conv_cudnn.hpp), and the plan cache's file format with its atomic, merged writes.
#include "ops/conv_plan_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <system_error>
#include <thread>
#include <utility>

#include "native/errors.hpp"
#include "ops/conv_cudnn.hpp"

namespace tr::native {

namespace {

std::mutex g_pin_mutex;
std::map<std::string, std::string> g_pins;  // plan key -> engine name or "direct"

// conv_plan_key's geometry fields, in key order: each "<name><value>" after the direction.
constexpr const char* kGeoFields[] = {"n", "h", "w", "c", "k", "r", "s", "sh", "sw", "ph", "pw"};

// Whether `key` has conv_plan_key's form (a pin under any other key would silently never match a plan).
bool valid_plan_key(const std::string& key) {
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    const std::size_t end = key.find(':', start);
    parts.push_back(key.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  const std::size_t fields = 1 + std::size(kGeoFields) + 2;  // direction, geometry, dtypes, tf32
  if (parts.size() != fields && parts.size() != fields + 1) return false;  // + 1: groups
  if (parts[0] != "fprop" && parts[0] != "dgrad" && parts[0] != "wgrad") return false;
  std::size_t i = 1;
  auto field = [&](const std::string& name) {
    const std::string& p = parts[i++];
    if (p.compare(0, name.size(), name) != 0 || p.size() == name.size()) return false;
    for (std::size_t j = name.size(); j < p.size(); ++j) {
      if (p[j] < '0' || p[j] > '9') return false;
    }
    return p[name.size()] != '0' || p.size() == name.size() + 1;  // as std::to_string prints it
  };
  for (const char* n : kGeoFields) {
    if (!field(n)) return false;
  }
  if (parts.size() == fields + 1 && !field("g")) return false;
  const std::string& types = parts[i++];
  if (std::count(types.begin(), types.end(), ',') != 2 || types.front() == ',' || types.back() == ',' ||
      types.find(",,") != std::string::npos) {
    return false;
  }
  return parts[i] == "tf32=0" || parts[i] == "tf32=1";
}

}  // namespace

const char* conv_dir_name(ConvDir d) { return d == ConvDir::Fwd ? "fprop" : d == ConvDir::Dgrad ? "dgrad" : "wgrad"; }

std::string conv_plan_key(ConvDir d, const ConvGeo& g, DT a, DT b, DT out, bool tf32) {
  std::string k = conv_dir_name(d);
  const int values[] = {g.n, g.h, g.w, g.c, g.k, g.r, g.s, g.sh, g.sw, g.ph, g.pw};
  static_assert(sizeof(values) / sizeof(values[0]) == std::size(kGeoFields));
  for (std::size_t i = 0; i < std::size(kGeoFields); ++i) {
    k += std::string(":") + kGeoFields[i] + std::to_string(values[i]);
  }
  if (g.groups != 1) k += ":g" + std::to_string(g.groups);  // ungrouped keys as before: their entries stay valid
  k += std::string(":") + dtype_name(a) + "," + dtype_name(b) + "," + dtype_name(out);
  return k + (tf32 ? ":tf32=1" : ":tf32=0");
}

void set_conv_pins(std::map<std::string, std::string> pins) {
  for (const auto& [key, engine] : pins) {
    if (!valid_plan_key(key)) {
      fail(ErrorKind::BadArgument, "cuDNN engine pin: '" + key + "' is not a convolution plan key (expected "
                                   "'fprop|dgrad|wgrad:n<N>:h<H>:w<W>:c<C>:k<K>:r<R>:s<S>:sh<>:sw<>:ph<>:pw<>[:g<G>]:"
                                   "<dtype>,<dtype>,<dtype>:tf32=0|1', as conv_op_plans reports them)");
    }
    std::int64_t id = 0;
    std::vector<std::pair<std::int64_t, std::int64_t>> knobs;
    if (engine != "direct" && !plan_cache::parse_engine_name(engine, id, knobs)) {
      fail(ErrorKind::BadArgument, "cuDNN engine pin for " + key + ": '" + engine + "' is neither 'direct' nor a "
                                   "cuDNN frontend engine name ('eng<id>_k<knob>=<value>...')");
    }
  }
  std::lock_guard<std::mutex> lock(g_pin_mutex);
  g_pins = std::move(pins);
}

std::map<std::string, std::string> conv_pins() {
  std::lock_guard<std::mutex> lock(g_pin_mutex);
  return g_pins;
}

std::string conv_pin(const std::string& key) {
  std::lock_guard<std::mutex> lock(g_pin_mutex);
  auto it = g_pins.find(key);
  return it == g_pins.end() ? std::string() : it->second;
}

}  // namespace tr::native

namespace tr::native::plan_cache {

namespace {

constexpr const char* kMagic = "# tr cuDNN plan cache v1";
constexpr std::size_t kMaxFileBytes = std::size_t(64) << 20;  // far beyond any real cache: larger is garbage
constexpr std::size_t kMaxWarnings = 100;                      // kept until Python takes them

std::mutex g_warn_mutex;
std::deque<std::string> g_warnings;

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// Keys and engine names are single TSV fields: printable ASCII, no tab.
bool field_ok(const std::string& s) {
  if (s.empty()) return false;
  for (char ch : s) {
    if (ch < 0x20 || ch > 0x7e) return false;
  }
  return true;
}

std::string one_line(const std::string& s) {
  std::string out = s;
  for (char& ch : out) {
    if (ch < 0x20 || ch > 0x7e) ch = '?';
  }
  return out;
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// mkdir -p; false with `why` when a component cannot be made.
bool make_dirs(const std::string& dir, std::string& why) {
  for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      why = "cannot create directory " + prefix + ": " + errno_text(errno);
      return false;
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    why = dir + " is not a directory";
    return false;
  }
  return true;
}

enum class Read { Ok, Absent, Failed };

Read read_file(const std::string& path, std::string& text, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Read::Absent;
    why = errno_text(errno);
    return Read::Failed;
  }
  text.clear();
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = errno_text(errno);
      ::close(fd);
      return Read::Failed;
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxFileBytes) {
      why = "larger than " + std::to_string(kMaxFileBytes >> 20) + " MiB";
      ::close(fd);
      return Read::Failed;
    }
  }
  ::close(fd);
  return Read::Ok;
}

// A temp file in the target's directory, fsynced, renamed over it: readers see the old file or the new one,
// never a torn one, even if this process dies mid-write.
bool write_atomic(const std::string& path, const std::string& text, std::string& why) {
  static std::atomic<unsigned> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    why = "cannot create " + tmp + ": " + errno_text(errno);
    return false;
  }
  auto give_up = [&](const std::string& what) {
    why = what + " " + tmp + ": " + errno_text(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return false;
  };
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return give_up("cannot write");
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) return give_up("cannot fsync");
  if (::close(fd) != 0) {
    why = "cannot close " + tmp + ": " + errno_text(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    why = "cannot rename " + tmp + " to " + path + ": " + errno_text(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  // the rename is durable once the directory is synced (best effort: some filesystems refuse)
  const int dfd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return true;
}

// An exclusive flock on `<cache>.lock` around read-merge-write, so two ranks storing at once both keep their
// entries. Waits at most 10 s (a holder only reads and writes a small file); without it the write is still
// atomic, only a concurrent writer's new entries may be lost. The lock file is never deleted: deleting it
// would let two processes lock different inodes.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      why_ = "cannot open " + path + ": " + errno_text(errno);
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if ((err == EWOULDBLOCK || err == EINTR) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      why_ = err == EWOULDBLOCK ? path + " is still locked by another process after 10 s"
                                : "cannot lock " + path + ": " + errno_text(err);
      ::close(fd_);
      fd_ = -1;
      return;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }
  const std::string& why() const { return why_; }

 private:
  int fd_ = -1;
  std::string why_;
};

// An unsigned (or, with `sign`, signed) decimal at `pos` of at most 18 digits; `pos` moves past it.
bool read_int(const std::string& s, std::size_t& pos, bool sign, std::int64_t& value) {
  const std::size_t start = pos;
  if (sign && pos < s.size() && s[pos] == '-') ++pos;
  const std::size_t first = pos;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
  if (pos == first || pos - first > 18) return false;
  value = std::stoll(s.substr(start, pos - start));
  return true;
}

}  // namespace

bool parse_engine_name(const std::string& name, std::int64_t& id,
                       std::vector<std::pair<std::int64_t, std::int64_t>>& knobs) {
  knobs.clear();
  if (name.compare(0, 3, "eng") != 0) return false;
  std::size_t pos = 3;
  if (!read_int(name, pos, false, id)) return false;
  while (pos < name.size()) {
    std::int64_t type = 0, value = 0;
    if (name.compare(pos, 2, "_k") != 0) return false;
    pos += 2;
    if (!read_int(name, pos, false, type) || pos >= name.size() || name[pos] != '=') return false;
    ++pos;
    if (!read_int(name, pos, true, value)) return false;
    if (!knobs.empty() && type <= knobs.back().first) return false;  // the frontend's names sort knobs by type
    knobs.emplace_back(type, value);
  }
  // canonical only (no leading zeros, no "-0"): the name must be the one the frontend would print for the plan,
  // else a pin that parses would never match the plan it builds
  std::string again = "eng" + std::to_string(id);
  for (const auto& [type, value] : knobs) again += "_k" + std::to_string(type) + "=" + std::to_string(value);
  return again == name;
}

std::string format(const std::string& ident, const Entries& entries) {
  std::string out = std::string(kMagic) + " (plan key<TAB>cuDNN engine; written by tr-backend, safe to delete)\n";
  out += "# " + one_line(ident) + "\n";
  for (const auto& [key, engine] : entries) out += key + "\t" + engine + "\n";
  return out;
}

bool parse(const std::string& text, const std::string& ident, Entries& out, std::string& why) {
  out.clear();
  why.clear();
  std::size_t pos = 0;
  auto next_line = [&](std::string& line) {
    if (pos >= text.size()) return false;
    const auto end = text.find('\n', pos);
    line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? text.size() : end + 1;
    return true;
  };
  std::string line;
  if (!next_line(line) || line.compare(0, std::char_traits<char>::length(kMagic), kMagic) != 0) {
    why = "its first line is not '" + std::string(kMagic) + " ...'";
    return false;
  }
  const std::string want = "# " + one_line(ident);
  if (!next_line(line) || line != want) {
    why = "its second line is '" + one_line(line.substr(0, 200)) + "', expected '" + want + "'";
    return false;
  }
  std::size_t bad = 0, lineno = 2, first_bad = 0;
  while (next_line(line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    const std::string key = tab == std::string::npos ? "" : line.substr(0, tab);
    const std::string engine = tab == std::string::npos ? "" : line.substr(tab + 1);
    if (!field_ok(key) || !field_ok(engine)) {  // field_ok rejects a second tab and a CR
      if (bad++ == 0) first_bad = lineno;
      continue;
    }
    out[key] = engine;
  }
  if (bad > 0) {
    why = std::to_string(bad) + " malformed line(s) skipped, the first at line " + std::to_string(first_bad);
  }
  return true;
}

std::string file_name(const std::string& gpu, int major, int minor, long cudnn_version, long frontend_version) {
  std::string g;
  for (char ch : gpu) {
    const bool keep = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                      ch == '.' || ch == '-';
    if (keep) {
      g += ch;
    } else if (!g.empty() && g.back() != '_') {
      g += '_';
    }
  }
  while (!g.empty() && g.back() == '_') g.pop_back();
  if (g.empty()) g = "gpu";
  return "cudnn_plans-" + g + "-sm" + std::to_string(major) + std::to_string(minor) + "-cudnn" +
         std::to_string(cudnn_version) + "-fe" + std::to_string(frontend_version) + ".tsv";
}

std::string ident(const std::string& gpu, int major, int minor, long cudnn_version, long frontend_version) {
  return "gpu=" + one_line(gpu) + " sm" + std::to_string(major) + std::to_string(minor) +
         " cudnn=" + std::to_string(cudnn_version) + " frontend=" + std::to_string(frontend_version);
}

std::string directory() {
  if (const char* off = std::getenv("TR_CUDNN_CACHE")) {
    std::string v;
    for (const char* c = off; *c != '\0'; ++c) {
      if (*c != ' ') v += static_cast<char>(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    }
    if (v == "0" || v == "false" || v == "no" || v == "off") return "";
  }
  if (const char* dir = std::getenv("TR_CACHE_DIR"); dir != nullptr && *dir != '\0') return dir;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') return std::string(home) + "/.cache/tr";
  return "";
}

void warn(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_warn_mutex);
  if (g_warnings.size() >= kMaxWarnings) g_warnings.pop_front();
  g_warnings.push_back(message);
}

std::vector<std::string> take_warnings() {
  std::lock_guard<std::mutex> lock(g_warn_mutex);
  std::vector<std::string> out(g_warnings.begin(), g_warnings.end());
  g_warnings.clear();
  return out;
}

void File::load_locked() {
  loaded_ = true;
  std::string text, why;
  const Read r = read_file(path_, text, why);
  if (r == Read::Absent) return;
  if (r == Read::Failed) {
    warn("cuDNN plan cache " + path_ + " cannot be read (" + why + "): ignored, every plan is searched");
    return;
  }
  Entries got;
  if (!parse(text, ident_, got, why)) {
    warn("cuDNN plan cache " + path_ + " is not one for " + ident_ + " (" + why + "): ignored, it will be rewritten");
    return;
  }
  if (!why.empty()) warn("cuDNN plan cache " + path_ + ": " + why);
  entries_ = std::move(got);
}

bool File::lookup(const std::string& key, std::string& engine) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!loaded_) load_locked();
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  engine = it->second;
  return true;
}

Entries File::entries() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!loaded_) load_locked();
  return entries_;
}

void File::store(const std::string& key, const std::string& engine) {
  if (!field_ok(key) || !field_ok(engine)) {
    warn("cuDNN plan cache: entry '" + one_line(key) + "' -> '" + one_line(engine) +
         "' is not storable (empty, or not printable ASCII): not cached");
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!loaded_) load_locked();
  entries_[key] = engine;
  mine_[key] = engine;
  if (write_failed_) return;
  std::string why;
  if (!make_dirs(parent_dir(path_), why)) {
    write_failed_ = true;
    warn("cuDNN plan cache " + path_ + " cannot be written (" + why + "): results are kept for this process only");
    return;
  }
  FileLock file_lock(path_ + ".lock");
  if (!file_lock.held()) {
    warn("cuDNN plan cache: " + file_lock.why() + "; writing " + path_ +
         " without the lock (entries another process writes at this moment may be lost)");
  }
  // merge: entries other processes wrote since we read the file; ours win where both measured a key
  std::string text;
  if (read_file(path_, text, why) == Read::Ok) {
    Entries disk;
    if (parse(text, ident_, disk, why)) {
      for (auto& [k, v] : disk) {
        if (mine_.count(k) == 0) entries_[k] = std::move(v);
      }
    }
  }
  if (!write_atomic(path_, format(ident_, entries_), why)) {
    write_failed_ = true;
    warn("cuDNN plan cache " + path_ + " cannot be written (" + why + "): results are kept for this process only");
  }
}

File& open(const std::string& path, const std::string& ident) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<File>> files;
  std::lock_guard<std::mutex> lock(mutex);
  auto& f = files[path];
  if (f == nullptr) f = std::make_unique<File>(path, ident);
  return *f;
}

}  // namespace tr::native::plan_cache
