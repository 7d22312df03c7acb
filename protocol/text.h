// Text that hippo's programs read from their users (options, environment variables), and text
// from outside made safe to print.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hippo::protocol {

// `text` safe to print on a terminal: every control character (C0, DEL, and the C1 controls
// U+0080-U+009F in UTF-8, which terminals also obey: a clear screen, a cursor move, a line that
// forges another) is written as `\xHH` (C1: `\u00HH`); everything else, UTF-8 included, is kept.
// Names and values come from specs, trainers and peers: tables, trees and logs print them so.
inline std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char escaped[8];
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      std::snprintf(escaped, sizeof escaped, "\\u00%02x", static_cast<unsigned char>(text[++i]));
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// Output of another process (a trainer's or an external searcher's stderr) for a terminal or a
// log: cut into lines, each escaped as printable() escapes names and starting with a prefix that
// names its source ("[trainer 4242] "). No byte of it can then clear the screen, set the
// terminal's title or start a line that passes for hippo's own log line. Bytes after the last
// newline wait for the rest of their line; a line longer than kMaxLineBytes is cut there (the
// rest follows as another line), so that memory stays bounded whatever the process writes.
class PrintableLines {
 public:
  static constexpr size_t kMaxLineBytes = 16384;
  explicit PrintableLines(std::string prefix) : prefix_(std::move(prefix)) {}
  // The complete lines that `bytes` ends, each prefix + printable(line) + "\n" (a CR before the
  // newline dropped).
  std::string add(std::string_view bytes) {
    std::string out;
    for (char c : bytes) {
      if (c == '\n') {
        if (!pending_.empty() && pending_.back() == '\r') pending_.pop_back();
        line(out);
      } else {
        pending_ += c;
        if (pending_.size() == kMaxLineBytes) line(out);
      }
    }
    return out;
  }
  // The bytes after the last newline as a line of their own ("" when there are none): the
  // process has ended.
  std::string flush() {
    std::string out;
    if (!pending_.empty()) line(out);
    return out;
  }

 private:
  void line(std::string& out) {
    out += prefix_ + printable(pending_) + "\n";
    pending_.clear();
  }
  std::string prefix_;
  std::string pending_;
};

// The items of a comma-separated list, empty ones kept: "a,,b" -> {"a", "", "b"}, "" -> {""}.
// The views point into `text`.
inline std::vector<std::string_view> comma_separated(std::string_view text) {
  std::vector<std::string_view> items;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma - start));
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

}  // namespace hippo::protocol
