// What an output name refers to, decided once before any work, and the names
// of the helper files (temporaries, locks) written beside an output.
//
// The rule: an output that exists and is not a regular file or folder is
// never replaced. Standard output ("-", /dev/stdout, /dev/fd/N) and devices
// or FIFOs that may be written (/dev/null, a named pipe) are written into;
// sockets and block devices are refused. A symbolic link is followed, and
// the file it points to is replaced in its own folder, so the link stays.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace fleet {

/// Removes trailing separators and trailing "." components ("o6/" and
/// "o6/." become "o6"), so that a folder named with a slash is the folder
/// itself, not a place inside it. "/" and "-" stay as they are.
std::filesystem::path normalize_output_path(const std::filesystem::path& path);

/// How an output is written.
enum class OutputKind {
  kReplace,     ///< a regular file, a folder or a new name: built beside it, then renamed over it
  kDescriptor,  ///< a descriptor this process already has open: "-", /dev/stdout, /dev/fd/N
  kStream,      ///< an existing FIFO or character device (/dev/null): opened and written into
};

/// An output name, resolved.
struct OutputTarget {
  OutputKind kind = OutputKind::kReplace;
  std::filesystem::path given;  ///< the name as given (normalised), for messages
  std::filesystem::path path;   ///< kReplace: the real name (links followed); kStream: the device or FIFO
  int descriptor = -1;          ///< kDescriptor: the descriptor to write
  bool exists = false;          ///< kReplace: something is at `path` already
  bool is_folder = false;       ///< kReplace: `path` is an existing folder

  /// True for the outputs that go to this process's standard output.
  bool is_stdout() const { return kind == OutputKind::kDescriptor && descriptor == 1; }
};

/// Resolves an output name: normalises it, follows symbolic links (at most
/// 40) and classifies what is there. UsageError naming the path when it is a
/// socket or a block device, a link to nothing or a loop of links, or names
/// a descriptor this process does not have open.
OutputTarget resolve_output(const std::filesystem::path& path);

/// Longest file name the folder `dir` accepts (NAME_MAX, usually 255).
std::size_t max_name_length(const std::filesystem::path& dir);

/// "." + the target's file name: the start of every helper file's name beside
/// `target` (its temporaries and its lock). When the name is too long to take
/// a suffix within NAME_MAX, its end is replaced by a hash of the whole name,
/// so helper names always fit wherever the output's own name fits.
std::string helper_stem(const std::filesystem::path& target);

/// Start of the names of `target`'s temporary files and folders
/// (helper_stem + ".tmp-"); everything after it is at most 32 characters.
std::string temporary_prefix(const std::filesystem::path& target);

/// Removes every temporary beside `target` (files or folders named
/// temporary_prefix(target)...) that an earlier, killed run left. Call only
/// while this process owns the output (claim_output). Returns how many were removed.
int remove_stale_temporaries(const std::filesystem::path& target);

}  // namespace fleet
