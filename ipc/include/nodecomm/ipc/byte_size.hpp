// The one grammar for byte sizes that people type (nodecommd's flags, its configuration file and
// environment, `nodecommctl set`, the client library's NODECOMM_* variables, nodecomm-bench's
// flags), and the formatters that print sizes back. Each caller used to have its own parser,
// and they disagreed (the daemon took "64MiB", the library refused it, only the bench noticed
// overflow); now they differ only in the range each setting allows.
//
// Grammar: DIGITS [UNIT], no sign, spaces, fraction or hex.
//   DIGITS  decimal, at least one digit
//   UNIT    case-insensitive, always a power of 1024 (nobody sizes a buffer in powers of 1000):
//             B                       x 1
//             K, KB, KI, KIB          x 2^10
//             M, MB, MI, MIB          x 2^20
//             G, GB, GI, GIB          x 2^30
//             T, TB, TI, TIB          x 2^40
// So "4096", "512k", "64M", "64MiB", "1G", "2TB" are sizes; "", "-1", " 8", "1.5M", "0x10",
// "12Q", "64MiBs" are not, and neither is anything above 2^64 - 1 bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nodecomm::ipc {

// The size `text` spells, or empty with `why` saying what is wrong (for example "unknown unit
// 'Q' (B, K, M, G or T, optionally followed by iB or B; powers of 1024)" or "more than
// 18446744073709551615 bytes"). `why` does not repeat `text`: callers name the setting and the
// value around it.
std::optional<uint64_t> parse_byte_size(std::string_view text, std::string& why);
inline std::optional<uint64_t> parse_byte_size(std::string_view text) {
  std::string why;
  return parse_byte_size(text, why);
}

// Exactly, in the shortest form the grammar reads back: "512K", "64M", "1G", or the plain
// number ("0", "1000"). Stops at G (2^40 prints as "1024G"), the form the daemon has always
// published in its counters and admin replies.
std::string format_byte_size(uint64_t bytes);

// Approximately, for people reading a report: "512 B", "1.5 KiB", "64.0 MiB", up to TiB.
std::string human_bytes(double bytes);

}  // namespace nodecomm::ipc
