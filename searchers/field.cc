#include "searchers/field.h"

#include <algorithm>
#include <cmath>

#include "stagetree/sequence_json.h"

namespace hippo {

std::string brief(const nlohmann::json& value) {
  std::string text = value.dump();
  constexpr size_t kMax = 40;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  return text;
}

void Field::fail(const std::string& message) const {
  throw SpecError((path_.empty() ? "$" : path_) + ": " + message);
}

void Field::check_keys(const std::vector<std::string_view>& allowed) const {
  if (!value_->is_object()) fail("expected an object, got " + brief(*value_));
  for (const auto& [key, child] : value_->items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || a == key;
    if (!known) (*this)[key].fail("unknown field");
  }
}

bool Field::has(const std::string& key) const {
  return value_->is_object() && value_->contains(key);
}

Field Field::operator[](const std::string& key) const {
  if (!value_->is_object()) fail("expected an object, got " + brief(*value_));
  std::string path = path_.empty() ? key : path_ + "." + key;
  auto it = value_->find(key);
  if (it == value_->end()) Field(*value_, path).fail("missing");
  return Field(*it, std::move(path));
}

size_t Field::items(size_t min_size) const {
  if (!value_->is_array()) fail("expected a list, got " + brief(*value_));
  if (value_->size() < min_size)
    fail("expected at least " + std::to_string(min_size) + " element" + (min_size == 1 ? "" : "s") +
         ", got " + brief(*value_));
  return value_->size();
}

Field Field::operator[](size_t index) const {
  return Field(value_->at(index), path_ + "[" + std::to_string(index) + "]");
}

double Field::number() const {
  if (!value_->is_number()) fail("expected a number, got " + brief(*value_));
  double v = value_->get<double>();
  if (!std::isfinite(v)) fail("expected a finite number, got " + brief(*value_));
  return v;
}

int64_t Field::integer(int64_t min, int64_t max) const {
  if (!value_->is_number()) fail("expected an integer, got " + brief(*value_));
  int64_t v = 0;
  if (value_->is_number_integer() &&
      !(value_->is_number_unsigned() && value_->get<uint64_t>() > uint64_t(INT64_MAX))) {
    v = value_->get<int64_t>();
  } else {
    double d = value_->get<double>();
    // 2^63 is the first double that no int64 holds.
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) >= 9223372036854775808.0)
      fail("expected an integer, got " + brief(*value_));
    v = static_cast<int64_t>(d);
  }
  if (v < min || v > max)
    fail("expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
         brief(*value_));
  return v;
}

const std::string& Field::text() const {
  if (!value_->is_string()) fail("expected a string, got " + brief(*value_));
  return value_->get_ref<const std::string&>();
}

bool Field::boolean() const {
  if (!value_->is_boolean()) fail("expected true or false, got " + brief(*value_));
  return value_->get<bool>();
}

nlohmann::json parse_json_text(std::string_view text) {
  // Depth of [ and { outside strings, on the raw bytes: nothing deeper reaches the parser.
  size_t too_deep = json_nesting_beyond(text, kMaxSpecDepth);
  if (too_deep != std::string_view::npos) {
    int64_t line =
        1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(too_deep), '\n');
    throw SpecError("$: nested deeper than " + std::to_string(kMaxSpecDepth) + " levels at line " +
                    std::to_string(line));
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw SpecError(std::string("$: not valid JSON: ") + e.what());
  }
}

}  // namespace hippo
