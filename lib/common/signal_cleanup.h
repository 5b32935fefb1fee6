// Temporaries removed when a signal ends the process. A command stopped by
// SIGINT (Ctrl-C), SIGTERM (kill, scancel) or SIGHUP (a closed terminal)
// does not unwind its stack, so destructors never remove the temporary
// files and folders its writers made; this handler does, with
// async-signal-safe system calls only, then lets the signal end the process
// as it would have (the shell sees 128 + the signal's number).
//
// A program that handles one of these signals itself (a server that drains,
// a trainer that checkpoints) installs its own handler afterwards and cleans
// up by unwinding as usual.
#pragma once

#include <filesystem>

namespace fleet {

/// Installs the removing handler for SIGINT, SIGTERM and SIGHUP where the
/// signal is not ignored (a process started with SIGHUP ignored, by nohup,
/// keeps ignoring it). Idempotent; every program calls it at start.
void install_cleanup_on_signal();

/// While alive, `path` (a file or a folder with everything in it) is removed
/// if a signal ends this process. Only the process that registered a path
/// removes it: a child forked before exec does not touch its parent's files.
/// Registration never fails; past the registry's capacity (256 paths at
/// once) a path is simply not covered.
class RemoveOnSignal {
 public:
  RemoveOnSignal() = default;
  explicit RemoveOnSignal(const std::filesystem::path& path);
  ~RemoveOnSignal();
  RemoveOnSignal(RemoveOnSignal&& other) noexcept;
  RemoveOnSignal& operator=(RemoveOnSignal&& other) noexcept;
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;

  /// Stops covering the path (it was renamed into place or removed).
  void release() noexcept;

 private:
  int slot_ = -1;
};

}  // namespace fleet
