// Text in the fixed-size char arrays of ABI records (names, error messages).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

namespace nodecomm::ipc {

// Copies as much of `text` as fits and always NUL-terminates.
template <size_t N>
void copy_text(char (&dst)[N], const std::string& text) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(dst, text.data(), n);
  dst[n] = '\0';
}

// The text up to the first NUL or the end of the array, whichever comes first: safe on
// records written by an untrusted peer.
template <size_t N>
std::string bounded_text(const char (&text)[N]) {
  return std::string(text, strnlen(text, N));
}

template <size_t N>
bool is_terminated(const char (&text)[N]) {
  return std::memchr(text, '\0', N) != nullptr;
}

}  // namespace nodecomm::ipc
