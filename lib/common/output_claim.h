// One writer per output. A command that writes an output holds an exclusive
// flock(2) on a lock file beside it for as long as it runs, so a second
// command given the same output fails at once with one clear error instead
// of silently replacing the first one's result when both finish. The lock
// file (helper_stem + ".lock") is removed when the command ends, by a signal
// too; one left by a killed command is taken over by the next.
#pragma once

#include <filesystem>

namespace fleet {

/// Claims the output `target` (a real path: links followed, see
/// resolve_output) for this process until it exits. Claiming a target this
/// process already holds does nothing. The first claim also removes the
/// temporaries that a killed run left beside it (remove_stale_temporaries).
/// UsageError naming the output and the holder's process id when another
/// process holds it. On file systems without flock (some network mounts) the
/// output is written unclaimed.
void claim_output(const std::filesystem::path& target);

/// Releases this process's claims and removes their lock files. Runs at exit
/// by itself; for tests and for processes that hand an output to another.
void release_output_claims() noexcept;

}  // namespace fleet
