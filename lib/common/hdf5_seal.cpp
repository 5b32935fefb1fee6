#include "common/hdf5_seal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "common/fnv_hash.h"

namespace fleet {

namespace {

constexpr std::string_view kMagic = "gpufleet-hdf5-seal 1\n";
constexpr unsigned char kHdf5Signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

struct Seal {
  std::uint64_t bytes = 0;
  std::uint64_t digest = 0;
};

std::string seal_text(const Seal& seal) {
  return fmt::format("{}bytes {}\nfnv1a64 {:016x}\n", kMagic, seal.bytes, seal.digest);
}

// Parses "<key> <number>\n" at `pos`, advancing it.
std::optional<std::uint64_t> read_line(std::string_view text, std::size_t& pos, std::string_view key, int base) {
  if (text.substr(pos, key.size() + 1) != std::string(key) + " ") return std::nullopt;
  pos += key.size() + 1;
  const std::size_t end = text.find('\n', pos);
  if (end == std::string_view::npos || end == pos) return std::nullopt;
  std::uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data() + pos, text.data() + end, value, base);
  if (ec != std::errc() || ptr != text.data() + end) return std::nullopt;
  pos = end + 1;
  return value;
}

[[noreturn]] void damaged(const std::filesystem::path& name, const std::string& why) {
  throw InputError(why + "; the file is damaged or was not written whole (write it again)",
                   ErrorContext{name.string(), "", std::nullopt});
}

// Checks a user block against the file's size and digest (computed by the caller).
Hdf5Seal check_block(std::span<const std::byte> block, std::uint64_t size, const std::filesystem::path& name,
                     const std::function<std::uint64_t()>& digest) {
  if (size >= sizeof kHdf5Signature && std::memcmp(block.data(), kHdf5Signature, sizeof kHdf5Signature) == 0)
    return Hdf5Seal::kUnsealed;
  if (size < kHdf5SealBytes) {
    if (size >= kMagic.size() && std::memcmp(block.data(), kMagic.data(), kMagic.size()) == 0)
      damaged(name, "cut short at " + std::to_string(size) + " bytes");
    throw InputError("not an HDF5 file", ErrorContext{name.string(), "", std::nullopt});
  }
  const std::string_view text(reinterpret_cast<const char*>(block.data()), kHdf5SealBytes);
  if (text.substr(0, kMagic.size()) != kMagic) {
    // Not ours: either not HDF5 at all, or HDF5 with someone else's user block.
    bool hdf5_after = size >= kHdf5SealBytes + sizeof kHdf5Signature;
    if (!hdf5_after) throw InputError("not an HDF5 file", ErrorContext{name.string(), "", std::nullopt});
    throw InputError(
        "its first 512 bytes carry no seal: the file is damaged, or another program wrote it "
        "with a user block",
        ErrorContext{name.string(), "", std::nullopt});
  }
  std::size_t pos = kMagic.size();
  const auto bytes = read_line(text, pos, "bytes", 10);
  const auto stored = bytes ? read_line(text, pos, "fnv1a64", 16) : std::nullopt;
  if (!bytes || !stored || text.find_first_not_of('\0', pos) != std::string_view::npos)
    damaged(name, "its seal (the first 512 bytes) is damaged");
  if (*bytes != size)
    damaged(name, "it has " + std::to_string(size) + " bytes where its seal says " + std::to_string(*bytes));
  if (digest() != *stored) damaged(name, "its contents do not match their digest");
  return Hdf5Seal::kVerified;
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// FNV-1a 64 of the file from `offset` to `end`.
std::uint64_t digest_of_file(int fd, std::uint64_t offset, std::uint64_t end, const std::filesystem::path& name) {
  Fnv1a64 hash;
  std::vector<std::byte> buffer(1 << 18);
  while (offset < end) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), end - offset));
    const ssize_t n = ::pread(fd, buffer.data(), want, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw InputError(errno_message("cannot read", n < 0 ? errno : EIO), {name.string(), "", std::nullopt});
    hash.add(std::span<const std::byte>(buffer.data(), static_cast<std::size_t>(n)));
    offset += static_cast<std::uint64_t>(n);
  }
  return hash.value;
}

}  // namespace

void seal_hdf5_file(const std::filesystem::path& path) {
  Fd file{::open(path.c_str(), O_RDWR | O_CLOEXEC)};
  if (file.fd < 0) throw IoError(errno_message("cannot reopen to seal", errno), {path.string(), "", std::nullopt});
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw IoError(errno_message("cannot stat", errno), {path.string(), "", std::nullopt});
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < kHdf5SealBytes)
    throw IoError("internal: HDF5 file without a user block", {path.string(), "", std::nullopt});
  std::string block = seal_text({size, digest_of_file(file.fd, kHdf5SealBytes, size, path)});
  block.resize(kHdf5SealBytes, '\0');
  if (::pwrite(file.fd, block.data(), block.size(), 0) != static_cast<ssize_t>(block.size()))
    throw IoError(errno_message("cannot write the seal", errno), {path.string(), "", std::nullopt});
}

Hdf5Seal verify_hdf5_image(std::span<const std::byte> image, const std::filesystem::path& name) {
  std::vector<std::byte> block(kHdf5SealBytes, std::byte{0});
  std::memcpy(block.data(), image.data(), std::min(image.size(), kHdf5SealBytes));
  return check_block(block, image.size(), name, [&] {
    Fnv1a64 hash;
    hash.add(image.subspan(kHdf5SealBytes));
    return hash.value;
  });
}

Hdf5Seal verify_hdf5_file(const std::filesystem::path& path) {
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw InputError(errno_message("cannot open", errno), {path.string(), "", std::nullopt});
  struct stat st {};
  if (::fstat(file.fd, &st) != 0)
    throw InputError(errno_message("cannot stat", errno), {path.string(), "", std::nullopt});
  const auto size = static_cast<std::uint64_t>(st.st_size);
  std::vector<std::byte> block(kHdf5SealBytes, std::byte{0});
  const ssize_t n = ::pread(file.fd, block.data(), block.size(), 0);
  if (n < 0) throw InputError(errno_message("cannot read", errno), {path.string(), "", std::nullopt});
  return check_block(block, size, path, [&] { return digest_of_file(file.fd, kHdf5SealBytes, size, path); });
}

}  // namespace fleet
