#include "orion/kernel_name.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace fleet::orion {

namespace {

std::string demangle(std::string_view name) {
  if (name.size() < 2 || name[0] != '_' || name[1] != 'Z') return std::string(name);
  const std::string mangled(name);
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
                                             std::free);
  return status == 0 && out ? std::string(out.get()) : mangled;
}

}  // namespace

std::string kernel_name_key(std::string_view name) {
  const std::string full = demangle(name);
  std::string_view s = full;
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  if (s.substr(0, 5) == "void ") s.remove_prefix(5);
  static constexpr std::string_view kAnonymous = "(anonymous namespace)";
  std::string key;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.substr(i, kAnonymous.size()) == kAnonymous) {
      key += kAnonymous;
      i += kAnonymous.size() - 1;
      continue;
    }
    if (s[i] == '<' || s[i] == '(') break;  // template arguments or parameters start
    key += s[i];
  }
  while (!key.empty() && key.back() == ' ') key.pop_back();
  return key.empty() ? std::string(name) : key;
}

}  // namespace fleet::orion
