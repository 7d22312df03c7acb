#include "worker/options.h"

#include "kernels/kernels.h"

namespace hippo::worker {

std::string parse_devices(Options& o) {
  auto number = [](const std::string& text, int& out) {
    if (text.empty() || text.size() > 4 ||
        text.find_first_not_of("0123456789") != std::string::npos)
      return false;
    out = std::stoi(text);
    return true;
  };
  const std::string& d = o.devices;
  if (d.rfind("cpu:", 0) == 0) {
    if (!number(d.substr(4), o.device_count) || o.device_count < 1 || o.device_count > 256)
      return "expected cpu:N with N from 1 to 256, got \"" + d + "\"";
    return "";
  }
  if (d.rfind("cuda:", 0) != 0) return "expected cpu:N or cuda:A-B, got \"" + d + "\"";
  const std::string range = d.substr(5);
  const size_t dash = range.find('-');
  int first = 0, last = 0;
  if (!number(range.substr(0, dash), first) ||
      !number(dash == std::string::npos ? range : range.substr(dash + 1), last) || last < first)
    return "expected cuda:A or cuda:A-B with A <= B, got \"" + d + "\"";
  const int present = hippo::kernels::cuda_device_count();
  if (last >= present)
    return d + " requested, this machine has " + std::to_string(present) + " CUDA devices";
  o.device_count = last - first + 1;
  return "";
}

}  // namespace hippo::worker
