#include "nodecomm/ipc/byte_size.hpp"

#include <fmt/format.h>

#include <cctype>

namespace nodecomm::ipc {

namespace {

char lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

// The power of 1024 a unit stands for, or -1 when `unit` is not one (see byte_size.hpp).
int unit_shift(std::string_view unit) {
  if (unit.empty()) return 0;
  if (unit.size() == 1 && lower(unit[0]) == 'b') return 0;
  int shift = 0;
  switch (lower(unit[0])) {
    case 'k':
      shift = 10;
      break;
    case 'm':
      shift = 20;
      break;
    case 'g':
      shift = 30;
      break;
    case 't':
      shift = 40;
      break;
    default:
      return -1;
  }
  std::string rest;
  for (char c : unit.substr(1)) rest += lower(c);
  return rest.empty() || rest == "b" || rest == "i" || rest == "ib" ? shift : -1;
}

}  // namespace

std::optional<uint64_t> parse_byte_size(std::string_view text, std::string& why) {
  size_t i = 0;
  uint64_t value = 0;
  bool overflow = false;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const auto digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) overflow = true;
    value = value * 10 + digit;
  }
  if (i == 0) {
    why = text.empty() ? "empty, expected a number of bytes such as 4096, 512K or 64M"
                       : "not a number of bytes (digits with an optional unit such as 512K or 64M)";
    return std::nullopt;
  }
  const int shift = unit_shift(text.substr(i));
  if (shift < 0) {
    why = fmt::format(
        "unknown unit '{}' (B, K, M, G or T, optionally followed by iB or B; powers of 1024)",
        text.substr(i));
    return std::nullopt;
  }
  // Checked before shifting: a wrapped size would pass any range check after it.
  if (overflow || value > (UINT64_MAX >> shift)) {
    why = fmt::format("more than {} bytes", UINT64_MAX);
    return std::nullopt;
  }
  why.clear();
  return value << shift;
}

std::string format_byte_size(uint64_t bytes) {
  if (bytes != 0 && bytes % (uint64_t{1} << 30) == 0) return fmt::format("{}G", bytes >> 30);
  if (bytes != 0 && bytes % (uint64_t{1} << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes != 0 && bytes % (uint64_t{1} << 10) == 0) return fmt::format("{}K", bytes >> 10);
  return std::to_string(bytes);
}

std::string human_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, kUnits[u]);
}

}  // namespace nodecomm::ipc
