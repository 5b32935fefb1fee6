#include "common/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <optional>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/file_io.h"
#include "common/fnv_hash.h"

namespace fleet {

namespace fs = std::filesystem;

namespace {

// Room left after a helper stem: ".tmp-" plus a checkpoint staging's token
// and step (".tmp-0123abcd-9223372036854775807"), or ".lock".
constexpr std::size_t kSuffixRoom = 40;
constexpr int kMaxLinks = 40;  // as the kernel's own limit on following links

[[noreturn]] void refuse(const fs::path& given, const std::string& why) {
  throw UsageError(why, ErrorContext{given.string(), "", std::nullopt});
}

// The descriptor a name stands for, when it is one of the names Linux gives
// a process's open descriptors; nullopt otherwise.
std::optional<int> descriptor_named(const fs::path& path) {
  const std::string text = path.string();
  if (text == "/dev/stdout") return 1;
  if (text == "/dev/stderr") return 2;
  const std::string own = "/proc/" + std::to_string(::getpid()) + "/fd/";
  for (const std::string& prefix : {std::string("/dev/fd/"), std::string("/proc/self/fd/"), own}) {
    if (text.rfind(prefix, 0) != 0) continue;
    int fd = -1;
    const char* begin = text.data() + prefix.size();
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(begin, end, fd);
    if (ec == std::errc() && ptr == end && begin != end) return fd;
  }
  return std::nullopt;
}

}  // namespace

fs::path normalize_output_path(const fs::path& path) {
  std::string text = path.string();
  if (text == "-" || text.empty()) return path;
  for (;;) {
    if (text.size() > 1 && text.back() == '/') {
      text.pop_back();
    } else if (text.size() > 2 && text.compare(text.size() - 2, 2, "/.") == 0) {
      text.resize(text.size() - 2);
      if (text.empty()) text = "/";
    } else {
      break;
    }
  }
  return text;
}

OutputTarget resolve_output(const fs::path& path) {
  OutputTarget out;
  out.given = normalize_output_path(path);
  if (is_stdio(out.given)) {
    out.kind = OutputKind::kDescriptor;
    out.descriptor = STDOUT_FILENO;
    return out;
  }
  fs::path current = out.given;
  for (int hop = 0; hop <= kMaxLinks; ++hop) {
    if (auto fd = descriptor_named(current)) {
      if (::fcntl(*fd, F_GETFD) < 0)
        refuse(out.given, "names descriptor " + std::to_string(*fd) + ", which is not open");
      out.kind = OutputKind::kDescriptor;
      out.descriptor = *fd;
      return out;
    }
    struct stat st {};
    if (::lstat(current.c_str(), &st) != 0) {
      if (errno == ENAMETOOLONG)
        refuse(out.given, "the name is " + std::to_string(current.filename().string().size()) +
                              " bytes long; the folder accepts at most " +
                              std::to_string(max_name_length(current.parent_path())));
      if (errno != ENOENT) refuse(out.given, errno_message("cannot examine", errno));
      if (current != out.given)
        refuse(out.given, "is a symbolic link to " + current.string() + ", which does not exist");
      out.path = current;
      return out;  // a new name
    }
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      const fs::path link = fs::read_symlink(current, ec);
      if (ec) refuse(out.given, "cannot read the symbolic link " + current.string() + ": " + ec.message());
      current = link.is_absolute() ? link : current.parent_path() / link;
      continue;
    }
    if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
      out.path = current;
      out.exists = true;
      out.is_folder = S_ISDIR(st.st_mode);
      return out;
    }
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      out.kind = OutputKind::kStream;
      out.path = current;
      return out;
    }
    refuse(out.given, S_ISSOCK(st.st_mode) ? "is a socket; an output must be a file, a pipe or a character device"
                                           : "is a block device; refusing to write over it");
  }
  refuse(out.given, "has more than " + std::to_string(kMaxLinks) + " symbolic links in a row (a loop?)");
}

std::size_t max_name_length(const fs::path& dir) {
  const long n = ::pathconf(dir.empty() ? "." : dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<std::size_t>(n) : NAME_MAX;
}

std::string helper_stem(const fs::path& target) {
  const std::string name = target.filename().string();
  const std::size_t limit = NAME_MAX;  // the common limit; helper names never rely on a larger one
  if (1 + name.size() + kSuffixRoom <= limit) return "." + name;
  Fnv1a64 hash;
  hash.add(std::as_bytes(std::span<const char>(name.data(), name.size())));
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(hash.value));
  // "." + kept + "~" + 16 hex digits + room for the suffix.
  std::size_t keep = limit - kSuffixRoom - 1 - 1 - 16;
  // Never cut a UTF-8 sequence in two: back off over continuation bytes.
  while (keep > 0 && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;
  return "." + name.substr(0, keep) + "~" + digest;
}

std::string temporary_prefix(const fs::path& target) { return helper_stem(target) + ".tmp-"; }

int remove_stale_temporaries(const fs::path& target) {
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = temporary_prefix(target);
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    // What follows the prefix is mkstemp's or a staging's letters, digits and dashes
    // (an output named "a.tmp-b" has temporaries of its own, which are not "a"'s).
    const std::string rest = name.substr(prefix.size());
    if (rest.size() > kSuffixRoom ||
        rest.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
      continue;
    std::error_code remove_ec;
    if (fs::remove_all(it->path(), remove_ec) > 0) {
      spdlog::info("removed {}, left by an earlier run that was stopped", it->path().string());
      ++removed;
    }
  }
  return removed;
}

}  // namespace fleet
