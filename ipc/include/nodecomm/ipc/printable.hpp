// Names chosen by clients (job names, tensor names) on their way to a log line or to
// nodecommctl's output: a name is the client's to choose, the terminal and the log are not.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "nodecomm/ipc/fixed_text.hpp"

namespace nodecomm::ipc {

// `text` with every byte outside printable ASCII (control characters, ESC of terminal escape
// sequences, newlines that would forge a log line, DEL, bytes of UTF-8 sequences) written as
// \xNN and a backslash as \\, so that the result prints as one line and reads back unambiguously.
inline std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(ch);
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

// A fixed-size name field of an ABI record (bounded by its array, see bounded_text), printable.
template <size_t N>
std::string printable_text(const char (&text)[N]) {
  return printable(bounded_text(text));
}

}  // namespace nodecomm::ipc
