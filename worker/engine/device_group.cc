#include "worker/engine/device_group.h"

#include <algorithm>
#include <stdexcept>

namespace hippo::worker {
namespace {

// A decimal number of 1 to 4 digits, else false.
bool number(const std::string& text, int& out) {
  if (text.empty() || text.size() > 4 || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = std::stoi(text);
  return true;
}

}  // namespace

DeviceGroup DeviceGroup::parse(const std::string& text) {
  DeviceGroup g;
  auto bad = [&](const std::string& expected) {
    return std::invalid_argument("devices \"" + text + "\": expected " + expected);
  };
  if (text.rfind("cpu:", 0) == 0) {
    if (!number(text.substr(4), g.count) || g.count < 1 || g.count > 256)
      throw bad("cpu:N with N from 1 to 256");
    return g;
  }
  if (text.rfind("cuda:", 0) != 0) throw bad("cpu:N, cuda:A or cuda:A-B");
  const std::string range = text.substr(5);
  const size_t dash = range.find('-');
  int last = 0;
  if (!number(range.substr(0, dash), g.first) ||
      !number(dash == std::string::npos ? range : range.substr(dash + 1), last) || last < g.first)
    throw bad("cuda:A or cuda:A-B with A <= B");
  g.cuda = true;
  g.count = last - g.first + 1;
  return g;
}

DeviceGroup DeviceGroup::of_device(const std::string& device) {
  return device == "cpu" ? DeviceGroup{} : parse(device);
}

std::string DeviceGroup::home() const {
  return cuda ? "cuda:" + std::to_string(first) : "cpu";
}

std::vector<int> DeviceGroup::stage_gpus(int stages) const {
  const int used = std::min(stages, count);
  std::vector<int> gpus;
  for (int s = 0; s < stages; ++s) gpus.push_back(first + s * used / stages);
  return gpus;
}

}  // namespace hippo::worker
