#include "cli/cli.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <streambuf>

#include <fmt/format.h>

#include "common/cpu_isa.h"
#include "common/error.h"
#include "common/output_path.h"
#include "common/signal_cleanup.h"
#include "fleet/config.h"

namespace fleet {

Tool::Tool(std::string name, std::string description)
    : name_(std::move(name)), app_(std::make_unique<CLI::App>(std::move(description), name_)) {
  app_->set_version_flag(
      "--version", [this] { return version_text(); }, "Print the version and build configuration, then exit");
  app_->add_flag("-v,--verbose", log_options_.verbosity, "More log output (-v debug, -vv trace)");
  app_->add_flag("-q,--quiet", log_options_.quiet, "Only warnings and errors; no progress bars");
  app_->add_option("--log-level", log_options_.level,
                   std::string("Log level: trace, debug, info, warn, error, critical, off "
                               "(default info, or $") +
                       kLogLevelEnvVar + ")");
  app_->fallthrough();  // common flags may follow the subcommand
}

CLI::App* Tool::add_command(const std::string& name, const std::string& description, Action action) {
  CLI::App* command = app_->add_subcommand(name, description);
  actions_[command] = std::move(action);
  return command;
}

void Tool::set_version_details(std::function<std::string()> details) { version_details_ = std::move(details); }

std::string Tool::version_text() const {
  std::string text = name_ + " (gpufleet) " FLEET_VERSION "\n";
  text += "build: " FLEET_BUILD_TYPE;
  text += FLEET_WITH_CUDA ? ", CUDA " FLEET_CUDA_VERSION : ", without CUDA";
  text += FLEET_WITH_TORCH ? ", libtorch " FLEET_TORCH_VERSION : ", without libtorch";
  if (version_details_) {
    std::string details = version_details_();
    if (!details.empty()) text += "\n" + details;
  }
  return text;
}

namespace {

// The deepest selected subcommand that has an action, or null.
const CLI::App* selected_command(const CLI::App& app, const std::map<const CLI::App*, Tool::Action>& actions) {
  const CLI::App* found = nullptr;
  for (const CLI::App* sub : app.get_subcommands()) {
    if (actions.count(sub) != 0) found = sub;
    if (const CLI::App* deeper = selected_command(*sub, actions)) found = deeper;
  }
  return found;
}

// std::cout's buffer: writes go through C's stdout (so the order with
// printf stays), and the errno of the first failed write is kept, so the
// error at exit can say why ("No space left on device"): by then errno
// belongs to other calls.
class StdoutRecorder : public std::streambuf {
 public:
  int first_error() const { return first_error_; }

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    if (std::fputc(c, stdout) == EOF) return record(traits_type::eof());
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const std::size_t written = std::fwrite(s, 1, static_cast<std::size_t>(n), stdout);
    if (written != static_cast<std::size_t>(n)) record(0);
    return static_cast<std::streamsize>(written);
  }
  int sync() override { return std::fflush(stdout) == 0 ? 0 : record(-1); }

 private:
  int record(int result) {
    if (first_error_ == 0) first_error_ = errno;
    return result;
  }
  int first_error_ = 0;
};

StdoutRecorder& stdout_recorder() {
  // Never destroyed: std::cout is flushed through it at exit, after the
  // destructors of function-local statics have run.
  static StdoutRecorder* recorder = new StdoutRecorder;
  return *recorder;
}

// Flushes standard output and checks that everything written to it arrived,
// as coreutils do before exiting: a report lost to a full disk or a closed
// descriptor is a failure, not a success that wrote nothing.
int finish_stdout(const std::string& program, int code) {
  std::cout.flush();
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  int err = stdout_recorder().first_error();
  if (err == 0) err = errno;
  if (!flush_failed && !std::ferror(stdout) && std::cout.good()) return code;
  std::cerr << program
            << ": error: writing standard output: " << (err != 0 ? std::strerror(err) : "an earlier write failed")
            << "\n";
  std::clearerr(stdout);
  return code == 0 ? static_cast<int>(ExitCode::kFailure) : code;
}

}  // namespace

int Tool::run(int argc, char** argv) {
  install_cleanup_on_signal();
  std::cout.rdbuf(&stdout_recorder());
  return finish_stdout(name_, run_command(argc, argv));
}

int Tool::run_command(int argc, char** argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app_->exit(e);  // --help, --version
    std::cerr << name_ << ": error: " << e.what() << "\n"
              << "Run '" << name_ << " --help' for the usage.\n";
    return static_cast<int>(ExitCode::kUsage);
  }
  try {
    setup_logging(name_, log_options_);
    spdlog::debug("CPU kernels: {}", cpu_isa_name(cpu_isa()));  // a bad GPUFLEET_CPU_ISA stops here
    const CLI::App* command = selected_command(*app_, actions_);
    if (command == nullptr) {
      if (actions_.empty()) {
        std::cerr << name_ << ": error: this build has no subcommands; '" << name_ << " --help' says what it will do\n";
      } else {
        std::string names;
        for (const CLI::App* sub : app_->get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
        std::cerr << name_ << ": error: give a subcommand (" << names << "); '" << name_ << " --help' describes them\n";
      }
      return static_cast<int>(ExitCode::kUsage);
    }
    return actions_.at(command)();
  } catch (const std::bad_alloc&) {
    std::cerr << name_ << ": error: out of memory\n";
    return static_cast<int>(ExitCode::kFailure);
  } catch (const std::exception& e) {
    // Libraries' own exceptions (libtorch's carry a backtrace) give their first line.
    std::string message = e.what();
    if (dynamic_cast<const Error*>(&e) == nullptr) message = message.substr(0, message.find('\n'));
    std::cerr << name_ << ": error: " << message << "\n";
    return static_cast<int>(exit_code_for(e));
  }
}

CLI::Validator in_range(double min, double max) {
  auto text = [](double v) { return fmt::format("{}", v); };
  return CLI::Validator(
      [=](std::string& value) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE || !std::isfinite(v)) {
          return "'" + value + "' is not a number";
        }
        if (v < min || v > max) return "must be between " + text(min) + " and " + text(max) + ", got " + value;
        return {};
      },
      "in [" + text(min) + ", " + text(max) + "]");
}

CLI::Validator output_path() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        value = normalize_output_path(value).string();
        return {};
      },
      "");
}

CLI::Option* add_threads_option(CLI::App* command, int* threads) {
  return command->add_option("--threads", *threads, "CPU threads, libtorch and BLAS (0: their defaults)")
      ->check(in_range(0, 1024));
}

CLI::Option* add_json_flag(CLI::App* command, bool* json) {
  return command->add_flag("--json", *json, "Print the result as JSON on stdout (logs stay on stderr)");
}

}  // namespace fleet
