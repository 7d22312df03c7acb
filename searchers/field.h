// Reading a JSON spec with the path of every value at hand, so that each error names the field it
// is about: `hyperparameters.lr.gamma: expected a number or a distribution, got "x"`.
//
// A Field is a view: it refers to a json value owned by the caller and must not outlive it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hippo {

// Every error in a study spec. what() starts with the JSON path of the offending field ("$" for the
// whole document), then ": " and what is wrong.
struct SpecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A short rendering of a JSON value for messages: its text, cut after 40 characters.
std::string brief(const nlohmann::json& value);

class Field {
 public:
  Field(const nlohmann::json& value, std::string path) : value_(&value), path_(std::move(path)) {}

  const nlohmann::json& json() const { return *value_; }
  const std::string& path() const { return path_; }

  // Throws SpecError("<path>: <message>").
  [[noreturn]] void fail(const std::string& message) const;

  // Object access. check_keys() fails (at the key's own path) on a key not in `allowed`.
  bool is_object() const { return value_->is_object(); }
  void check_keys(const std::vector<std::string_view>& allowed) const;
  bool has(const std::string& key) const;
  Field operator[](const std::string& key) const;  // fails when the key is missing

  // Array access. items() fails unless this is an array with at least `min_size` elements.
  size_t items(size_t min_size) const;
  Field operator[](size_t index) const;

  // Scalars; each fails on the wrong type. number() refuses NaN and infinities; integer() accepts
  // integral numbers only (2.0 is 2), within [min, max].
  double number() const;
  int64_t integer(int64_t min, int64_t max) const;
  const std::string& text() const;
  bool boolean() const;

 private:
  const nlohmann::json* value_;
  std::string path_;
};

// Parses spec text as JSON. Refuses, with a SpecError at "$", text that is not JSON and nesting
// deeper than kMaxSpecDepth (checked on the raw text before the parser builds anything).
inline constexpr int kMaxSpecDepth = 32;
nlohmann::json parse_json_text(std::string_view text);

}  // namespace hippo
